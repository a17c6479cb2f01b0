"""`scalestudy probe`: the largest per-GPU batch that fits, and the throughput up to it.

One job of one rank on one node of the study's system, running the bundled workload
in `--probe-batch` mode with the study's model, image size, precision and options. It
lives in `results/<study>/probe/` (job.sh, logs, metrics.jsonl), apart from the runs:
on this machine it runs at once; on a scheduler it is submitted and, with `wait`,
followed to its end. Its answer can feed the grid: the batch sizes it suggests are
the powers of two that fit, and the largest batch that fits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from scalestudy.core.errors import ScalestudyError
from scalestudy.core.grid import Run
from scalestudy.core.spec import walltime_seconds
from scalestudy.execute import commands
from scalestudy.execute import workspace as ws
from scalestudy.execute.local import execute
from scalestudy.execute.status import RunStatus
from scalestudy.execute.tracking import longest_poll, poll
from scalestudy.site.plan import Plan
from scalestudy.site.render import render

PROBE_DIR = "probe"
JOB_ID_FILE = "job_id"
POLL_S = 5.0
#: How long past its walltime a submitted probe is waited for (queue time included).
WAIT_GRACE_S = 3600.0


def probe_dir(plan: Plan) -> Path:
    """Where the probe of a study lives."""
    return plan.directory / PROBE_DIR


def probe_run(plan: Plan, min_batch: int) -> Run:
    """The probe as a run: one node, one rank, DDP, the study's workload."""
    study = plan.study
    if not study.workload.bundled:
        raise ScalestudyError(
            f"{study.line_of(('workload', 'kind'))}: the batch-size probe runs the bundled "
            "benchmark; a `command` workload has no model for it to probe")
    w = study.workload
    return Run(run_id="probe", study=study.name, system=study.system, scaling=study.scaling,
               nodes=1, ranks_per_node=1, world_size=1, batch_size=min_batch,
               global_batch=min_batch, backend="ddp", tuning="default", repeat=0,
               precision=str(w.option_values()["precision"]), **w.run_fields())


def prepare(plan: Plan, min_batch: int, max_batch: int,
            memory_limit_gb: float | None) -> tuple[Run, Path]:
    """Write the probe's job script (an earlier probe's files move to attempts/)."""
    run = probe_run(plan, min_batch)
    directory = probe_dir(plan).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    ws.archive_attempt(directory)  # logs, status, metrics of an earlier probe
    (directory / JOB_ID_FILE).unlink(missing_ok=True)
    extra = ["--probe-batch", "--min-batch", str(min_batch), "--max-batch", str(max_batch)]
    if memory_limit_gb is not None:
        extra += ["--memory-limit-gb", repr(memory_limit_gb)]
    ws.write_run(directory, run.params())
    script = render(plan.study, plan.system, run, directory, extra_args=extra)
    ws.write_text_atomic(directory / ws.SCRIPT, script, mode=0o755)
    return run, directory


def run_here(plan: Plan, run: Run, directory: Path) -> RunStatus:
    """Run the probe on this machine (the local executor); its status."""
    return execute(directory, run.params(), walltime_seconds(plan.study.job.walltime))


def submit(plan: Plan, directory: Path) -> str:
    """Submit the probe's job; its id is kept in probe/job_id."""
    job_id = commands.submit(plan.scheduler, directory / ws.SCRIPT,
                             extra=plan.system.scheduler_options.submit_args)
    ws.write_text_atomic(directory / JOB_ID_FILE, job_id + "\n")
    return job_id


def wait(plan: Plan, directory: Path, poll_s: float = POLL_S,
         timeout_s: float | None = None) -> str:
    """Follow the submitted probe to its end (backing off, at most `timeout_s`: by
    default its walltime plus an hour in the queue); the scheduler's final state."""
    job_id = (directory / JOB_ID_FILE).read_text().strip()
    if timeout_s is None:
        timeout_s = walltime_seconds(plan.study.job.walltime) + WAIT_GRACE_S
    final: list[str] = []

    def ended() -> bool:
        job = commands.query(plan.scheduler, [job_id]).get(plan.scheduler.short_id(job_id))
        if job is not None and job.done:
            final.append(job.state.value)
        return bool(final)

    poll(ended, poll_s, longest_poll(), timeout_s, what=f"the probe's job {job_id}")
    return final[0]


def result(directory: Path) -> dict[str, Any] | None:
    """The probe's record, or None while there is none."""
    record = ws.read_record(directory / ws.METRICS)
    if not isinstance(record, dict) or record.get("source") != "batch_probe":
        return None
    # read_record types its line as a metrics record; this one is the probe's own (a dict).
    return cast(dict[str, Any], record)


def suggested_batches(record: dict[str, Any]) -> list[int]:
    """Batch sizes for `grid.batch_size`: the powers of two that fit, and the largest
    batch that fits."""
    best = record.get("largest_batch_that_fits")
    if not best:
        return []
    fitting = sorted(p["batch_size"] for p in record["points"] if p["fits"])
    powers = [b for b in fitting if b & (b - 1) == 0]
    return sorted({*powers, best})
