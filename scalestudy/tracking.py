"""Runs on a scheduler: submit what is not done, follow the jobs, settle how each ended.

A run's state comes from three places, read in this order: its status.json (written
once the job has ended: settled), the journal of submitted jobs (jobs.jsonl), and one
batched scheduler query for every job not yet settled.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from scalestudy import schedulers, state
from scalestudy.errors import ScalestudyError
from scalestudy.executor import record_command_throughput
from scalestudy.grid import Run
from scalestudy.runner import Plan, prepare
from scalestudy.schedulers import CANCELLED, COMPLETED, TIMEOUT, JobState, SubmitError
from scalestudy.submit import (
    CommandRunner,
    Journal,
    cancel,
    find,
    now,
    query,
    run_command,
    submit,
)

ACTIVE = frozenset({"submitted", "running"})  # "pending" means never submitted
# A job the scheduler does not list yet (accounting lags a few seconds) is not lost.
GRACE_S = 120.0


@dataclass(frozen=True)
class RunView:
    """What scalestudy knows of one run now."""

    run: Run
    state: str  # pending (never submitted), submitted, running, completed, failed
    job_id: str | None = None
    reason: str | None = None


def journal(plan: Plan) -> Journal:
    """The study's journal of submitted jobs."""
    return Journal(plan.directory / "jobs.jsonl")


def _key(job_id: str) -> str:
    return job_id.split(".")[0]


def _age_s(entry: dict[str, Any]) -> float:
    try:
        submitted = datetime.fromisoformat(entry["submitted_at"])
    except (KeyError, ValueError):
        return float("inf")
    return (datetime.now(timezone.utc) - submitted).total_seconds()


def refresh(plan: Plan, runner: CommandRunner = run_command) -> dict[str, RunView]:
    """Every planned run's state, from one scheduler query; ended jobs are settled."""
    latest = journal(plan).latest()
    views: dict[str, RunView] = {}
    unsettled: dict[str, tuple[Run, dict[str, Any]]] = {}
    for run in plan.runs:
        status = state.run_status(plan.run_dir(run))
        entry = latest.get(run.run_id)
        if entry is None or status["state"] in ("completed", "failed"):
            views[run.run_id] = RunView(run, status["state"], entry and entry["job_id"],
                                        status["reason"])
        else:
            unsettled[_key(entry["job_id"])] = (run, entry)
    if unsettled:
        scheduler = schedulers.get(plan.system.scheduler)
        found = {_key(k): v for k, v in query(scheduler, list(unsettled), runner).items()}
        for key, (run, entry) in unsettled.items():
            views[run.run_id] = _update(plan, run, entry, found.get(key))
    return views


def _update(plan: Plan, run: Run, entry: dict[str, Any], job: JobState | None) -> RunView:
    run_dir = plan.run_dir(run)
    job_id = entry["job_id"]
    if job is None:
        if _age_s(entry) < GRACE_S:
            return RunView(run, "submitted", job_id)
        job = JobState(job_id, COMPLETED if state.record_problem(
            state.read_record(run_dir / state.METRICS)) is None else "lost", "not listed")
    if not job.done and job.state != "lost":
        current = "running" if job.state == "running" else "submitted"
        state.write_json_atomic(run_dir / state.STATUS, {
            "state": current, "job_id": job_id, "scheduler_state": job.raw,
            "submitted_at": entry.get("submitted_at")})
        return RunView(run, current, job_id)
    workload = plan.study.workload
    regex = workload.throughput_regex if workload.kind == "command" else None
    status = settle(run_dir, job, run.params(), regex)
    return RunView(run, status["state"], job_id, status["reason"])


def settle(run_dir: Path, job: JobState, params: dict[str, Any],
           command_regex: str | None = None) -> dict[str, Any]:
    """Write the final status.json of a run whose job has ended (for a `command`
    workload, first its record from the throughput in stdout.log)."""
    problem = None
    if command_regex is not None and job.state == COMPLETED:
        problem = record_command_throughput(run_dir, params, command_regex)
    problem = problem or state.record_problem(state.read_record(run_dir / state.METRICS))
    exit_code = job.exit_code
    if exit_code is None:
        try:
            exit_code = int((run_dir / "exit_code").read_text().strip())
        except (OSError, ValueError):
            exit_code = None
    if job.state == COMPLETED and problem is None and exit_code in (None, 0):
        reason = None
    elif job.state == "lost":
        reason = (f"job {job.job_id} is no longer known to the scheduler and left no "
                  "metrics record (lost)")
    elif job.state == TIMEOUT:
        reason = f"walltime exceeded ({job.raw})"
    elif job.state == CANCELLED:
        reason = f"cancelled ({job.raw})"
    elif job.state == COMPLETED and exit_code not in (None, 0):
        reason = f"exit code {exit_code}"
    elif job.state == COMPLETED:
        reason = problem
    else:
        reason = f"{job.raw}" + (f", exit code {exit_code}" if exit_code is not None else "")
    if job.reason and reason and job.reason not in reason:
        reason += f"; scheduler: {job.reason}"
    failure = None
    if reason is not None:
        from scalestudy.diagnose import diagnose

        failure = diagnose(run_dir, exit_code, job.raw, reason)
    status = {
        "state": "completed" if reason is None else "failed",
        "failure": failure and failure.failure, "failure_line": failure and failure.line,
        "job_id": job.job_id, "scheduler_state": job.raw, "exit_code": exit_code,
        "ended_at": now(), "reason": reason,
        "log_tail": None if reason is None else state.log_tail(run_dir),
    }
    state.write_json_atomic(run_dir / state.STATUS, status)
    return status


def job_name(plan: Plan, run: Run) -> str:
    """The name a run's job has on the scheduler (as scalestudy.render writes it)."""
    return f"{plan.study.name}-{run.run_id}"


def recover(plan: Plan, runner: CommandRunner = run_command) -> list[tuple[str, str]]:
    """Close the one window the journal leaves: `run` killed while sbatch/qsub ran, after
    the job was queued but before its id was recorded. Each intent (written before the
    command) without a job id is looked up by job name; a job found that the journal does
    not know is adopted (recorded). Returns the (run id, job id) adopted.

    SubmitError when the scheduler cannot be asked: submitting again could queue a run
    twice, so nothing is submitted until it answers.
    """
    book = journal(plan)
    intents = book.unresolved_intents()
    if not intents:
        return []
    runs = {r.run_id: r for r in plan.runs}
    names = {job_name(plan, runs[i]): i for i in intents if i in runs}
    scheduler = schedulers.get(plan.system.scheduler)
    try:
        found = find(scheduler, list(names), runner) if names else {}
    except SubmitError as exc:
        raise SubmitError(
            f"{exc}\na submission was interrupted and scalestudy cannot tell whether its job "
            "was queued; run again when the scheduler answers") from None
    known = {_key(e["job_id"]) for e in book.entries()}
    adopted = []
    for run_id, intent in intents.items():
        run = runs.get(run_id)
        orphans = sorted(found.get(job_name(plan, run), set()) - known, key=int) \
            if run is not None else []
        if orphans:
            job_id = orphans[-1]
            book.record({"run_id": run_id, "job_id": job_id, "attempt": intent.get("attempt"),
                         "scheduler": scheduler.name, "submitted_at": intent.get("at"),
                         "adopted": True})
            state.write_json_atomic(plan.run_dir(run) / state.STATUS, {
                "state": "submitted", "job_id": job_id, "submitted_at": intent.get("at")})
            adopted.append((run_id, job_id))
        else:
            book.record({"run_id": run_id, "resolved": True, "at": now()})
    return adopted


@dataclass(frozen=True)
class Submission:
    """What one `submit_runs` call did."""

    submitted: list[tuple[Run, str]]
    active: int  # jobs of the study in the queue now (including the new ones)
    waiting: list[Run]  # left for later by --max-jobs


def submit_runs(plan: Plan, chosen: Sequence[Run], max_jobs: int | None = None,
                runner: CommandRunner = run_command,
                views: dict[str, RunView] | None = None, force: bool = False) -> Submission:
    """Render and submit the chosen runs that are neither complete (unless `force`:
    `run --rerun all`) nor in the queue.

    Each job id is written to the journal before the next submission starts. When a
    submission fails, what was submitted stays recorded and SubmitError says how many.
    """
    if views is None:
        recover(plan, runner)
        views = refresh(plan, runner)
    active = sum(1 for v in views.values() if v.state in ACTIVE)
    skip = ACTIVE if force else ACTIVE | {"completed"}
    todo = [r for r in chosen if views[r.run_id].state not in skip]
    room = len(todo) if max_jobs is None else max(0, max_jobs - active)
    now_runs, later = todo[:room], todo[room:]
    if plan.study.job.submit == "submitit":
        from scalestudy.submitit_backend import submit_with_submitit

        return submit_with_submitit(plan, now_runs, later, active)
    scheduler = schedulers.get(plan.system.scheduler)
    done: list[tuple[Run, str]] = []
    prepare(plan, now_runs, force)
    book = journal(plan)
    attempts: dict[str, int] = {}
    for entry in book.entries():
        attempts[entry["run_id"]] = attempts.get(entry["run_id"], 0) + 1
    for run in now_runs:
        run_dir = plan.run_dir(run)
        state.archive_attempt(run_dir)
        attempt = attempts.get(run.run_id, 0) + 1
        journal(plan).record({"run_id": run.run_id, "intent": True, "attempt": attempt,
                              "at": now()})
        try:
            job_id = submit(scheduler, run_dir.resolve() / state.SCRIPT, runner)
        except SubmitError as exc:
            raise SubmitError(
                f"{exc}\n{len(done)} job(s) were submitted before this and are recorded in "
                f"{journal(plan).path}; run the same command again to submit the rest"
            ) from None
        journal(plan).record({"run_id": run.run_id, "job_id": job_id, "attempt": attempt,
                              "scheduler": scheduler.name, "submitted_at": now()})
        state.write_json_atomic(run_dir / state.STATUS, {
            "state": "submitted", "job_id": job_id, "submitted_at": now()})
        done.append((run, job_id))
    return Submission(done, active + len(done), later)


def follow(plan: Plan, chosen: Sequence[Run], queue: Sequence[Run] = (),
           max_jobs: int | None = None, runner: CommandRunner = run_command,
           interval_s: float = 5.0, max_interval_s: float = 60.0,
           sleep: Callable[[float], None] = time.sleep,
           progress: Callable[[dict[str, RunView]], None] | None = None,
           force: bool = False) -> dict[str, RunView]:
    """Poll (one query per cycle, backing off) until every chosen run has ended, submitting
    the runs `--max-jobs` held back (`queue`) as slots free; returns the final views."""
    ids = {r.run_id for r in chosen}
    queue = list(queue)
    interval = interval_s
    while True:
        views = refresh(plan, runner)
        if queue:
            active = sum(1 for v in views.values() if v.state in ACTIVE)
            room = len(queue) if max_jobs is None else max(0, max_jobs - active)
            if room:
                batch, queue = queue[:room], queue[room:]
                submit_runs(plan, batch, None, runner, views, force)
                views = refresh(plan, runner)
        if progress:
            progress(views)
        if not queue and all(views[i].state in ("completed", "failed") for i in ids):
            return views
        sleep(interval)
        interval = min(max_interval_s, interval * 1.5)


def cancel_runs(plan: Plan, runner: CommandRunner = run_command) -> list[str]:
    """Cancel every queued or running job of the study; returns their ids."""
    views = refresh(plan, runner)
    job_ids = [v.job_id for v in views.values() if v.state in ACTIVE and v.job_id]
    if not job_ids:
        return []
    scheduler = schedulers.get(plan.system.scheduler)
    cancel(scheduler, job_ids, runner)
    return job_ids


def require_scheduler(plan: Plan) -> None:
    """Status, cancel and --wait need a scheduler."""
    if plan.system.scheduler == "local":
        raise ScalestudyError("system local runs jobs directly: there is no queue to follow")
