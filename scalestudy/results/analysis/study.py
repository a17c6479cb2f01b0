"""One study's analysis, computed once: the scaling table, the model's fits and
predictions, the ring bound, costs, reference checks, quality flags, findings and the
headline. The report draws an `Analysis`, summary.json is one serialised, and the
terminal prints from one; none of them computes anything of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

import pandas as pd

from scalestudy.core.spec import Reference
from scalestudy.core.target import Target
from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.commmodel import (
    MAX_NODES,
    PREDICTION_RULE,
    losses,
    model_study,
    qualified,
    ring_bounds,
)
from scalestudy.results.analysis.container_cost import container_costs
from scalestudy.results.analysis.container_cost import finding as container_finding
from scalestudy.results.analysis.cost import costs_of, pick_sentences
from scalestudy.results.analysis.efficiency import Baseline, completed_runs, scaling_table, unit_of
from scalestudy.results.analysis.findings import Findings, findings
from scalestudy.results.analysis.forecast_study import with_intervals
from scalestudy.results.analysis.goodput import FailureInputs
from scalestudy.results.analysis.hours import sentence as hours_sentence
from scalestudy.results.analysis.hours import where_hours_go
from scalestudy.results.analysis.quality import Thresholds, flagged_runs, host_view
from scalestudy.results.analysis.references import Locate, check_references
from scalestudy.results.analysis.spend import Spend
from scalestudy.results.analysis.summary import POINT_KEYS, headline, records
from scalestudy.results.analysis.target_front import TargetFront, target_front
from scalestudy.results.analysis.target_picks import Pick, target_picks
from scalestudy.results.analysis.totarget import INTERVAL_TEXT, reached_runs, sentence, to_target
from scalestudy.results.analysis.variants import variant_outcomes
from scalestudy.results.analysis.waits import Wait

#: References with the function that says where each one was written.
RefSet = tuple[Sequence[Reference], Locate]
SCHEMA = "scalestudy.summary/2"


@dataclass(frozen=True)
class AnalysisOptions:
    """How a study is analysed: baseline, flag thresholds, the model's terms and reach,
    and the deadline or budget that picks a point."""

    baseline: Baseline = "smallest"
    thresholds: Thresholds = field(default_factory=Thresholds)
    latency: str = "log"
    bandwidth: str = "fit"
    max_nodes: int = MAX_NODES
    deadline_s: float | None = None  # `--deadline`: the cheapest point that meets it
    budget_node_hours: float | None = None  # `--budget`: the fastest point within it


@dataclass(frozen=True)
class Where:
    """What the numbers were measured on: the system (its profile's path or name), the
    cores of one host (None: unknown), whether every rank ran on one host."""

    system: str = ""
    cores_per_host: int | None = None
    one_host: bool = False


@dataclass(frozen=True, eq=False)
class Analysis:
    """Everything a report, summary.json and the terminal say about one study."""

    name: str
    scaling: str
    generated: str
    options: AnalysisOptions
    where: Where
    target: Target | None
    runs: pd.DataFrame
    table: pd.DataFrame  # the scaling table, with the host view's columns
    fits: pd.DataFrame
    points: pd.DataFrame  # measured vs fitted step time
    predictions: pd.DataFrame  # only those that pass the prediction rule
    bounds: pd.DataFrame
    checks: pd.DataFrame
    flagged: pd.DataFrame
    costs: pd.DataFrame
    found: Findings
    headline: list[str]
    picks: list[str]  # what --deadline and --budget pick (on the target's front if any)
    spend: Spend | None = None  # packed: what its allocations held and used
    #: earlier forecasts of this system that this study's scales score (ledger lines)
    scored: tuple[str, ...] = ()
    #: an adaptive study: each point it did not measure, with why (adaptive_journal)
    not_measured: tuple[dict[str, Any], ...] = ()
    #: the expected queue wait of each node count, with its source (results.analysis.waits)
    waits: tuple[Wait, ...] = ()
    #: slow nodes in this study's own runs (results.history.nodes.Evidence.as_dict)
    stragglers: dict[str, Any] = field(default_factory=dict)
    #: each containerised point beside the same point bare (container_cost)
    containers: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: time and node-hours to a measured target per point (totarget; empty: none measured)
    to_target: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: where each point's wall clock went (results.analysis.hours; empty: no wall clock)
    hours: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: the failure rate the expected failures used, in words ("": none known)
    failure_rate: str = ""
    #: time and node-hours to the target of measured and forecast points (target_front;
    #: None: the study has no target, priced or measured)
    front: TargetFront | None = None
    #: what --deadline and --budget pick on that front (their sentences are `picks`)
    target_picks: tuple[Pick, ...] = ()

    @property
    def unit(self) -> str:
        """The throughput's unit: img/s, or tokens/s for a transformer."""
        return unit_of(self.table)

    @property
    def findings(self) -> list[str]:
        """Every finding, the picks first."""
        return [*self.picks, *self.found.all]

    @property
    def failed_checks(self) -> int:
        """How many reference checks failed."""
        return int((self.checks["result"] == "fail").sum()) if len(self.checks) else 0

    @property
    def model_frame(self) -> pd.DataFrame:
        """Measured and predicted step times in one frame (the model plot's data)."""
        return pd.concat([self.points.assign(kind="measured"),
                          self.predictions.assign(kind="predicted")], ignore_index=True)

    @property
    def measured_on(self) -> str:
        """Which system the numbers describe, in the report's first lines."""
        return measured_on(self.where, self.runs)

    @cached_property
    def summary(self) -> dict[str, object]:
        """The analysis serialised (summary.json, `report --json`): plain JSON values."""
        return _summary(self)


def analyse(name: str, scaling: str, runs: pd.DataFrame, *,
            options: AnalysisOptions | None = None, where: Where | None = None,
            references: Sequence[RefSet] = (), target: Target | None = None,
            generated: str | None = None, spend: Spend | None = None,
            scored: Sequence[str] = (), not_measured: Sequence[dict[str, Any]] = (),
            waits: Sequence[Wait] = (), stragglers: Mapping[str, Any] | None = None,
            failure_rate: FailureInputs | None = None) -> Analysis:
    """Analyse the collected runs of a study (runs.csv's rows) in one pass (`waits`: the
    expected queue waits; `stragglers`: the slow nodes its own runs show, as the history's
    rule names them, results.history.nodes.study_stragglers; `failure_rate`: for the
    expected failures of "Where the hours go")."""
    options, where = options or AnalysisOptions(), where or Where()
    table = scaling_table(runs, scaling, options.baseline, options.thresholds)
    table = host_view(table, where.cores_per_host, where.one_host)
    fits, points, preds = model_study(table, scaling, options.latency, options.bandwidth,
                                      options.max_nodes)
    preds = qualified(fits, preds)  # only what passes the rule is shown
    fits, preds = with_intervals(table, fits, preds, scaling)  # each with its interval
    bounds = ring_bounds(table, fits)
    costs = costs_of(table, target, preds,
                     {w.nodes: w.seconds for w in waits if w.seconds is not None})
    found = losses(table, points, fits) if not table.empty else []
    outcomes = variant_outcomes(table, scaling) if not table.empty else []
    boxes = container_costs(table, scaling)
    found_all = findings(table, runs, scaling, fits, points, bounds, found, outcomes)
    found_all.items.extend(container_finding(boxes))
    trained = to_target(runs, table, scaling)
    front = _front(table, costs, trained, runs, scaling, target, preds, waits)
    chosen = () if front is None else tuple(target_picks(
        front.points, options.deadline_s, options.budget_node_hours))
    return Analysis(
        name=name, scaling=scaling, options=options, where=where, target=target,
        generated=generated or datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"
                                                                    ).strip(),
        runs=runs, table=table, fits=fits, points=points, predictions=preds, bounds=bounds,
        checks=check_all(references, table, where.system),
        flagged=flagged_runs(completed_runs(runs), options.thresholds), costs=costs,
        found=found_all,
        headline=headline(table, scaling, fits, points, preds, found, outcomes),
        picks=[p.sentence for p in chosen] if front is not None else pick_sentences(
            costs, options.deadline_s, options.budget_node_hours),
        spend=spend, scored=tuple(scored), not_measured=tuple(not_measured),
        waits=tuple(waits), stragglers=dict(stragglers or {}), containers=boxes,
        to_target=trained, front=front, target_picks=chosen,
        hours=where_hours_go(runs, table, scaling, failure_rate,
                             {w.nodes: w.seconds for w in waits if w.seconds is not None}),
        failure_rate=failure_rate.said if failure_rate is not None else "")


def _front(table: pd.DataFrame, costs: pd.DataFrame, trained: pd.DataFrame,
           runs: pd.DataFrame, scaling: str, target: Target | None, preds: pd.DataFrame,
           waits: Sequence[Wait]) -> TargetFront | None:
    """The front to the target of a study with one (priced, or measured by its runs)."""
    if (target is None or not target.priced) and trained.empty:
        return None
    key = [col.GROUP, col.NODES, col.WORLD_SIZE]
    repeats = {(str(g), int(n), int(w)): int(r) for g, n, w, r in table[
        [*key, col.N_REPEATS]].itertuples(index=False)} if col.N_REPEATS in table else {}
    levels = {(str(g), int(n), int(w)): float(v) for g, n, w, v in preds[
        [*key, "level"]].itertuples(index=False)} if "level" in preds and len(preds) else {}
    return target_front(costs, trained, reached_runs(runs, table, scaling), target,
                        repeats=repeats, levels=levels,
                        waits={w.nodes: w.seconds for w in waits if w.seconds is not None})


def check_all(references: Sequence[RefSet], table: pd.DataFrame, system: str
              ) -> pd.DataFrame:
    """Every reference set checked against the table, in one frame (with no runs,
    every reference fails)."""
    frames = [check_references(refs, table, system, locate) for refs, locate in references
              if refs]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else check_references(
        [], table, system, lambda loc: "")


def measured_on(where: Where, runs: pd.DataFrame) -> str:
    """Which system the numbers describe: every throughput, cost and prediction prices
    training on that system and nothing else."""
    name = where.system or "unknown"
    devices = sorted({str(d) for d in runs.get(col.DEVICE, pd.Series(dtype=str)).dropna()})
    on = ("CPUs" if devices == ["cpu"] else "GPUs" if devices == ["cuda"]
          else " and ".join(devices) if devices else "")
    place = (f"this one machine ({where.cores_per_host} cores" + (f", {on}" if on else "")
             + ")" if where.one_host else "its nodes" + (f" ({on})" if on else ""))
    return (f"Measured on system {name}, {place}: every throughput, cost and prediction "
            "here prices training on that system and answers no question about another.")


def _summary(a: Analysis) -> dict[str, Any]:
    """Study, run counts, per-group points, model, references, headline, findings, cost."""
    runs, table, checks = a.runs, a.table, a.checks
    states = runs[col.STATE].value_counts().to_dict() if col.STATE in runs.columns else {}
    groups = []
    for group, rows in table.groupby("group", sort=False):
        base = rows[rows[col.BASELINE].astype(bool)]
        groups.append({
            "group": group,
            "baseline": records(base, ("nodes", "ranks_per_node", "world_size"))[0],
            "baseline_rule": str(rows[col.BASELINE_RULE].iloc[0]),
            "points": records(rows, POINT_KEYS),
        })
    per = "target" if a.target is not None else (
        "million tokens" if len(a.costs) and (a.costs[col.UNIT] == "tokens").any()
        else "million samples")
    return {
        "schema": SCHEMA, "study": a.name, "scaling": a.scaling, "generated": a.generated,
        "runs": {"planned": len(runs), **{str(k): int(v) for k, v in states.items()}},
        "groups": groups,
        "model": {"fits": records(a.fits), "predictions": records(a.predictions),
                  "prediction_rule": PREDICTION_RULE, "ring_bounds": records(a.bounds)},
        "references": {"passed": int((checks["result"] == "pass").sum()),
                       "failed": int((checks["result"] == "fail").sum()),
                       "checks": records(checks)},
        "headline": list(a.headline),
        "findings": a.findings,
        "cost": {"per": per, "picks": list(a.picks), "points": records(a.costs),
                 **({"target_picks": [p.as_dict() for p in a.target_picks],
                     "target_front": a.front.as_dict()} if a.front is not None else {}),
                 **({"queue_waits": [w.as_dict() for w in a.waits]} if a.waits else {})},
        **({"spend": a.spend.to_json()} if a.spend is not None else {}),
        **({"earlier_forecasts": list(a.scored)} if a.scored else {}),
        **({"not_measured": list(a.not_measured)} if a.not_measured else {}),
        **({"stragglers": a.stragglers} if a.stragglers else {}),
        **({"containers": records(a.containers)} if len(a.containers) else {}),
        **({"to_target": {"sentence": sentence(a.to_target), "interval": INTERVAL_TEXT,
                          "points": records(a.to_target)}} if len(a.to_target) else {}),
        **({"hours": {"sentence": hours_sentence(a.hours), "failure_rate": a.failure_rate,
                      "points": records(a.hours)}} if len(a.hours) else {}),
    }
