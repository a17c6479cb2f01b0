"""Runs on a scheduler: their states from one batched query, how each ended (settled
once), jobs adopted after a crash, following a study to its end, cancelling it.

A run's state comes from three places, read in this order: its status.json (final
once the job has ended: settled), the journal of submitted jobs (jobs.jsonl), and one
batched scheduler query for every job not yet settled. A poll writes a run's status
only when it changed, and a `Tracker` never reads a settled run again.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from scalestudy.core.errors import ScalestudyError, SubmitError
from scalestudy.core.grid import Run, job_name
from scalestudy.core.states import JobStatus, RunState
from scalestudy.execute import commands
from scalestudy.execute import workspace as ws
from scalestudy.execute.diagnose import diagnose
from scalestudy.execute.journal import Intent, Job, Resolved, now
from scalestudy.execute.packing import steps as packed
from scalestudy.execute.packing.steplog import StepEvent
from scalestudy.execute.status import RunStatus, read_status, write_status
from scalestudy.execute.submit import JobLimit, Submission, journal, queue_runs
from scalestudy.site.plan import Plan
from scalestudy.site.schedulers import JobState

# A job the scheduler does not list yet (accounting lags a few seconds) is not lost.
GRACE_S = 120.0


@dataclass(frozen=True)
class RunView:
    """What scalestudy knows of one run now."""

    run: Run
    state: RunState
    job_id: str | None = None
    reason: str | None = None


def _age_s(entry: Job) -> float:
    try:
        submitted = datetime.fromisoformat(entry.submitted_at or "")
    except (KeyError, ValueError, TypeError):
        return float("inf")
    return (datetime.now(timezone.utc) - submitted).total_seconds()


@dataclass
class Tracker:
    """Follows the runs of a plan; remembers the runs that have ended (settled) so that
    later polls neither read nor write them again."""

    plan: Plan
    runner: commands.CommandRunner = commands.run_command
    settled: dict[str, RunView] = field(default_factory=dict)
    #: (state, scheduler's word, its reason) last written per run, to write only what
    #: changed.
    written: dict[str, tuple[str, str, str]] = field(default_factory=dict)

    def forget(self, run_ids: Iterable[str]) -> None:
        """Runs submitted again: read them afresh at the next poll."""
        for run_id in run_ids:
            self.settled.pop(run_id, None)
            self.written.pop(run_id, None)

    def refresh(self) -> dict[str, RunView]:
        """Every planned run's state, from one scheduler query; ended jobs are settled."""
        plan = self.plan
        latest = journal(plan).latest()
        views: dict[str, RunView] = {}
        unsettled: list[tuple[Run, Job]] = []
        scheduler = plan.scheduler
        for run in plan.runs:
            if run.run_id in self.settled:
                views[run.run_id] = self.settled[run.run_id]
                continue
            status = read_status(plan.run_dir(run))
            entry = latest.get(run.run_id)
            if entry is None or status.state.ended or status.state is RunState.INTERRUPTED:
                view = RunView(run, status.state, entry.job_id if entry else None,
                               status.reason)
                views[run.run_id] = view
                if status.state.ended:
                    self.settled[run.run_id] = view
            else:
                unsettled.append((run, entry))
        if unsettled:
            asked = list(dict.fromkeys(entry.job_id for _, entry in unsettled))
            found = {scheduler.short_id(k): v for k, v in
                     commands.query(scheduler, asked, self.runner).items()}
            steps: dict[str, dict[str, list[StepEvent]]] = {}  # allocation -> run ->
            for run, entry in unsettled:
                job = found.get(scheduler.short_id(entry.job_id))
                if entry.allocation:
                    if entry.allocation not in steps:
                        steps[entry.allocation] = packed.events_by_run(plan, entry.allocation)
                    view = self._step(run, entry, job,
                                      steps[entry.allocation].get(run.run_id, []))
                else:
                    view = self._update(run, entry, job)
                views[run.run_id] = view
                if view.state.ended:
                    self.settled[run.run_id] = view
        return views

    def _step(self, run: Run, entry: Job, job: JobState | None,
              events: list[StepEvent]) -> RunView:
        """A packed run: its step's state inside its allocation."""
        run_dir = self.plan.run_dir(run)
        packing = self.plan.scheduler.packing
        gone = packing.allocation_gone if packing is not None else ""
        if job is None and _age_s(entry) >= GRACE_S:
            job = JobState(entry.job_id, JobStatus.LOST, "not listed")
        found = packed.step_state(run_dir, entry, job, events[-1] if events else None,
                                   gone)
        if found.ended is not None:
            view = self._update(run, entry, found.ended)
            packed.add_times(run_dir, packed.step_times(events))
            return view
        if found.state is RunState.INTERRUPTED:
            packed.interrupt(run_dir, entry, found.reason)
            return RunView(run, found.state, entry.job_id, found.reason)
        said = (found.state.value, job.raw if job else "", found.reason or "")
        if self.written.get(run.run_id) != said:
            write_status(run_dir, RunStatus(
                found.state, job_id=entry.job_id, scheduler_state=job.raw if job else None,
                reason=found.reason, submitted_at=entry.submitted_at))
            self.written[run.run_id] = said
        return RunView(run, found.state, entry.job_id, found.reason)

    def _update(self, run: Run, entry: Job, job: JobState | None) -> RunView:
        run_dir = self.plan.run_dir(run)
        job_id = entry.job_id
        if job is None:
            if _age_s(entry) < GRACE_S:
                return RunView(run, RunState.QUEUED, job_id)
            has_record = ws.record_problem(ws.read_record(run_dir / ws.METRICS)) is None
            job = JobState(job_id, JobStatus.COMPLETED if has_record else JobStatus.LOST,
                           "not listed")
        if not job.done:
            current = job.state.run_state
            said = (current.value, job.raw, job.reason or "")
            if self.written.get(run.run_id) != said:
                write_status(run_dir, RunStatus(
                    current, job_id=job_id, scheduler_state=job.raw, reason=job.reason,
                    submitted_at=entry.submitted_at))
                self.written[run.run_id] = said
            return RunView(run, current, job_id, job.reason)
        regex = self.plan.study.workload.record_pattern
        status = settle(run_dir, job, run.params(), regex, self.plan.scheduler.logs.name)
        return RunView(run, status.state, job_id, status.reason)


def refresh(plan: Plan, runner: commands.CommandRunner = commands.run_command
            ) -> dict[str, RunView]:
    """Every planned run's state now (one scheduler query)."""
    return Tracker(plan, runner).refresh()


def settle(run_dir: Path, job: JobState, params: dict[str, Any],
           command_regex: str | None = None, scheduler_log: str | None = None
           ) -> RunStatus:
    """Write the final status.json of a run whose job has ended (for a `command`
    workload, first its record from the throughput in stdout.log); a failed run is
    classified here, once, from the scheduler's answer and the logs (`scheduler_log`:
    the file the scheduler writes the job's own output to, where its messages land)."""
    problem = None
    if command_regex is not None and job.state is JobStatus.COMPLETED:
        problem = ws.record_command_throughput(run_dir, params, command_regex)
    problem = problem or ws.record_problem(ws.read_record(run_dir / ws.METRICS))
    exit_code = job.exit_code
    if exit_code is None or job.signalled:  # the program's own code, where the job wrote it
        with contextlib.suppress(OSError, ValueError):
            exit_code = int((run_dir / "exit_code").read_text().strip())
    reason = _reason(job, problem, exit_code)
    killed = job.state is JobStatus.FAILED and (job.signalled or (exit_code or 0) > 128)
    if problem is None and (job.state in _CUT_OFF or killed):
        # The workload wrote its whole record, its last act, before the job was cut off
        # (cancelled, killed, out of time while exiting): the run was measured and a rerun
        # would only train it again, as a packed step cut off there is counted.
        reason = None
    # Where the scheduler decided the class, its own explanation is the line's words.
    said = job.reason if job.failure is not None and job.reason else reason
    failure = None if reason is None else diagnose(
        run_dir, exit_code, job.raw, said, scheduler_class=job.failure,
        scheduler_log=scheduler_log)
    energy = job.energy_j and job.elapsed_s  # the site's energy accounting (whole job)
    status = RunStatus(
        RunState.COMPLETED if reason is None else RunState.FAILED,
        failure=failure.failure if failure else None,
        failure_line=failure.line if failure else None,
        job_id=job.job_id, scheduler_state=job.raw, exit_code=exit_code, ended_at=now(),
        reason=reason, log_tail=None if reason is None else ws.log_tail(run_dir),
        job_energy_j=job.energy_j if energy else None,
        job_elapsed_s=job.elapsed_s if energy else None,
        job_power_w=(round(job.energy_j / job.elapsed_s, 3)
                     if job.energy_j and job.elapsed_s else None))
    write_status(run_dir, status)
    return status


#: How a job can end after its workload finished: killed or stopped from outside.
_CUT_OFF = (JobStatus.CANCELLED, JobStatus.TIMEOUT, JobStatus.PREEMPTED)


def _reason(job: JobState, problem: str | None, exit_code: int | None) -> str | None:
    """Why an ended job's run failed (None: it completed)."""
    if job.state is JobStatus.COMPLETED and problem is None and exit_code in (None, 0):
        return None
    reason: str | None
    if job.state is JobStatus.LOST:
        reason = (f"job {job.job_id} is no longer known to the scheduler and left no "
                  "metrics record (lost)")
    elif job.state is JobStatus.TIMEOUT:
        reason = f"walltime exceeded ({job.raw})"
    elif job.state is JobStatus.PREEMPTED:
        reason = f"preempted ({job.raw})"
    elif job.state is JobStatus.CANCELLED:
        reason = f"cancelled ({job.raw})"
    elif job.state is JobStatus.COMPLETED and exit_code not in (None, 0):
        reason = f"exit code {exit_code}"
    elif job.state is JobStatus.COMPLETED:
        reason = problem
    else:
        reason = f"{job.raw}" + (f", exit code {exit_code}" if exit_code is not None else "")
    if job.reason and reason and job.reason not in reason:
        reason += f"; scheduler: {job.reason}"
    return reason


def recover(plan: Plan, runner: commands.CommandRunner = commands.run_command
            ) -> list[tuple[str, str]]:
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
    def named(intent_: Intent) -> str:  # a packed run's job is its allocation's
        return job_name(plan.study.name, f"pack-{intent_.allocation}" if intent_.allocation
                        else intent_.run_id)

    names = {named(i) for r, i in intents.items() if r in runs}
    scheduler = plan.scheduler
    try:
        found = commands.find(scheduler, list(names), runner) if names else {}
    except SubmitError as exc:
        raise SubmitError(
            f"{exc}\na submission was interrupted and scalestudy cannot tell whether its job "
            "was queued; run again when the scheduler answers") from None
    known = {scheduler.short_id(e.job_id) for e in book.entries()}
    adopted = []
    for run_id, intent in intents.items():
        run = runs.get(run_id)
        # an allocation's name is never reused: its job is the run's even where the
        # journal already records it for the allocation's other runs
        mine = found.get(named(intent), set())
        orphans = sorted(mine if intent.allocation else mine - known,
                         key=lambda j: (len(j), j)) if run is not None else []
        if orphans and run is not None:  # orphans are found for a known run only
            job_id = orphans[-1]
            book.record(Job(run_id, job_id, intent.attempt, scheduler.name,
                            "pack" if intent.allocation else None, submitted_at=intent.at,
                            adopted=True, allocation=intent.allocation))
            write_status(plan.run_dir(run), RunStatus(
                RunState.QUEUED, job_id=job_id, submitted_at=intent.at))
            adopted.append((run_id, job_id))
        else:
            book.record(Resolved(run_id, now()))
    return adopted


def submit_runs(plan: Plan, chosen: Sequence[Run], max_jobs: JobLimit = None,
                runner: commands.CommandRunner = commands.run_command,
                views: dict[str, RunView] | None = None, force: bool = False) -> Submission:
    """Submit the chosen runs that are neither queued nor running nor complete (complete
    ones too with `force`: `run --rerun all`), at most `max_jobs` in the queue. Without
    `views`, interrupted submissions are recovered and the scheduler asked first."""
    if views is None:
        recover(plan, runner)
        views = Tracker(plan, runner).refresh()
    active = [i for i, v in views.items() if v.state.active]
    todo = [r for r in chosen if not views[r.run_id].state.active
            and (force or views[r.run_id].state is not RunState.COMPLETED)]
    return queue_runs(plan, todo, active, max_jobs, runner, force)


def poll(check: Callable[[], bool], interval_s: float = 5.0, max_interval_s: float = 60.0,
         timeout_s: float | None = None, sleep: Callable[[float], None] = time.sleep,
         what: str = "the jobs", moved: Callable[[], bool] | None = None) -> None:
    """Call `check` until it says done, backing off from `interval_s` to `max_interval_s`,
    and back to `interval_s` whenever `moved` says the last check saw something change
    (a job ended or was submitted: the next change is likely soon); ScalestudyError
    after `timeout_s` (None: no limit). The one poller of scalestudy."""
    started = time.monotonic()
    interval = interval_s
    while not check():
        if timeout_s is not None and time.monotonic() - started > timeout_s:
            raise ScalestudyError(f"{what} did not end within {timeout_s:.0f} s; check with "
                                  "`scalestudy status` or the scheduler")
        if moved is not None and moved():
            interval = interval_s
        sleep(interval)
        interval = min(max_interval_s, interval * 1.5)


#: The environment variable that shortens the longest wait between two queries of the
#: scheduler while following jobs (seconds; default 60): a testbed or a debug queue whose
#: jobs last a minute wants the end of each seen sooner than a production queue does.
POLL_ENV = "SCALESTUDY_POLL_S"


def longest_poll(default: float = 60.0) -> float:
    """The longest wait between two scheduler queries: `SCALESTUDY_POLL_S`, else
    `default`; an error saying how to fix a value that is not 1 to 3600 seconds."""
    given = os.environ.get(POLL_ENV, "").strip()
    if not given:
        return default
    try:
        seconds = float(given)
    except ValueError:
        seconds = 0.0
    if not 1 <= seconds <= 3600:
        raise ScalestudyError(f"{POLL_ENV}={given!r}: give the longest wait between two "
                              "scheduler queries in seconds, 1 to 3600 (or unset it: 60)")
    return seconds


def follow(plan: Plan, chosen: Sequence[Run], queue: Sequence[Run] = (),
           max_jobs: JobLimit = None, runner: commands.CommandRunner = commands.run_command,
           interval_s: float = 5.0, max_interval_s: float | None = None,
           sleep: Callable[[float], None] = time.sleep,
           progress: Callable[[dict[str, RunView]], None] | None = None,
           force: bool = False, timeout_s: float | None = None) -> dict[str, RunView]:
    """Poll (one query per cycle, backing off) until every chosen run has ended or is
    held (a hold waits for a person), submitting the runs `--max-jobs` held back
    (`queue`) as slots free; returns the final views. The backoff stops at
    `max_interval_s` (None: `longest_poll()`)."""
    ids = {r.run_id for r in chosen}
    waiting = list(queue)
    tracker = Tracker(plan, runner)
    final: dict[str, RunView] = {}
    seen = {"ended": -1, "now": 0, "submitted": False}

    def moved() -> bool:
        """A run ended or was submitted in the last check (not the first)."""
        changed = seen["submitted"] or 0 <= seen["ended"] < seen["now"]
        seen["ended"], seen["submitted"] = seen["now"], False
        return bool(changed)

    def check() -> bool:
        nonlocal waiting
        views = tracker.refresh()
        if waiting:
            active = [i for i, v in views.items() if v.state.active]
            done = queue_runs(plan, waiting, active, max_jobs, runner, force)
            waiting = done.waiting
            if done.submitted:
                tracker.forget(r.run_id for r, _ in done.submitted)
                views = tracker.refresh()
                seen["submitted"] = True
        if progress:
            progress(views)
        final.update(views)
        seen["now"] = sum(1 for i in ids if i in views and views[i].state.ended)
        # Held runs wait for a person, not for time: following them would never end; a
        # packed run its allocation's end cut off waits for a new allocation.
        return not waiting and all(views[i].state.ended or views[i].state in (
            RunState.HELD, RunState.INTERRUPTED) for i in ids)

    longest = longest_poll() if max_interval_s is None else max_interval_s
    poll(check, min(interval_s, longest), longest, timeout_s, sleep, moved=moved)
    return final


def cancel_runs(plan: Plan, runner: commands.CommandRunner = commands.run_command) -> list[str]:
    """Cancel every queued or running job of the study; returns their ids."""
    views = refresh(plan, runner)
    # packed runs share their allocation's job: each job is cancelled once
    job_ids = list(dict.fromkeys(v.job_id for v in views.values()
                                 if v.state.active and v.job_id))
    if job_ids:
        commands.cancel(plan.scheduler, job_ids, runner)
    return job_ids
