"""The use cases: plan, run, status, cancel, collect, report, probe, compare.

Each is one function the CLI calls with typed arguments; none prints (a `say` callback
or a progress callback reports), none parses a flag. Heavy modules (pandas,
matplotlib) are imported inside the use cases that need them, so `scalestudy --help`
stays instant.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scalestudy.core.choices import Rerun
from scalestudy.core.errors import ScalestudyError, SubmitError
from scalestudy.core.grid import Run, node_hours, select
from scalestudy.core.states import RunState
from scalestudy.execute import workspace as ws
from scalestudy.execute.status import read_state, read_status
from scalestudy.site import resolve
from scalestudy.site.plan import Plan, make_plan

if TYPE_CHECKING:
    import pandas as pd

    from scalestudy.execute.tracking import RunView
    from scalestudy.report.build import Report
    from scalestudy.results.analysis import AnalysisOptions
    from scalestudy.site.preflight import Preflight

__all__ = ["MAX_ATTEMPTS", "Plan", "Selection", "choose_runs", "make_plan"]

Say = Callable[[str], None]
#: Attempts a run gets at most, unless `run --max-attempts` says otherwise.
MAX_ATTEMPTS = 3


def _quiet(_: str) -> None:
    return None


def plan_summary(plan: Plan) -> dict[str, Any]:
    """What `plan --json` prints: the runs, their states and the totals: the worst-case
    node-hours (every run using its whole walltime) and the expected ones (measured
    where a run, or a run of the same shape, has run; the walltime elsewhere)."""
    statuses = {r.run_id: read_status(plan.run_dir(r)) for r in plan.runs}
    expected, measured = expected_node_hours(plan, statuses)
    return {
        "study": plan.study.name,
        "system": plan.system.name,
        "scaling": plan.study.scaling,
        "runs": [{**r.params(), "state": statuses[r.run_id].state.value} for r in plan.runs],
        "run_count": len(plan.runs),
        "node_hours_max": round(node_hours(plan.study, plan.runs), 3),
        "node_hours_expected": round(expected, 3),
        "runs_measured": measured,
        "walltime": plan.study.job.walltime,
        "values": {v.key: v.as_dict() for v in resolve.values(plan.study, plan.system)},
        "warnings": plan_warnings(plan),
    }


def plan_warnings(plan: Plan) -> list[str]:
    """What the plan does that may not be meant (GPUs of its nodes left idle), with fixes."""
    return resolve.idle_gpu_warnings(plan.study, plan.system, plan.runs)


def preflight(plan: Plan, python: bool = True) -> Preflight:
    """Ask the scheduler and this host whether the study's jobs can run (`python`: also
    run the jobs' Python here); each problem with its fix."""
    from scalestudy.execute.preflight import preflight as ask

    return ask(plan, python)


def expected_node_hours(plan: Plan, statuses: dict[str, Any]) -> tuple[float, int]:
    """(node-hours, runs whose time is measured): each run's measured elapsed time, else
    the median of measured runs of the same shape (nodes, ranks, batch), else its walltime."""
    import statistics

    from scalestudy.core.spec import walltime_seconds

    by_shape: dict[tuple[int, int, int], list[float]] = {}
    for run in plan.runs:
        elapsed = statuses[run.run_id].elapsed_s
        if elapsed is not None and statuses[run.run_id].state is RunState.COMPLETED:
            by_shape.setdefault((run.nodes, run.ranks_per_node, run.global_batch),
                                []).append(elapsed)
    wall = walltime_seconds(plan.study.job.walltime)
    total, measured = 0.0, 0
    for run in plan.runs:
        known = by_shape.get((run.nodes, run.ranks_per_node, run.global_batch))
        seconds = statistics.median(known) if known else wall
        measured += bool(known)
        total += run.nodes * seconds / 3600
    return total, measured


def check_budget(plan: Plan, runs: Sequence[Run], budget: float | None) -> None:
    """`run --budget N`: refuse runs whose worst case (nodes x walltime) exceeds N
    node-hours, naming the costliest."""
    if budget is None or not runs:
        return
    worst = node_hours(plan.study, runs)
    if worst <= budget:
        return
    hours_each = node_hours(plan.study, runs[:1]) / runs[0].nodes
    costly = sorted(runs, key=lambda r: -r.nodes)[:5]
    named = ", ".join(f"{r.run_id} ({r.nodes} nodes: {r.nodes * hours_each:g} node-h)"
                      for r in costly)
    raise ScalestudyError(
        f"the {len(runs)} run(s) to start may use up to {worst:g} node-hours (nodes x "
        f"walltime {plan.study.job.walltime}), more than --budget {budget:g}; the costliest: "
        f"{named}. Lower job.walltime, exclude the largest scales (--only 'nodes<=N'), or "
        "raise --budget")


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
    runs; `rerun=all` every run, completed ones too. A run that has had `max_attempts`
    attempts is left.

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
        elif current.active:
            active.append(run)
        elif current is RunState.COMPLETED and rerun is not Rerun.ALL:
            done.append(run)
        elif current is RunState.FAILED and rerun is None:
            failed_kept.append(run)
        elif ws.attempt_count(directory) >= max_attempts:
            exhausted.append(run)
        else:
            todo.append(run)
    return Selection(todo, failed_kept, exhausted, done, active)


def dry_run(plan: Plan, selection: Selection, force: bool) -> list[Run]:
    """Render the chosen runs' scripts without running anything; those runs."""
    from scalestudy.execute.submit import prepare

    return prepare(plan, selection.todo, force=force)


Progress = Callable[[Run, dict[str, Any] | None], None]


def run_here(plan: Plan, selection: Selection, force: bool,
             progress: Progress | None = None, budget: float | None = None
             ) -> list[RunState]:
    """Execute the chosen runs on this machine, one after the other; their end states."""
    from scalestudy.execute.local import execute_runs
    from scalestudy.execute.submit import prepare

    check_budget(plan, selection.todo, budget)
    todo = prepare(plan, selection.todo, force=force)
    return [RunState(s["state"]) for s in execute_runs(plan, todo, progress)]


@dataclass(frozen=True)
class Queued:
    """What `run` did on a scheduler."""

    adopted: list[tuple[str, str]]
    submitted: list[tuple[Run, str]]
    active: int
    waiting: list[Run]
    selection: Selection


def submit(plan: Plan, only: str | None, rerun: Rerun | None, max_attempts: int,
           max_jobs: int | None, budget: float | None = None) -> Queued:
    """Adopt jobs an interrupted submission left, then submit the chosen runs that are
    neither queued nor running (at most `max_jobs` in the queue)."""
    from scalestudy.execute.tracking import Tracker, recover, submit_runs

    adopted = recover(plan)
    views = Tracker(plan).refresh()
    selection = choose_runs(plan, only, rerun, max_attempts,
                            {k: v.state for k, v in views.items()})
    # choose_runs decided what still needs submitting (not queued, held or running; not
    # complete unless --rerun all): the budget and the submission take the same runs.
    check_budget(plan, selection.todo, budget)
    done = submit_runs(plan, selection.todo, max_jobs, views=views, force=rerun is Rerun.ALL)
    return Queued(adopted, done.submitted, done.active, done.waiting, selection)


def wait(plan: Plan, only: str | None, queued: Queued, max_jobs: int | None,
         force: bool, progress: Callable[[dict[str, RunView]], None] | None = None
         ) -> list[RunState]:
    """Follow the selected runs to their end (submitting those --max-jobs held back);
    their end states."""
    from scalestudy.execute.tracking import follow

    chosen = select(plan.runs, only)
    views = follow(plan, chosen, queued.waiting, max_jobs, progress=progress, force=force)
    return [views[r.run_id].state for r in chosen]


def status(plan: Plan) -> list[dict[str, Any]]:
    """Each run's parameters, state, job id and, for a failed run, its failure class and
    decisive line (one scheduler query on a scheduler)."""
    if plan.scheduler.queued:
        from scalestudy.execute.tracking import refresh

        views = {k: (v.state, v.job_id, v.reason) for k, v in refresh(plan).items()}
    else:
        views = {}
    rows = []
    for run in plan.runs:
        found = read_status(plan.run_dir(run), diagnose=True)
        state, job_id, reason = views.get(run.run_id, (found.state, found.job_id,
                                                        found.reason))
        failed = state is RunState.FAILED
        rows.append({**run.params(), "state": state.value, "job_id": job_id,
                     "reason": reason or found.reason,
                     "failure": (found.failure or "unknown") if failed else None,
                     "failure_line": found.failure_line if failed else None})
    return rows


def cancel(plan: Plan) -> list[str]:
    """Cancel every queued or running job of the study; their ids."""
    if not plan.scheduler.queued:
        raise ScalestudyError(
            f"system {plan.system.name} runs jobs directly on this machine: there is no "
            "queue to cancel; stop a running `scalestudy run` with Ctrl-C (its run is kept "
            "as interrupted and runs again next time)")
    from scalestudy.execute.tracking import cancel_runs

    return cancel_runs(plan)


def collect(plan: Plan) -> pd.DataFrame:
    """Gather every planned run into results/<study>/runs.csv; returns the DataFrame.

    On a scheduler, jobs that ended since the last look are settled first (one query);
    where the scheduler cannot be asked (results copied elsewhere), the files decide.
    """
    from scalestudy.results.collect import collect as collect_runs

    if plan.scheduler.queued and (plan.directory / "jobs.jsonl").exists():
        from scalestudy.execute.tracking import refresh

        with contextlib.suppress(SubmitError):
            refresh(plan)
    return collect_runs(plan.directory, [r.params() for r in plan.runs])


def report(plan: Plan, options: AnalysisOptions | None = None,
           references_file: Path | None = None) -> Report:
    """Collect, analyse once and draw the report; the references are the study's own
    `references:` plus those of `references_file`."""
    from scalestudy.report.build import build_report
    from scalestudy.results.analysis import Where, analyse
    from scalestudy.results.references import load_references

    study = plan.study
    _refuse_an_empty_report(plan)
    refs: list[Any] = [(study.references, study.line_of)]
    if references_file is not None:
        refs.append(load_references(references_file))
    one_host = plan.scheduler.one_host  # the same core count the job scripts use
    cores = plan.system.cores_per_node or (os.cpu_count() if one_host else None)
    analysis = analyse(study.name, study.scaling, collect(plan), options=options,
                       where=Where(study.system, cores, one_host), references=refs,
                       target=study.target)
    return build_report(plan.directory, analysis, study.description)


def _refuse_an_empty_report(plan: Plan) -> None:
    """A report with no completed run must not replace one that has them: when none of
    the planned runs completed while the results directory holds other runs (the spec's
    `system:` or workload changed, so its run ids did) or a report, say what it holds and
    leave it as it is (exit 1)."""
    planned = {r.run_id for r in plan.runs}
    if any(read_state(plan.run_dir(r)) is RunState.COMPLETED for r in plan.runs):
        return
    held: dict[tuple[str, str], int] = {}
    for run_json in sorted((plan.directory / "runs").glob("*/run.json")):
        if run_json.parent.name in planned:
            continue
        system = str((ws.read_run(run_json.parent) or {}).get("system", "?"))
        key = (Path(system).stem, read_state(run_json.parent).value)
        held[key] = held.get(key, 0) + 1
    if not held and not (plan.directory / "report" / "index.html").exists():
        return
    systems: dict[str, list[str]] = {}
    for (system, state), count in sorted(held.items()):
        systems.setdefault(system, []).append(f"{count} {state}")
    holds = "; ".join(f"{sum(int(c.split()[0]) for c in parts)} runs of system {system} "
                      f"({', '.join(parts)})" for system, parts in systems.items())
    raise ScalestudyError(
        f"{plan.directory} holds " + (holds or "a report") + f", but none of the "
        f"{len(plan.runs)} runs this spec plans (system {plan.system.name}) has completed: "
        f"the report in {plan.directory / 'report'} is left as it is. Report the runs it "
        f"holds with the spec that made them ({plan.directory / 'study.yaml'}), or run this "
        "spec first", exit_code=1)


@dataclass(frozen=True)
class ProbeResult:
    """The batch-size probe's record and the batch sizes it suggests (None: no answer)."""

    record: dict[str, Any] | None
    suggested: list[int]
    final: str
    directory: Path
    job_id: str | None = None


def probe(plan: Plan, min_batch: int, max_batch: int, memory_limit_gb: float | None,
          wait_for_it: bool = True, timeout_s: float | None = None,
          say: Say = _quiet) -> ProbeResult:
    """The largest per-GPU batch that fits one GPU of the study's system: run here, or
    submitted and (with `wait_for_it`) followed to its end."""
    from scalestudy.execute import probe as batch_probe

    if min_batch > max_batch:
        raise ScalestudyError(f"--min-batch {min_batch} is larger than --max-batch {max_batch}")
    with ws.study_lock(plan.directory):
        run, directory = batch_probe.prepare(plan, min_batch, max_batch, memory_limit_gb)
        job_id = None
        if not plan.scheduler.queued:
            final = batch_probe.run_here(plan, run, directory)["state"]
        else:
            job_id = batch_probe.submit(plan, directory)
            say(f"submitted the probe as job {job_id}: {directory / ws.SCRIPT}")
            if not wait_for_it:
                return ProbeResult(None, [], "queued", directory, job_id)
            final = batch_probe.wait(plan, directory, timeout_s=timeout_s)
    record = batch_probe.result(directory)
    if record is None:
        raise ScalestudyError(
            f"the probe ended ({final}) without an answer; see {directory / 'stderr.log'}")
    return ProbeResult(record, batch_probe.suggested_batches(record), final, directory,
                       job_id)


@dataclass(frozen=True)
class Comparison:
    """Two studies aligned: the frame, what differs, where the files went, a warning."""

    frame: pd.DataFrame
    differs: dict[str, tuple[str, str]]
    out: Path
    names: tuple[str, str]
    warning: str | None


def compare(a_arg: Path, b_arg: Path, out: Path | None = None,
            results: Path = Path("results")) -> Comparison:
    """Align two studies (specs or results directories) point by point and write
    compare.csv/.md/.png (default results/compare-A-vs-B)."""
    from scalestudy.report.compare import write_compare
    from scalestudy.results.compare import align, load_side

    a, b = load_side(a_arg, results), load_side(b_arg, results)
    if a.scaling != b.scaling:
        raise ScalestudyError(
            f"{a.name} is a {a.scaling}-scaling study and {b.name} a {b.scaling}-scaling "
            "one: at the same GPU count they train different per-GPU batches, so their "
            "ratios would compare different work; compare two studies of the same mode")
    frame, differs = align(a, b)
    if frame.empty:
        raise ScalestudyError(f"{a.runs_csv} and {b.runs_csv} share no measured point "
                              "(same nodes, ranks per node and batch); compare studies over "
                              "the same grid")
    out = Path(out) if out is not None else Path(results) / f"compare-{a.name}-vs-{b.name}"
    write_compare(frame, differs, a, b, out)
    return Comparison(frame, differs, out, (a.name, b.name), None)


def lock(plan: Plan) -> contextlib.AbstractContextManager[None]:
    """The study's lock (a second `run` of the same study refuses)."""
    return ws.study_lock(plan.directory)


def selected(plan: Plan, only: str | None) -> Sequence[Run]:
    """The runs `--only` selects."""
    return select(plan.runs, only)


def check_selection(plan: Plan, only: str | None) -> None:
    """A `--only` that selects no run is an error that says what the study has."""
    if only and not select(plan.runs, only):
        raise ScalestudyError(
            f"--only {only!r} selects none of the study's {len(plan.runs)} runs; it has "
            + describe_axes(plan.runs))


def describe_axes(runs: Sequence[Run]) -> str:
    """The values each filter key takes in these runs, e.g. `world_size 1, 2, 4; ...`."""
    keys = ("nodes", "ranks_per_node", "world_size", "batch_size", "global_batch", "backend",
            "tuning")
    parts = []
    for key in keys:
        values = sorted({getattr(r, key) for r in runs}, key=lambda v: (str(type(v)), v))
        parts.append(f"{key} {', '.join(map(str, values))}")
    return "; ".join(parts)
