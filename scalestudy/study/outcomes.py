"""What a study holds and what it becomes: status, cancel, collect, the report, the
batch-size probe and the comparison of two studies."""

from __future__ import annotations

import contextlib
import numbers
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scalestudy.core.errors import ScalestudyError, SubmitError
from scalestudy.core.grid import select
from scalestudy.core.spec import walltime_seconds
from scalestudy.core.states import RunState
from scalestudy.execute import probe as batch_probe
from scalestudy.execute import workspace as ws
from scalestudy.execute.packing.steplog import Event
from scalestudy.execute.packing.steps import allocation_summary
from scalestudy.execute.status import read_state, read_status
from scalestudy.execute.submit import journal
from scalestudy.execute.tracking import cancel_runs, refresh
from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.spend import spend_of
from scalestudy.results.history.nodes import study_stragglers
from scalestudy.results.history.schema import is_profile_file, system_name
from scalestudy.site.plan import Plan
from scalestudy.site.queues import hms
from scalestudy.study.history import open_store, scored_here, store_study
from scalestudy.study.planning import Say, expected_waits, quiet
from scalestudy.study.predict import keep_report_forecasts
from scalestudy.study.wall import study_failure_rate

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pandas as pd

    from scalestudy.report.build import Report
    from scalestudy.results.analysis.adaptive import Point
    from scalestudy.results.analysis.spend import Spend
    from scalestudy.results.analysis.study import AnalysisOptions, RefSet


def status(plan: Plan) -> list[dict[str, Any]]:
    """Each run's parameters, state, job id and, for a failed run, its failure class and
    decisive line (one scheduler query on a scheduler)."""
    if plan.scheduler.queued:

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


def allocation_lines(plan: Plan, rows: list[dict[str, Any]]) -> list[str]:
    """`status` of a packed study: each allocation's job, and its steps from its own
    journal: ended, running, waiting, cut off by the allocation's end, never started."""

    state = {r[col.RUN_ID]: r[col.STATE] for r in rows}
    now_in = {k: e.allocation for k, e in journal(plan).latest().items()}
    lines = []
    for a in allocation_summary(plan):
        started = {e.run_id for e in a["events"] if e.event is Event.STARTED}
        ended = {e.run_id for e in a["events"] if e.event is Event.ENDED}
        counts = {"ended": len(ended)}
        for run_id in a["steps"]:
            here = now_in.get(run_id) == a["name"]
            if run_id in ended:
                continue
            if run_id in started:
                word = "running" if here and state.get(run_id) == "running" else "cut off"
            else:
                word = "waiting" if here and state.get(run_id) == "queued" else "not started"
            counts[word] = counts.get(word, 0) + 1
        said = ", ".join(f"{n} {w}" for w, n in counts.items() if n)
        lines.append(f"allocation {a['name']}: job {a['job_id'] or '-'}, {a['nodes']} node(s) "
                     f"for {hms(a['walltime_s'] or 0)}; {len(a['steps'])} step(s): "
                     f"{said or 'none ended'}")
    return lines


def cancel(plan: Plan) -> list[str]:
    """Cancel every queued or running job of the study; their ids."""
    if not plan.scheduler.queued:
        raise ScalestudyError(
            f"system {plan.system.name} runs jobs directly on this machine: there is no "
            "queue to cancel; stop a running `scalestudy run` with Ctrl-C (its run is kept "
            "as interrupted and runs again next time)")

    return cancel_runs(plan)


def collect(plan: Plan) -> pd.DataFrame:
    """Gather every planned run into results/<study>/runs.csv; returns the DataFrame.

    On a scheduler, jobs that ended since the last look are settled first (one query);
    where the scheduler cannot be asked (results copied elsewhere), the files decide.
    """
    from scalestudy.results.analysis.collect import collect as collect_runs

    if plan.scheduler.queued and (plan.directory / "jobs.jsonl").exists():

        with contextlib.suppress(SubmitError):
            refresh(plan)
    return collect_runs(plan.directory, [r.params() for r in plan.runs])


def report(plan: Plan, options: AnalysisOptions | None = None,
           references_file: Path | None = None) -> Report:
    """Collect, analyse once and draw the report; the references are the study's own
    `references:` plus those of `references_file`."""
    from scalestudy.report.build import build_report
    from scalestudy.results.analysis.references import load_references
    from scalestudy.results.analysis.study import AnalysisOptions, Where, analyse

    study = plan.study
    _refuse_an_empty_report(plan)
    refs: list[RefSet] = [(study.references, study.line_of)]
    if references_file is not None:
        refs.append(load_references(references_file))

    one_host = plan.scheduler.one_host  # the same core count the job scripts use
    cores = plan.system.cores_per_node or (os.cpu_count() if one_host else None)
    runs = collect(plan)
    stored = store_study(plan)  # first: the ledger scores earlier forecasts with its runs
    # the report's forecasts stop at the system's max_nodes (its loaded profile's)
    options = options or AnalysisOptions()
    options = replace(options, max_nodes=min(options.max_nodes, plan.system.max_nodes))
    analysis = analyse(study.name, study.scaling, runs, options=options,
                       where=Where(study.system, cores, one_host), references=refs,
                       target=study.cost_target, spend=_spend(plan),
                       scored=scored_here(study.system, _world_sizes(runs)),
                       not_measured=_not_measured(plan, runs), waits=expected_waits(plan),
                       stragglers=study_stragglers(study.name, study.system, runs),
                       failure_rate=study_failure_rate(study.system, study.failures))
    built = build_report(plan.directory, analysis, study.description)
    kept = keep_report_forecasts(study.system, study.name, analysis.table,
                                 analysis.predictions, analysis.unit)
    return replace(built, stored="\n".join(filter(None, (stored, kept))))


def _not_measured(plan: Plan, runs: pd.DataFrame) -> list[dict[str, Any]]:
    """An adaptive study's points it did not measure, with why ([] for a full grid)."""
    from scalestudy.results.analysis import adaptive_journal

    if not (plan.directory / adaptive_journal.FILE).exists():
        return []
    points = grid_points(plan)
    measured, _ = measured_points(plan, points, runs)  # collected once, by report
    return adaptive_journal.not_measured(points, adaptive_journal.read(plan.directory),
                                         measured)


def grid_points(plan: Plan, only: str | None = None) -> list[Point]:
    """The study's points (alternative x node count, results.analysis.adaptive), of the `--only`
    selection."""
    from scalestudy.results.analysis.adaptive import points_of

    return points_of(select(plan.runs, only), plan.study.scaling,
                     walltime_seconds(plan.study.job.walltime))


def measured_points(plan: Plan, points: Sequence[Point], runs: pd.DataFrame | None = None
                    ) -> tuple[dict[tuple[str, int], list[float]], set[tuple[str, int]]]:
    """The throughputs of each point's completed runs, and the points whose runs all
    failed for good (`runs`: runs.csv's rows when the caller collected them already;
    else read from the runs' files, on a scheduler settled first)."""
    runs = collect(plan) if runs is None else runs
    by_id = {str(r): row for r, row in zip(runs[col.RUN_ID], runs.to_dict("records"),
                                          strict=True)}
    measured: dict[tuple[str, int], list[float]] = {}
    failed: set[tuple[str, int]] = set()
    for p in points:
        rows = [by_id[r] for r in p.runs if r in by_id]
        values = [float(row[col.THROUGHPUT]) for row in rows
                  if row.get(col.STATE) == RunState.COMPLETED.value
                  and _number(row.get(col.THROUGHPUT))]
        if values:
            measured[p.key] = values
        elif rows and all(row.get(col.STATE) == RunState.FAILED.value for row in rows):
            failed.add(p.key)
    return measured, failed


def _number(value: object) -> bool:
    if not isinstance(value, (numbers.Real, str)):
        return False
    try:
        return float(value) > 0
    except ValueError:
        return False


def _world_sizes(runs: pd.DataFrame) -> set[int]:
    """The world sizes the study's completed runs measured."""
    done = runs[runs[col.STATE] == "completed"] if "state" in runs else runs
    return {int(w) for w in done[col.WORLD_SIZE].dropna()} if "world_size" in done else set()


def _spend(plan: Plan) -> Spend | None:
    """A packed study's spend, with the results store's one-job-per-run queue waits on
    its system beside it (where the store has any)."""
    import statistics

    spend = spend_of(plan.directory)
    if spend is None:
        return None

    try:
        store = open_store()
        try:
            rows = store.rows(system=plan.system.name)
        finally:
            store.dispose()
    except Exception:  # a store that cannot be read only costs the comparison
        return spend
    waits = [p[col.QUEUE_WAIT_S] for r in rows
             if isinstance(p := (r.get(col.PROVENANCE) or {}).get("placement") or {}, dict)
             and not p.get("allocation") and isinstance(p.get(col.QUEUE_WAIT_S), (int, float))]
    if not waits:
        return spend
    return replace(spend, per_run_wait=(statistics.median(waits), len(waits)))


def _refuse_an_empty_report(plan: Plan) -> None:
    """A report with no completed run must not replace one that has them: when none of
    the planned runs completed while the results directory holds other runs (the spec's
    `system:` or workload changed, so its run ids did), say what it holds and leave it as
    it is (exit 1); where it holds only this spec's runs, all failed, report them."""
    planned = {r.run_id for r in plan.runs}
    if any(read_state(plan.run_dir(r)) is RunState.COMPLETED for r in plan.runs):
        return
    held: dict[tuple[str, str], int] = {}
    for run_json in sorted((plan.directory / "runs").glob("*/run.json")):
        if run_json.parent.name in planned:
            continue
        system = str((ws.read_run(run_json.parent) or {}).get(col.SYSTEM, "?"))
        key = (system_name(system, None) if is_profile_file(system) else system,
               read_state(run_json.parent).value)
        held[key] = held.get(key, 0) + 1
    if not held:  # only this spec's runs (all failed so far): report them as they are
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
          say: Say = quiet) -> ProbeResult:
    """The largest per-GPU batch that fits one GPU of the study's system: run here, or
    submitted and (with `wait_for_it`) followed to its end."""

    if min_batch > max_batch:
        raise ScalestudyError(f"--min-batch {min_batch} is larger than --max-batch {max_batch}")
    with ws.study_lock(plan.directory):
        run, directory = batch_probe.prepare(plan, min_batch, max_batch, memory_limit_gb)
        job_id = None
        if not plan.scheduler.queued:
            final = batch_probe.run_here(plan, run, directory).state.value
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
    from scalestudy.results.history.compare import align, load_side

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


