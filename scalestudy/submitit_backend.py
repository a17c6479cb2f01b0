"""Slurm through submitit (`job: {submit: submitit}`): the same resources, environment and
setup lines as the rendered script, the same run directory and metrics.

submitit writes its own sbatch script (kept in runs/<id>/submitit/) and starts every
task with srun; each task finds its rank with submitit's TorchDistributedEnvironment
and runs the bundled workload (or the `command`) as a child process. Rank 0's output
goes to the run's stdout.log/stderr.log, as with the sbatch path.
"""

from __future__ import annotations

import math
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from scalestudy import state
from scalestudy.grid import Run
from scalestudy.render import context, job_request, quote
from scalestudy.spec import walltime_seconds
from scalestudy.submit import Journal, now

if TYPE_CHECKING:
    from scalestudy.runner import Plan
    from scalestudy.tracking import Submission


class WorkloadTask:
    """What submitit pickles and runs on every task of the job."""

    def __init__(self, argv: list[str], run_dir: str) -> None:
        self.argv = argv
        self.run_dir = run_dir

    def __call__(self) -> int:
        """Export the torch.distributed variables, run the program, return its exit code."""
        import submitit

        dist = submitit.helpers.TorchDistributedEnvironment().export(
            set_cuda_visible_devices=False)
        run_dir = Path(self.run_dir)
        if dist.rank == 0:
            (run_dir / "env.txt").write_text(
                "".join(f"{k}={v}\n" for k, v in sorted(os.environ.items())))
            hosts = submitit.JobEnvironment().hostnames
            (run_dir / "hosts.txt").write_text("".join(f"{h}\n" for h in hosts))
            with (run_dir / "stdout.log").open("ab") as out, \
                    (run_dir / "stderr.log").open("ab") as err:
                code = subprocess.call(self.argv, cwd=run_dir, stdout=out, stderr=err)
            (run_dir / "exit_code").write_text(f"{code}\n")
        else:
            code = subprocess.call(self.argv, cwd=run_dir)
        if code != 0:
            raise RuntimeError(f"rank {dist.rank}: {self.argv[0]} exited with code {code}")
        return code


def program_argv(ctx: dict, python: str) -> list[str]:
    """What each task runs: `python -m scalestudy.workload ...` or the user's command."""
    program = ctx["program"]
    if program and program[0] == "-m":
        return [python, *program]
    return list(program)


def submit_with_submitit(plan: Plan, now_runs: Sequence[Run], later: Sequence[Run],
                         active: int) -> Submission:
    """Submit runs through submitit's SlurmExecutor; job ids go to the journal."""
    import submitit

    from scalestudy.runner import prepare
    from scalestudy.tracking import Submission

    prepare(plan, now_runs)  # run.json and job.sh (the sbatch form, kept for reference)
    journal = Journal(plan.directory / "jobs.jsonl")
    done: list[tuple[Run, str]] = []
    for run in now_runs:
        run_dir = plan.run_dir(run).resolve()
        state.archive_attempt(run_dir)
        ctx = context(plan.study, plan.system, run, run_dir)
        job = job_request(plan.study, plan.system, run, run_dir)
        exports = [f"export OMP_NUM_THREADS={ctx['threads']}",
                   *(f"export {k}={quote(v)}" for k, v in ctx["env"].items())]
        executor = submitit.SlurmExecutor(folder=run_dir / "submitit", python=ctx["python"])
        executor.update_parameters(
            job_name=job.name, nodes=run.nodes, ntasks_per_node=run.ranks_per_node,
            cpus_per_task=ctx["threads"], gpus_per_node=job.gpus_per_node or None,
            time=math.ceil(walltime_seconds(plan.study.job.walltime) / 60),
            partition=job.queue, qos=job.qos, constraint=job.constraint, account=job.account,
            setup=[*ctx["setup"], *exports], stderr_to_stdout=False,
        )
        submitted = executor.submit(WorkloadTask(program_argv(ctx, ctx["python"]), str(run_dir)))
        attempt = len([e for e in journal.entries() if e["run_id"] == run.run_id]) + 1
        journal.record({"run_id": run.run_id, "job_id": str(submitted.job_id),
                        "attempt": attempt, "scheduler": "slurm", "via": "submitit",
                        "submitted_at": now()})
        state.write_json_atomic(run_dir / state.STATUS, {
            "state": "submitted", "job_id": str(submitted.job_id), "submitted_at": now()})
        done.append((run, str(submitted.job_id)))
    return Submission(done, active + len(done), list(later))

