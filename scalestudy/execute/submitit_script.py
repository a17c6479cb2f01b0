"""The `submit: submitit` Submitter: submitit's own sbatch script and pickled task, with
the same resources, setup lines and environment as the rendered script.

submitit writes the script (kept as runs/<id>/job.sh) and the task every rank runs
(runs/<id>/submitit/task.pkl: the bundled workload or the `command`, started by
execute.submitit_task). scalestudy submits that script through the same engine as a
rendered one (execute.submit), so both paths share the journal, the lock and the
retries. The script links task.pkl to the `<job id>_submitted.pkl` submitit's runner
looks for, so a job whose submitter was killed right after sbatch still finds its task.
"""

from __future__ import annotations

import math
import uuid
from pathlib import Path

from scalestudy.core.grid import Run
from scalestudy.core.spec import walltime_seconds
from scalestudy.execute import workspace as ws
from scalestudy.execute.images import digest_for
from scalestudy.execute.submitit_task import WorkloadTask
from scalestudy.site.plan import Plan
from scalestudy.site.program import Program
from scalestudy.site.render import context, environment, job_request, quote
from scalestudy.site.schedulers import options_of
from scalestudy.site.schedulers.slurm import SlurmOptions

TASK = "task.pkl"


class SubmititScript:
    """submitit's SlurmExecutor, used to write the script; submission is scalestudy's."""

    via = "submitit"

    def write_script(self, plan: Plan, run: Run, run_dir: Path) -> Path:
        """runs/<id>/job.sh (submitit's sbatch script) and runs/<id>/submitit/task.pkl."""
        import submitit

        run_dir = run_dir.resolve()
        folder = run_dir / "submitit"
        folder.mkdir(parents=True, exist_ok=True)
        ctx = context(plan.study, plan.system, run, run_dir)
        job = job_request(plan.study, plan.system, run, run_dir)
        minutes = math.ceil(walltime_seconds(plan.study.job.walltime) / 60)
        exports = [f"export OMP_NUM_THREADS={ctx['threads']}",
                   *(f"export {k}={quote(v)}" for k, v in ctx["env"].items()),
                   *_container_lines(ctx["program"], plan, run)]
        # env.txt, written in the job script as the rendered scripts write it
        record = environment().get_template("_record_env.sh.j2").render(ctx).splitlines()
        link = (f"ln -sfn {quote(str(folder / TASK))} "
                f"{quote(str(folder))}/\"${{SLURM_JOB_ID}}_submitted.pkl\"")
        executor = submitit.SlurmExecutor(folder=folder, python=quote(ctx["python"]))
        slurm = options_of(job, SlurmOptions)  # submitit submits to Slurm alone
        launched = 'export SCALESTUDY_LAUNCHED_AT="$(date +%s.%N)"'  # the record's start-up
        executor.update_parameters(
            job_name=job.name, nodes=run.nodes, ntasks_per_node=run.ranks_per_node,
            cpus_per_task=ctx["threads"], gpus_per_node=job.gpus_per_node or None,
            time=minutes, partition=job.queue, qos=slurm.qos, constraint=slurm.constraint,
            account=job.account, setup=[*ctx["setup"], *exports, *record, link, launched],
            stderr_to_stdout=False,
        )
        program: Program = ctx["program"]  # what every rank runs, built once for the run
        task = submitit.helpers.DelayedSubmission(
            WorkloadTask(program.argv(), str(run_dir), ctx["workdir"]))
        task.set_timeout(minutes, executor.max_num_timeout)
        tmp = folder / f".{TASK}.{uuid.uuid4().hex}"
        task.dump(tmp)
        tmp.replace(folder / TASK)
        # submitit's own script text (its submission otherwise runs sbatch itself)
        text = executor._make_submission_file_text(executor._submitit_command_str,
                                                   uuid.uuid4().hex)
        path = run_dir / ws.SCRIPT
        ws.write_text_atomic(path, text, mode=0o755)
        return path


def _container_lines(program: Program, plan: Plan, run: Run) -> list[str]:
    """The container's provenance exports, as the rendered scripts write them."""
    box = program.container
    if box is None:
        return []
    digest = digest_for(plan.study.container_named(run.container))
    return [f"export SCALESTUDY_CONTAINER={quote(box.label)} "
            f"SCALESTUDY_CONTAINER_RUNTIME={quote(box.runtime)} "
            f"SCALESTUDY_CONTAINER_IMAGE={quote(box.image)}",
            *([f"export SCALESTUDY_CONTAINER_DIGEST={quote(digest)}"] if digest else []),
            *([f'SCALESTUDY_CONTAINER_RUNTIME_VERSION="$({box.version_command} 2>&1 | '
               'head -n 1 || true)"', "export SCALESTUDY_CONTAINER_RUNTIME_VERSION"]
              if box.version_command else [])]
