"""The `run` use case: choose the runs still to do, run them here or submit them (and
follow them), then report; one request in, one outcome out, progress told to a screen."""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from scalestudy.core.choices import Rerun
from scalestudy.core.errors import ScalestudyError
from scalestudy.core.grid import Run, select
from scalestudy.core.states import Failure, RunState
from scalestudy.execute import workspace as ws
from scalestudy.execute.local import execute_runs
from scalestudy.execute.packing.allocations import (
    check_engine,
    queue_allocations,
    write_allocation,
)
from scalestudy.execute.packing.queues import allocations, check_packed_budget
from scalestudy.execute.status import RunStatus, read_state, read_status
from scalestudy.execute.submit import prepare
from scalestudy.execute.tracking import Tracker, follow, recover, submit_runs
from scalestudy.site.plan import Plan
from scalestudy.study.history import check_store
from scalestudy.study.outcomes import report
from scalestudy.study.packing import expected_times
from scalestudy.study.planning import (
    MAX_ATTEMPTS,
    check_budget,
    check_selection,
    job_limit,
    limits_gate,
    lock,
    preflight_gate,
)

if TYPE_CHECKING:
    from scalestudy.execute.packing.allocations import Queued as QueuedAllocation
    from scalestudy.execute.submit import JobLimit
    from scalestudy.execute.tracking import RunView
    from scalestudy.report.build import Report
    from scalestudy.site.preflight import Preflight


@dataclass(frozen=True)
class Selection:
    """The runs a `run` starts now, and the failed ones it leaves as they are."""

    todo: list[Run]
    failed_kept: list[Run] = field(default_factory=list)  # failed, --rerun not asked
    exhausted: list[Run] = field(default_factory=list)  # failed after --max-attempts
    done: list[Run] = field(default_factory=list)  # completed already: skipped
    active: list[Run] = field(default_factory=list)  # queued, held or running already


def choose_runs(plan: Plan, only: str | None, rerun: Rerun | None = None,
                max_attempts: int = MAX_ATTEMPTS,
                states: dict[str, RunState] | None = None) -> Selection:
    """Which selected runs to (re)start: `run` resumes (runs never started, interrupted
    ones, or stopped half-way on this machine); `rerun=failed` adds failed and lost
    runs; `rerun=all` every run, completed ones too (a new campaign: never capped). A
    run that has failed `max_attempts` times since it last completed is left.

    `states` (run id -> state) comes from the scheduler when there is one; runs queued
    or running there are never chosen.
    """
    rerun = None if rerun is None else Rerun(rerun)
    todo: list[Run] = []
    failed_kept: list[Run] = []
    exhausted: list[Run] = []
    done: list[Run] = []
    active: list[Run] = []
    on_host = not plan.scheduler.queued
    for run in select(plan.runs, only):
        directory = plan.run_dir(run)
        current = states[run.run_id] if states is not None else read_state(directory)
        if current in (RunState.PENDING, RunState.INTERRUPTED) or (on_host and current.active):
            todo.append(run)
        elif current is RunState.FAILED and _cancelled(directory):
            todo.append(run)  # cancelled, as a packed run cut off is interrupted: resumed
        elif current.active:
            active.append(run)
        elif current is RunState.COMPLETED and rerun is not Rerun.ALL:
            done.append(run)
        elif current is RunState.FAILED and rerun is None:
            failed_kept.append(run)
        elif rerun is not Rerun.ALL and failures_since_completed(directory) >= max_attempts:
            exhausted.append(run)
        else:
            todo.append(run)
    return Selection(todo, failed_kept, exhausted, done, active)


def failures_since_completed(directory: Path) -> int:
    """The failed attempts of a run since its last completed one (the current one
    included; a cancelled one is no failure): what --max-attempts caps, so a run completed
    in an earlier campaign starts afresh."""
    kept = sorted((p for p in (directory / "attempts").glob("*") if p.name.isdigit()),
                  key=lambda p: int(p.name), reverse=True)
    count = 1 if ws.attempt_count(directory) > len(kept) and not _cancelled(directory) else 0
    for attempt in kept:
        if read_state(attempt) is RunState.COMPLETED:
            break
        count += not _cancelled(attempt)
    return count


def _cancelled(directory: Path) -> bool:
    """The attempt kept in `directory` was cancelled (scalestudy cancel, scancel, qdel,
    flux cancel): not a failure of the run, and resumed by a plain `run`."""
    status = read_status(directory)
    return status.state is RunState.FAILED and status.failure == Failure.CANCELLED


def dry_run(plan: Plan, selection: Selection, force: bool) -> list[Run]:
    """Render the chosen runs' scripts without running anything; those runs."""

    return prepare(plan, selection.todo, force=force)


Progress = Callable[[Run, RunStatus | None], None]


def run_here(plan: Plan, selection: Selection, force: bool,
             progress: Progress | None = None, budget: float | None = None
             ) -> list[RunState]:
    """Execute the chosen runs on this machine, one after the other; their end states."""

    check_budget(plan, selection.todo, budget)
    todo = prepare(plan, selection.todo, force=force)
    return [s.state for s in execute_runs(plan, todo, progress)]


@dataclass(frozen=True)
class Queued:
    """What `run` did on a scheduler (`allocations`: packed, the allocations queued)."""

    adopted: list[tuple[str, str]]
    submitted: list[tuple[Run, str]]
    active: int
    waiting: list[Run]
    selection: Selection
    allocations: list[QueuedAllocation] = field(default_factory=list)


def submit_packed(plan: Plan, only: str | None, rerun: Rerun | None, max_attempts: int,
                  budget: float | None = None, found: Preflight | None = None) -> Queued:
    """`run --pack`: adopt what an interrupted submission left, then queue the chosen runs
    as steps of as few allocations as the queue's limits allow."""

    check_engine(plan)
    adopted = recover(plan)
    views = Tracker(plan).refresh()
    selection = choose_runs(plan, only, rerun, max_attempts,
                            {k: v.state for k, v in views.items()})
    planned = (allocations(plan, selection.todo, expected_times(plan), found)
               if selection.todo else [])
    check_packed_budget(planned, budget)
    submitted, placed = queue_allocations(plan, planned)
    active = sum(1 for v in views.values() if v.state.active) + len(submitted)
    return Queued(adopted, submitted, active, [], selection, placed)


def submit(plan: Plan, only: str | None, rerun: Rerun | None, max_attempts: int,
           max_jobs: JobLimit, budget: float | None = None) -> Queued:
    """Adopt jobs an interrupted submission left, then submit the chosen runs that are
    neither queued nor running (at most `max_jobs` in the queue)."""

    adopted = recover(plan)
    views = Tracker(plan).refresh()
    selection = choose_runs(plan, only, rerun, max_attempts,
                            {k: v.state for k, v in views.items()})
    # choose_runs decided what still needs submitting (not queued, held or running; not
    # complete unless --rerun all): the budget and the submission take the same runs.
    check_budget(plan, selection.todo, budget)
    done = submit_runs(plan, selection.todo, max_jobs, views=views, force=rerun is Rerun.ALL)
    return Queued(adopted, done.submitted, done.active, done.waiting, selection)


def wait(plan: Plan, only: str | None, queued: Queued, max_jobs: JobLimit,
         force: bool, progress: Callable[[dict[str, RunView]], None] | None = None
         ) -> list[RunState]:
    """Follow the selected runs to their end (submitting those --max-jobs held back);
    their end states."""

    chosen = select(plan.runs, only)
    views = follow(plan, chosen, queued.waiting, max_jobs, progress=progress, force=force)
    return [views[r.run_id].state for r in chosen]




class Screen(Protocol):
    """What a `run` tells its user as it goes (the CLI prints it; tests may record it)."""

    def note(self, line: str) -> None:
        """A line of what is happening or left (stderr)."""

    def preflight(self, found: Preflight, ok_line: bool) -> None:
        """The preflight's problems, and its ok line when asked."""

    def chosen(self, selection: Selection) -> None:
        """Which failed runs this `run` leaves, and why."""

    def queued(self, queued: Queued) -> None:
        """What the submission did (jobs adopted, submitted, held back)."""

    def running_here(self, plan: Plan, count: int
                     ) -> contextlib.AbstractContextManager[Progress | None]:
        """Progress over `count` runs on this machine (None: no callback to call)."""

    def following(self, run_ids: list[str]
                  ) -> contextlib.AbstractContextManager[Callable[[dict[str, RunView]], None]]:
        """Progress of the queued runs until they end."""


@dataclass(frozen=True)
class RunRequest:
    """What `scalestudy run` was asked: which runs, how many attempts and jobs, whether to
    wait, the node-hour budget, whether to ask the scheduler first, or render only."""

    only: str | None = None
    rerun: Rerun | None = None
    max_attempts: int = MAX_ATTEMPTS
    max_jobs: int | None = None
    wait: bool = False
    budget: float | None = None
    preflight: bool = True
    dry_run: bool = False
    tags: tuple[str, ...] = ()  # `run --tag`: kept with every run it starts
    pack: bool = False  # `run --pack` (the spec's `job.pack` asks it too)

    @property
    def force(self) -> bool:
        """Completed runs start again too (`--rerun all`)."""
        return self.rerun is Rerun.ALL


@dataclass(frozen=True)
class RunOutcome:
    """What a `run` did: the runs it chose, what it rendered (dry run) or submitted, the
    end states of the runs it followed, and the report it wrote then (None: nothing
    followed to its end)."""

    selection: Selection
    prepared: list[Run] = field(default_factory=list)
    queued: Queued | None = None
    states: list[RunState] = field(default_factory=list)
    report: Report | None = None

    @property
    def failed(self) -> int:
        """Runs that ended other than completed or held."""
        return sum(1 for s in self.states if s not in (RunState.COMPLETED, RunState.HELD))

    @property
    def held(self) -> int:
        """Runs the scheduler holds."""
        return sum(1 for s in self.states if s is RunState.HELD)


def run(plan: Plan, request: RunRequest, screen: Screen) -> RunOutcome:
    """`scalestudy run`: render only (dry run), or, under the study's lock, run the chosen
    runs here or submit them (and follow them with `wait`), then report."""

    check_selection(plan, request.only)
    plan = with_tags(plan, request.tags)
    check_pack(plan, request)
    if request.dry_run:
        return _dry_run(plan, request, screen)
    check_store()  # a damaged store: refused before a job is spent on it
    plan = dataclasses.replace(plan, campaign=ws.new_campaign())  # this run's campaign
    with lock(plan):
        if plan.scheduler.queued:
            found = None if not request.preflight else preflight_gate(
                plan, True, lambda f: screen.preflight(f, True),
                ", or run again with --no-preflight to submit anyway")
            if request.pack or plan.study.job.pack:
                most = None
                queued = submit_packed(plan, request.only, request.rerun,
                                       request.max_attempts, request.budget, found)
            else:
                most = job_limit(plan, request.max_jobs, found, screen.note)
                queued = submit(plan, request.only, request.rerun, request.max_attempts,
                                most, request.budget)
            screen.chosen(queued.selection)
            screen.queued(queued)
            if not request.wait:
                return RunOutcome(queued.selection, queued=queued)
            with screen.following([r.run_id for r in select(plan.runs, request.only)]) as seen:
                states = wait(plan, request.only, queued, most, request.force, seen)
            states = _repack(plan, request, screen, states, found)
            return RunOutcome(queued.selection, queued=queued, states=states,
                              report=report(plan))
        selection = _here(plan, request, screen)
        with screen.running_here(plan, len(selection.todo)) as progress:
            states = run_here(plan, selection, request.force, progress, request.budget)
        return RunOutcome(selection, states=states, report=report(plan))


def check_pack(plan: Plan, request: RunRequest) -> None:
    """`--pack` needs a scheduler: refuse it on a system that runs jobs on this host."""
    if request.pack and not plan.scheduler.queued:

        raise ScalestudyError(
            f"--pack: system {plan.system.name} runs jobs on this host, one after the other: "
            "there is no allocation to pack into; run without --pack")


def _repack(plan: Plan, request: RunRequest, screen: Screen, states: list[RunState],
            found: Preflight | None) -> list[RunState]:
    """`run --pack --wait`: runs an allocation's end cut off (walltime, preemption, a node
    lost, a cancel) go into a new allocation and are followed in turn, as long as they
    have attempts left; their end states."""
    chosen = select(plan.runs, request.only)
    for _ in range(request.max_attempts):
        cut = [r for r, s in zip(chosen, states, strict=True) if s is RunState.INTERRUPTED]
        if not (request.pack or plan.study.job.pack) or not cut:
            break
        screen.note(f"{len(cut)} run(s) cut off by the end of their allocation: packing "
                    "them into a new one")
        queued = submit_packed(plan, request.only, None, request.max_attempts,
                               request.budget, found)
        if not queued.submitted:
            break
        screen.queued(queued)
        with screen.following([r.run_id for r in chosen]) as seen:
            states = wait(plan, request.only, queued, None, False, seen)
    return states


def with_tags(plan: Plan, tags: tuple[str, ...]) -> Plan:
    """The plan with `run --tag` added to the spec's `tags:` (each a plain name)."""
    if not tags:
        return plan

    bad = [t for t in tags if not _TAG.match(t)]
    if bad:
        raise ScalestudyError(f"--tag {bad[0]!r}: a tag is letters, digits, `.`, `_`, `-` "
                              "(at most 64, starting with a letter or digit)")
    merged = list(dict.fromkeys([*plan.study.tags, *tags]))
    return dataclasses.replace(plan, study=plan.study.model_copy(update={"tags": merged}))


_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def _here(plan: Plan, request: RunRequest, screen: Screen) -> Selection:
    """Before runs on this machine: the host's cores against the ranks, what the queue
    options change (nothing), the runs chosen."""

    if request.preflight:
        preflight_gate(plan, False, lambda f: screen.preflight(f, False))
    if request.max_jobs is not None or request.wait:
        screen.note(f"note: system {plan.system.name} runs jobs here, one after the other, "
                    "and `run` waits for them: --max-jobs and --wait change nothing")
    selection = choose_runs(plan, request.only, request.rerun, request.max_attempts)
    screen.chosen(selection)
    if not selection.todo:
        screen.note(f"nothing to run: the {len(select(plan.runs, request.only))} selected "
                    "runs are complete or left as they are")
    return selection


def _dry_run(plan: Plan, request: RunRequest, screen: Screen) -> RunOutcome:
    """Render the chosen runs' scripts, refusing what the real run would refuse."""

    selection = choose_runs(plan, request.only, request.rerun, request.max_attempts)
    screen.chosen(selection)
    if plan.scheduler.queued and (request.pack or plan.study.job.pack):
        return RunOutcome(selection, prepared=_dry_pack(plan, selection, request, screen))
    check_budget(plan, selection.todo, request.budget)
    if plan.scheduler.queued:
        limits_gate(plan, screen.note)  # what the site's documented limits refuse
        job_limit(plan, request.max_jobs, None, screen.note)  # what the real run keeps to
    return RunOutcome(selection, prepared=dry_run(plan, selection, request.force))


def _dry_pack(plan: Plan, selection: Selection, request: RunRequest, screen: Screen
              ) -> list[Run]:
    """`run --pack --dry-run`: the steps' scripts and each allocation's script, written to
    allocations/dry-run-<n>/ (never a name a real allocation takes); those runs."""

    planned = (allocations(plan, selection.todo, expected_times(plan))
               if selection.todo else [])
    check_packed_budget(planned, request.budget)
    for a in planned:
        script = write_allocation(plan, a, f"dry-run-{a.index}", archive=False)
        screen.note(f"would queue allocation {a.index}: {a.nodes} node(s), "
                    f"{len(a.steps)} run(s): {script}")
    return [s.run for a in planned for s in a.steps]
