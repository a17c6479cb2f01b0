"""What submitit pickles and runs on every task of a `submit: submitit` job (imports
only the standard library and submitit, so it loads fast on compute nodes)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


class WorkloadTask:
    """Export the torch.distributed variables, run the program, return its exit code.

    Rank 0's output goes to the run's stdout.log/stderr.log, as on the native path; every
    rank runs in `workdir` (the spec's directory) with SCALESTUDY_RUN_DIR set."""

    def __init__(self, argv: list[str], run_dir: str, workdir: str | None = None) -> None:
        self.argv = argv
        self.run_dir = run_dir
        self.workdir = workdir or run_dir

    def __call__(self) -> int:
        """Run the workload (or the `command`) as a child process on this task."""
        import submitit

        dist = submitit.helpers.TorchDistributedEnvironment().export(
            set_cuda_visible_devices=False)
        run_dir = Path(self.run_dir)
        os.environ["SCALESTUDY_RUN_DIR"] = str(run_dir)
        if dist.rank == 0:
            hosts = submitit.JobEnvironment().hostnames
            (run_dir / "hosts.txt").write_text("".join(f"{h}\n" for h in hosts))
            with (run_dir / "stdout.log").open("ab") as out, \
                    (run_dir / "stderr.log").open("ab") as err:
                code = subprocess.call(self.argv, cwd=self.workdir, stdout=out, stderr=err)
            (run_dir / "exit_code").write_text(f"{code}\n")
        else:
            code = subprocess.call(self.argv, cwd=self.workdir)
        if code != 0:
            raise RuntimeError(f"rank {dist.rank}: {self.argv[0]} exited with code {code}")
        return code
