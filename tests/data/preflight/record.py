"""Record what preflight asks the schedulers, from the two testbeds, for the parser tests.

    eval "$(scripts/slurm-testbed start)" && scripts/pbs-testbed start >/dev/null
    .venv/bin/python tests/data/preflight/record.py

Slurm commands run as this user with the testbed's SLURM_CONF; PBS commands as pbsuser
through `scripts/pbs-testbed exec`. Each output goes to a file named after its command.
"""

from __future__ import annotations

import getpass
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
PBS = [str(ROOT / "scripts" / "pbs-testbed"), "exec", "--"]

COMMANDS = {
    "slurm-scontrol-show-partition.txt": ["scontrol", "-a", "-o", "show", "partition"],
    "slurm-sinfo.txt": ["sinfo", "-h", "-o", "%R|%T|%D"],
    "slurm-sacctmgr-show-assoc.txt": ["sacctmgr", "-n", "-P", "show", "assoc",
                                      f"user={getpass.getuser()}",
                                      "format=Account,Partition,QOS"],
    "slurm-sacctmgr-show-qos.txt": ["sacctmgr", "-n", "-P", "show", "qos",
                                    "format=Name,MaxWall,MaxTRESPerJob,MinTRESPerJob,"
                                    "MaxJobsPU,MaxSubmitPU"],
    "pbs-qstat-Q-f-F-json.json": [*PBS, "qstat", "-Q", "-f", "-F", "json"],
    "pbs-qstat-B-f-F-json.json": [*PBS, "qstat", "-B", "-f", "-F", "json"],
    "pbs-qmgr-list-queue.txt": [*PBS, "qmgr", "-c", "list queue @default"],
}


def main() -> None:
    for name, argv in COMMANDS.items():
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
        (HERE / name).write_text(done.stdout)
        print(f"{name}: {len(done.stdout)} characters")


if __name__ == "__main__":
    main()
