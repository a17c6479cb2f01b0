"""A packed run's state, read back from its allocation: the allocation's job and the step
journal its engine keeps (execute.packing.steplog), and each allocation as `status` shows
it.

While the allocation lives, a packed run's state is its step's last event (not started:
queued; started: running; ended: settled from its exit code, a step stopped at its own
limit as walltime); once the allocation has ended, a step it never ended (or never
started) is `interrupted`, which the next `run` starts again in a new allocation: no run
is lost, and none that ended is run twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TypedDict

from scalestudy.core.states import Failure, JobStatus, RunState
from scalestudy.execute import workspace as ws
from scalestudy.execute.journal import Job, Journal
from scalestudy.execute.packing import allocfile
from scalestudy.execute.packing.allocations import root
from scalestudy.execute.packing.steplog import Event, StepEvent, read_events
from scalestudy.execute.status import RunStatus, read_status, write_status
from scalestudy.site.plan import Plan
from scalestudy.site.schedulers import JobState


class AllocationSummary(TypedDict):
    """One allocation as `status` shows it and the report's cost reads it."""

    name: str
    job_id: str | None
    nodes: int | None
    walltime_s: int | None
    steps: list[str]
    events: list[StepEvent]


@dataclass(frozen=True)
class StepState:
    """A packed run as its allocation's step journal and job say: what to show now, or
    the job state to settle it with (its step ended)."""

    state: RunState
    reason: str | None = None
    ended: JobState | None = None


def events_by_run(plan: Plan, name: str) -> dict[str, list[StepEvent]]:
    """run id -> the step events of allocation `name` for it, oldest first."""
    out: dict[str, list[StepEvent]] = {}
    for event in read_events(root(plan) / name / "steps.jsonl"):
        if event.run_id is not None:
            out.setdefault(event.run_id, []).append(event)
    return out


def step_times(events: Sequence[StepEvent]) -> tuple[str | None, float | None]:
    """(when the step last started, its seconds from then to its end) from its events."""
    started = next((e for e in reversed(events) if e.event is Event.STARTED), None)
    ended = events[-1] if events and events[-1].event is Event.ENDED else None
    if started is None:
        return None, None
    if ended is None or started.at is None or ended.at is None:
        return started.at, None
    try:
        seconds = (datetime.fromisoformat(ended.at)
                   - datetime.fromisoformat(started.at)).total_seconds()
    except ValueError:
        return started.at, None
    return started.at, seconds


def step_state(run_dir: Path, entry: Job, job: JobState | None,
               event: StepEvent | None, gone: str = "") -> StepState:
    """A packed run's state from its allocation's job (`job`, None: not listed yet) and its
    last step event; `gone`: what the launcher prints when the allocation has ended
    (Packing.allocation_gone)."""
    name = entry.allocation
    where = f"allocation {name} (job {entry.job_id})"
    if event is not None and event.event is Event.ENDED:
        said = _gone(run_dir, gone) if event.rc not in (None, 0) else None
        if said is not None:  # the launcher found the allocation ended: the step never ran
            return StepState(RunState.INTERRUPTED, f"{where} ended as this run's step was "
                             f"to start ({said}): the next `run` starts it in a new "
                             "allocation")
        return StepState(RunState.COMPLETED, ended=_ended(entry.job_id, event))
    if job is None or not job.done:  # alive
        if event is not None and event.event is Event.STARTED:
            return StepState(RunState.RUNNING, f"a step of {where} on "
                             f"{','.join(event.hosts)}")
        waiting = job.raw if job is not None else "submitted"
        return StepState(RunState.QUEUED, f"waiting in {where}: {waiting}")
    code = _exit_code(run_dir)
    if event is not None and code is not None:  # ended; its line was cut off
        return StepState(RunState.COMPLETED,
                         ended=_ended(entry.job_id, StepEvent(Event.ENDED, rc=code)))
    if event is not None and ws.record_problem(ws.read_record(run_dir / ws.METRICS)) is None:
        # the workload wrote its whole record (its last act), then the allocation ended
        # before the step's end was written: measured once, never to be run again
        return StepState(RunState.COMPLETED, ended=JobState(
            entry.job_id, JobStatus.COMPLETED, "step ended with the allocation; its metrics "
            "record is complete"))
    how = f"{job.raw}{': ' + job.reason if job.reason else ''}"
    if event is None:
        return StepState(RunState.INTERRUPTED, f"{where} ended ({how}) before this run "
                         "started: the next `run` starts it in a new allocation")
    return StepState(RunState.INTERRUPTED, f"{where} ended ({how}) while this run ran: "
                     "the next `run` starts it again in a new allocation")


def _ended(job_id: str, event: StepEvent) -> JobState:
    rc = event.rc
    if event.timed_out:
        return JobState(job_id, JobStatus.TIMEOUT, "step time limit", rc,
                        reason="the step ran past its walltime inside the allocation and "
                        "was stopped", failure=Failure.WALLTIME)
    if event.why:
        return JobState(job_id, JobStatus.FAILED, "step not started", rc,
                        reason=event.why, failure=Failure.SCHEDULER)
    return JobState(job_id, JobStatus.COMPLETED if rc == 0 else JobStatus.FAILED,
                    f"step ended (exit {rc})", rc)


def _gone(run_dir: Path, pattern: str) -> str | None:
    """The launcher's line in the step's stderr that says its allocation had ended."""
    if not pattern:
        return None
    found = re.search(pattern, ws.tail_text(run_dir / "stderr.log", 20))
    return found.group(0) if found else None


def _exit_code(run_dir: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int((run_dir / "exit_code").read_text().strip())
    return None


def add_times(run_dir: Path, times: tuple[str | None, float | None]) -> None:
    """A settled step's start and elapsed seconds, from the step journal, into its
    status.json (what `plan --pack` expects the next allocation's runs to take)."""
    started, seconds = times
    if started is None and seconds is None:
        return
    status = read_status(run_dir)
    write_status(run_dir, dataclasses.replace(
        status, started_at=started, elapsed_s=None if seconds is None else round(seconds, 3)))


def interrupt(run_dir: Path, entry: Job, reason: str | None) -> None:
    """Record that a packed run's allocation ended before its step did."""
    write_status(run_dir, RunStatus(RunState.INTERRUPTED, job_id=entry.job_id,
                                    reason=reason, submitted_at=entry.submitted_at))


def allocation_summary(plan: Plan) -> list[AllocationSummary]:
    """Each allocation of the study: its job, nodes, walltime, when its runner started and
    finished, and its steps' events (what `status` shows and the report's cost reads)."""
    out: list[AllocationSummary] = []
    book = {e.allocation: e.job_id for e in Journal(plan.directory / "jobs.jsonl").entries()
            if e.allocation}
    for alloc_dir in sorted(root(plan).glob("a*"), key=lambda p: int(p.name[1:] or 0)
                            if p.name[1:].isdigit() else 0):
        try:
            spec = allocfile.read(alloc_dir)
        except (OSError, ValueError):
            continue
        events = read_events(alloc_dir / "steps.jsonl")
        out.append({"name": alloc_dir.name, "job_id": book.get(alloc_dir.name),
                    "nodes": spec.get("nodes"), "walltime_s": spec.get("walltime_s"),
                    "steps": [s["run_id"] for s in spec.get("steps", [])],
                    "events": events})
    return out
