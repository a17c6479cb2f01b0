"""`scalestudy probe`: the largest per-GPU batch that fits, and the throughput up to it.

One job of one rank on one node of the study's system, running the bundled workload
in `--probe-batch` mode with the study's model, image size, precision and options. It
lives in `results/<study>/probe/` (job.sh, logs, metrics.jsonl), apart from the runs:
on this machine it runs at once; on a scheduler it is submitted and, with `wait`,
followed to its end. Its answer can feed the grid: the batch sizes it suggests are
the powers of two that fit, and the largest batch that fits.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from scalestudy import schedulers, state
from scalestudy.errors import ScalestudyError
from scalestudy.grid import Run
from scalestudy.render import render
from scalestudy.runner import Plan
from scalestudy.spec import walltime_seconds

PROBE_DIR = "probe"
JOB_ID_FILE = "job_id"
POLL_S = 5.0


def probe_dir(plan: Plan) -> Path:
    """Where the probe of a study lives."""
    return plan.directory / PROBE_DIR


def probe_run(plan: Plan, min_batch: int) -> Run:
    """The probe as a run: one node, one rank, DDP, the study's workload."""
    study = plan.study
    if study.workload.kind != "synthetic":
        raise ScalestudyError(
            f"{study.line_of(('workload', 'kind'))}: the batch-size probe runs the bundled "
            "benchmark; a `command` workload has no model for it to probe")
    w = study.workload
    return Run(run_id="probe", study=study.name, system=study.system, scaling=study.scaling,
               nodes=1, ranks_per_node=1, world_size=1, batch_size=min_batch,
               global_batch=min_batch, backend="ddp", tuning="default", repeat=0,
               workload="synthetic", model=w.model, image_size=w.image_size,
               precision=w.precision)


def prepare(plan: Plan, min_batch: int, max_batch: int,
            memory_limit_gb: float | None) -> tuple[Run, Path]:
    """Write the probe's job script (an earlier probe's files move to attempts/)."""
    run = probe_run(plan, min_batch)
    directory = probe_dir(plan).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    state.archive_attempt(directory)  # logs, status, metrics of an earlier probe
    (directory / JOB_ID_FILE).unlink(missing_ok=True)
    extra = ["--probe-batch", "--min-batch", str(min_batch), "--max-batch", str(max_batch)]
    if memory_limit_gb is not None:
        extra += ["--memory-limit-gb", repr(memory_limit_gb)]
    state.write_json_atomic(directory / state.RUN_JSON, run.params())
    script = render(plan.study, plan.system, run, directory, extra_args=extra)
    state.write_text_atomic(directory / state.SCRIPT, script, mode=0o755)
    return run, directory


def run_here(plan: Plan, run: Run, directory: Path) -> dict[str, Any]:
    """Run the probe on this machine (the local executor); its status.json."""
    from scalestudy.executor import execute

    return execute(directory, run.params(), walltime_seconds(plan.study.job.walltime))


def submit(plan: Plan, directory: Path) -> str:
    """Submit the probe's job; its id is kept in probe/job_id."""
    from scalestudy.submit import submit as submit_script

    job_id = submit_script(schedulers.get(plan.system.scheduler), directory / state.SCRIPT)
    state.write_text_atomic(directory / JOB_ID_FILE, job_id + "\n")
    return job_id


def wait(plan: Plan, directory: Path, poll_s: float = POLL_S,
         timeout_s: float | None = None) -> str:
    """Follow the submitted probe to its end; returns the scheduler's final state."""
    from scalestudy.submit import query

    job_id = (directory / JOB_ID_FILE).read_text().strip()
    scheduler = schedulers.get(plan.system.scheduler)
    started = time.monotonic()
    while True:
        jobs = query(scheduler, [job_id])
        job = jobs.get(job_id)
        if job is not None and job.done:
            return job.state
        if timeout_s is not None and time.monotonic() - started > timeout_s:
            raise ScalestudyError(f"the probe's job {job_id} has not ended after "
                                  f"{timeout_s:.0f} s; check it with the scheduler")
        time.sleep(poll_s)


def result(directory: Path) -> dict[str, Any] | None:
    """The probe's record, or None while there is none."""
    record = state.read_record(directory / state.METRICS)
    if not isinstance(record, dict) or record.get("source") != "batch_probe":
        return None
    return record


def suggested_batches(record: dict[str, Any]) -> list[int]:
    """Batch sizes for `grid.batch_size`: the powers of two that fit, and the largest
    batch that fits."""
    best = record.get("largest_batch_that_fits")
    if not best:
        return []
    fitting = sorted(p["batch_size"] for p in record["points"] if p["fits"])
    powers = [b for b in fitting if b & (b - 1) == 0]
    return sorted({*powers, best})
