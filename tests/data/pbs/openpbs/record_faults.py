"""Record what PBS clients print while pbs_server is down, and qdel's races (testbed).

    scripts/pbs-testbed start >/dev/null && .venv/bin/python tests/data/pbs/openpbs/record_faults.py

Adds to record.py's files (same layout, `<file>.meta.json` beside each): every client
while pbs_server is stopped (`qterm -t quick` on the head host; `scripts/pbs-testbed
start` brings it back), qdel of a job that is already being deleted, and one qdel of
a running, a finished and a running job. Takes about 30 s; needs no fresh datastore.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from record import TESTBED, job_script, qsub, run, save, wait

NAMES = {"down": "study-d0e5000001", "race": "study-4ace000001",
         "race2": "study-4ace000002", "done": "study-d0e5000002"}


def main() -> None:
    """Record the server-down and qdel-race cases."""
    if subprocess.run([str(TESTBED), "env"], capture_output=True).returncode != 0:
        sys.exit(f"the testbed is not running: {TESTBED} start")
    work = Path("/tmp/scalestudy-pbs-record-faults")
    subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir(mode=0o755)
    subprocess.run(["chown", "pbsuser:pbsuser", str(work)], check=True)

    done = qsub(work, job_script(work, NAMES["done"], "true\n").name)
    wait(work, done, "finished", lambda a: a["job_state"] == "F")
    first = qsub(work, job_script(work, NAMES["race"], "sleep 60\n").name)
    second = qsub(work, job_script(work, NAMES["race2"], "sleep 60\n").name)
    for job_id in (first, second):
        wait(work, job_id, "running", lambda a: a["job_state"] == "R")
    argv = ["qdel", first, done, second]
    save("qdel/running-finished-running.txt", argv, run(argv, work))
    # Right after it the first job is exiting (E): a second qdel is refused.
    argv = ["qdel", first]
    proc = run(argv, work)
    if proc.returncode != 0:
        save("qdel/being-deleted.txt", argv, proc, "right after the qdel above")
    else:
        print("  qdel/being-deleted.txt: not recorded (qdel accepted it again)",
              file=sys.stderr)

    script = job_script(work, NAMES["down"], "true\n").name
    stopped = run(["qterm", "-t", "quick"], work, root=True)
    if stopped.returncode != 0:
        sys.exit(f"qterm failed: {stopped.stderr}")
    time.sleep(1)
    note = "pbs_server stopped (qterm -t quick)"
    for rel, argv in [
        ("qsub-errors/server-down.txt", ["qsub", script]),
        ("qstat-x-f-F-json/server-down.json", ["qstat", "-x", "-f", "-F", "json", done]),
        ("qstat-f/server-down.txt", ["qstat", "-f", done]),
        ("qselect/x-N-server-down.txt", ["qselect", "-x", "-N", NAMES["done"]]),
        ("qdel/server-down.txt", ["qdel", done]),
    ]:
        save(rel, argv, run(argv, work), note)
    subprocess.run([str(TESTBED), "start"], check=True, capture_output=True)
    print("done", file=sys.stderr)


if __name__ == "__main__":
    main()
