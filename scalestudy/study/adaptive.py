"""The `run --adaptive` use case: measure a study round by round, each round's points
chosen from what the earlier rounds measured (results.analysis.adaptive's rule), every decision
journalled first, so that a killed run resumes where it stopped; and `plan --adaptive`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from scalestudy.core.errors import ScalestudyError
from scalestudy.core.grid import Run, node_hours
from scalestudy.core.states import RunState
from scalestudy.execute import workspace as ws
from scalestudy.execute.submit import prepare
from scalestudy.results.analysis import adaptive_journal as journal_file
from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.adaptive import RULE, Decision, Point, decide
from scalestudy.results.analysis.adaptive_target import Objective, objective
from scalestudy.site.plan import Plan
from scalestudy.study.outcomes import collect, grid_points, measured_points, report
from scalestudy.study.planning import check_selection, job_limit, lock, preflight_gate

if TYPE_CHECKING:
    import pandas as pd

    from scalestudy.site.preflight import Preflight
from scalestudy.study.running import (
    Queued,
    RunOutcome,
    RunRequest,
    Screen,
    Selection,
    check_pack,
    choose_runs,
    run_here,
    submit,
    submit_packed,
    wait,
    with_tags,
)

#: Rounds at most (each measures at least one point, so a grid ends far sooner).
MAX_ROUNDS = 64


def next_decision(plan: Plan, points: Sequence[Point], budget: float | None
                  ) -> tuple[Decision, journal_file.Journal, dict[str, Any]]:
    """What the next round would be, from the journal and the runs' files (writes
    nothing), and the tally of what was measured so far."""
    journal = journal_file.read(plan.directory)
    runs = collect(plan)
    measured, failed = measured_points(plan, points, runs)
    ended = _ended(runs)
    started = set(journal.runs())
    spent = node_hours(plan.study, [r for r in plan.runs if r.run_id in started])
    left = None if budget is None else max(0.0, budget - spent)
    decision = decide(points, measured, failed, journal.dropped,
                      {**journal.skipped, **journal.halved}, left, ended,
                      study_objective(plan, points, runs))
    return decision, journal, journal_file.tally(points, measured, ended)


def _ended(runs: pd.DataFrame) -> set[str]:
    """The runs that completed or failed for good (a point's repeats that ended)."""
    if runs.empty or col.STATE not in runs:
        return set()
    over = runs[runs[col.STATE].isin([RunState.COMPLETED.value, RunState.FAILED.value])]
    return {str(r) for r in over[col.RUN_ID]}


def study_objective(plan: Plan, points: Sequence[Point], runs: pd.DataFrame) -> Objective:
    """What the rule compares: the rate to the study's target where it has one
    (results.analysis.adaptive_target), else throughput."""
    from scalestudy.results.analysis.totarget import REACHED, SAMPLES

    target = plan.study.target
    if target is None:
        return Objective()
    batches = {p.key: p.global_batch for p in points}
    samples: dict[tuple[str, int], list[float]] = {}
    if target.measured and not runs.empty and SAMPLES in runs and REACHED in runs:
        by_id = {str(r): row for r, row in zip(runs[col.RUN_ID], runs.to_dict("records"),
                                              strict=True)}
        for p in points:
            got = [float(row[SAMPLES]) for row in (by_id.get(r) for r in p.runs)
                   if row and row.get(col.STATE) == RunState.COMPLETED.value
                   and str(row.get(REACHED)).strip().lower() in ("true", "1")
                   and float(row.get(SAMPLES) or 0) > 0]
            if got:
                samples[p.key] = got
    return objective(target, batches, min(batches.values(), default=1.0), samples)


def plan_adaptive(plan: Plan, only: str | None, budget: float | None) -> dict[str, Any]:
    """What `plan --adaptive` shows: the rule, the next round (the first, before any
    run), what was dropped or left out so far, and the node-hours against the grid's."""
    points = grid_points(plan, only)
    decision, journal, tally = next_decision(plan, points, budget)
    nh = sum(p.node_hours / len(p.runs) for p in decision.points)
    chosen = set(decision.runs)
    return {
        "rule": RULE, "round": len(journal.rounds) + 1,
        "objective": decision.objective, "notes": list(decision.notes),
        "next": [{"alternative": p.alternative, "nodes": p.nodes,
                  "runs": [r for r in p.runs if r in chosen],
                  "node_hours_max": round(p.node_hours / len(p.runs), 3)}
                 for p in decision.points],
        "stop": decision.why or None,
        "noise": decision.noise, "noise_source": decision.noise_source,
        "dropped": [{"alternative": a, "evidence": e}
                    for a, e in {**journal.dropped,
                                 **{v.alternative: v.evidence for v in decision.dropped}
                                 }.items()],
        "skipped": [{"alternative": a, "nodes": n, "evidence": e}
                    for (a, n), e in {**journal.skipped,
                                      **{(v.alternative, int(v.nodes or 0)): v.evidence
                                         for v in decision.skipped}}.items()],
        "halved": [{"alternative": a, "nodes": n, "evidence": e}
                   for (a, n), e in {**journal.halved,
                                     **{(v.alternative, int(v.nodes or 0)): v.evidence
                                        for v in decision.halved}}.items()],
        "tally": tally,
        "node_hours_round": round(nh, 3),
        "node_hours_grid": round(sum(p.node_hours for p in points), 3),
        "alternatives": len({p.alternative for p in points}),
        "points": len(points),
    }


def run_adaptive(plan: Plan, request: RunRequest, screen: Screen) -> RunOutcome:
    """`scalestudy run --adaptive`: under the study's lock, finish the journal's last
    round, then decide, journal and run round after round until no point is open or
    the budget is spent; then report."""

    check_selection(plan, request.only)
    plan = with_tags(plan, request.tags)
    check_pack(plan, request)
    if request.rerun is not None:
        raise ScalestudyError("--adaptive with --rerun: an adaptive study decides what "
                              "runs from what was measured; rerun its failed runs without "
                              "--adaptive (`run --rerun failed --only ...`), or remove "
                              f"{plan.directory / journal_file.FILE} to start it afresh")
    points = grid_points(plan, request.only)
    by_id = {r.run_id: r for r in plan.runs}
    if request.dry_run:
        decision, _, _ = next_decision(plan, points, request.budget)
        todo = [by_id[r] for r in decision.runs]
        return RunOutcome(Selection(todo), prepared=prepare(plan, todo, force=False))

    plan = dataclasses.replace(plan, campaign=ws.new_campaign())
    states: dict[str, RunState] = {}
    ran: list[Run] = []
    with lock(plan):
        found = None
        if plan.scheduler.queued and request.preflight:
            found = preflight_gate(plan, True, lambda f: screen.preflight(f, True),
                                   ", or run again with --no-preflight to submit anyway")
        for _ in range(MAX_ROUNDS):
            journal = journal_file.read(plan.directory)
            if journal.rounds and journal.stopped is None:  # finish the last round first
                last = journal.rounds[-1]
                todo = [by_id[r] for r in last["runs"] if r in by_id]
                states.update(_round(plan, todo, request, screen, found, int(last["round"])))
                ran += todo
            decision, journal, tally = next_decision(plan, points, request.budget)
            number = len(journal.rounds) + 1
            if journal.rounds and journal.stopped is None and decision.points and set(
                    decision.runs) <= set(journal.rounds[-1]["runs"]):
                screen.note(f"adaptive: round {number - 1}'s runs did not all complete "
                            f"(held, cancelled or cut off): `scalestudy status "
                            f"{plan.study.source}` says why; run again to go on")
                break
            if not decision.points and journal.stopped == decision.why and not (
                    decision.dropped or decision.skipped or decision.halved):
                screen.note(f"adaptive: nothing left to run: {decision.why}")
                break  # stopped before, and nothing new: do not journal it twice
            journal_file.record(plan.directory, number, decision, tally)
            for line in _decision_lines(number, decision, tally):
                screen.note(line)
            if not decision.points:
                break
        else:
            raise ScalestudyError(f"--adaptive: still open after {MAX_ROUNDS} rounds; "
                                  "run it again to go on")
    end = [states[r.run_id] for r in ran if r.run_id in states]
    return RunOutcome(Selection(ran), states=end, report=report(plan))


def _round(plan: Plan, todo: list[Run], request: RunRequest, screen: Screen,
           found: Preflight | None, number: int) -> dict[str, RunState]:
    """Run one round's runs (those not done yet) to their end; their end states."""
    sub = dataclasses.replace(plan, runs=todo)
    if not plan.scheduler.queued:
        selection = choose_runs(sub, None, None, request.max_attempts)
        if not selection.todo:
            return {}
        screen.note(f"adaptive round {number}: running {len(selection.todo)} run(s)")
        with screen.running_here(sub, len(selection.todo)) as progress:
            ended = run_here(sub, selection, False, progress)
        return {r.run_id: s for r, s in zip(selection.todo, ended, strict=True)}

    packed = request.pack or plan.study.job.pack
    most = None if packed else job_limit(sub, request.max_jobs, found, screen.note)
    queued: Queued = (submit_packed(sub, None, None, request.max_attempts, None, found)
                      if packed else
                      submit(sub, None, None, request.max_attempts, most, None))
    if not (queued.submitted or queued.allocations or queued.waiting or queued.adopted
            or queued.selection.active):
        return {}
    screen.note(f"adaptive round {number}: following {len(todo)} run(s)")
    screen.queued(queued)
    with screen.following([r.run_id for r in todo]) as seen:
        ended = wait(sub, None, queued, most, False, seen)
    return {r.run_id: s for r, s in zip(todo, ended, strict=True)}


def _decision_lines(number: int, decision: Decision, tally: dict[str, Any]) -> list[str]:
    """What a decision says on the screen."""
    lines = [f"adaptive: {note}" for note in decision.notes] if number == 1 else []
    lines += [f"adaptive: dropped {v.alternative}: {v.evidence}" for v in decision.dropped]
    lines += [f"adaptive: stopped {v.alternative} on {v.nodes} node(s) after {v.repeats} "
              f"repeat(s): {v.evidence}" for v in decision.halved]
    lines += [f"adaptive: not measuring {v.alternative} on {v.nodes} node(s): {v.evidence}"
              for v in decision.skipped]
    if decision.points:
        lines.append(f"adaptive round {number}: "
                     + "; ".join(p.name() for p in decision.points)
                     + f" (noise {decision.noise_source})")
    else:
        lines.append(f"adaptive: stopped after round {number - 1}: {decision.why}")
        lines.append(f"adaptive: {tally['measured_fully']} of {tally['points']} point(s) "
                     f"measured fully, {tally['measured_partly']} partly (stopped within "
                     f"their rung), {tally['not_measured']} not at all; "
                     f"{tally['node_hours']:,.2f} node-hour(s) spent, {tally['share']:.1%} "
                     "of the full grid's (nodes x walltime)")
    return lines
