"""The front to the target: time and node-hours to the target of every measured and every
forecast point, each with its interval, and the points `--deadline` and `--budget` pick on
it (the report's picks when the study has a target, priced or measured).

Points (FRONT_COLUMNS, `kind` measured or forecast, `basis` says from what):
- measured: a point whose runs trained to a measured target (totarget: the median time
  over the repeats that reached it, the median's interval and its coverage); for a
  priced target (core.target's rule), a measured throughput with the rule's samples
  (cost: the repeats' band, which holds the median with 1 - 2 * 0.5**n).
- forecast: the throughput forecast (the report's predictions with their 90 % interval,
  forecast_study), or a measured throughput whose runs did not reach a measured target,
  times the samples to the target: the priced rule's (exact); for a measured target, at
  a global batch other runs of the same work reached it, their median with their min–max
  ("measured samples"), elsewhere the samples forecast (target_forecast, at
  SAMPLES_LEVEL, fitted on those runs at 3 or more global batches, asked up to
  MAX_FACTOR x the largest). Both intervals are carried end to end, as adaptive_target
  does: the short end is the fewest samples at the fastest throughput, the long end the
  most at the slowest. The level stated is the smaller of the two; under log-normal
  errors such an interval holds at least that. A part with no band (one run, the rule)
  adds no level; `basis` says "(1 run)".

A point meets a deadline when the long end of its time (plus the expected queue wait of
its node count, as cost's picks count it) does; where only its central value does, it
"likely meets" it, and the sentence says how far the interval reaches. A budget alike,
with node-hours (no queue wait: it costs no node-hours).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from scalestudy.core.errors import ScalestudyError
from scalestudy.core.target import Target
from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.cost import pareto_front
from scalestudy.results.analysis.forecast_limits import MAX_FACTOR
from scalestudy.results.analysis.quality import IMPLAUSIBLE
from scalestudy.results.analysis.summary import records
from scalestudy.results.analysis.target_forecast import forecast_to_target

#: The samples forecast's interval level (the throughput forecast's is 90 % too).
SAMPLES_LEVEL = 0.90
#: The throughput forecast's level where a prediction does not say its own.
THROUGHPUT_LEVEL = 0.90
MEASURED, FORECAST = "measured", "forecast"
TRAINED = "trained to the target"
#: A point: (group, nodes, world size).
Key = tuple[str, int, int]
FRONT_COLUMNS: tuple[str, ...] = (
    "group", "work", "nodes", "ranks_per_node", "world_size", "global_batch", "kind",
    "basis", "samples", "samples_low", "samples_high", "time_to_target_s", "time_low",
    "time_high", "node_hours", "node_hours_low", "node_hours_high", "level",
    "queue_wait_s", "finish_s", "finish_high_s", "doubt", "pareto")


@dataclass(frozen=True)
class TargetFront:
    """The front's points (FRONT_COLUMNS), why some points have no forecast, and the
    samples forecast's law per work where one was fitted."""

    points: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(
        columns=list(FRONT_COLUMNS)))
    notes: tuple[str, ...] = ()
    samples_models: dict[str, dict[str, object]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        """The front as summary.json keeps it (plain values; NaN as None)."""
        return {"points": records(self.points), "notes": list(self.notes),
                "samples_forecast": _plain(self.samples_models)}


def target_front(costs: pd.DataFrame, trained: pd.DataFrame, reached: pd.DataFrame,
                 target: Target | None, *, repeats: Mapping[Key, int] | None = None,
                 levels: Mapping[Key, float] | None = None,
                 waits: Mapping[int, float] | None = None) -> TargetFront:
    """The front to the target. `costs`: cost.costs_of's table (priced by `target` when it
    is a priced one, else per million units); `trained`: totarget.to_target's points;
    `reached`: totarget.reached_runs; `repeats`: each measured point's repeats and
    `levels` each prediction's interval level, by point; `waits`: the expected queue
    wait by node count. Empty when the study has no target."""
    priced = target is not None and target.priced
    if not priced and trained.empty:
        return TargetFront()
    work = {str(g): str(w) for g, w in zip(costs.get(col.GROUP, []), costs.get("work", []),
                                            strict=True)}
    rows: list[dict[str, object]] = []
    done: set[Key] = set()
    for _, r in trained.iterrows():
        if math.isfinite(float(r["time_to_target_s"])):
            done.add(_key(r))
            rows.append(_trained_row(r, work.get(str(r[col.GROUP]), "")))
    todo = costs[[_key(c) not in done for _, c in costs.iterrows()]] if len(costs) else costs
    samples, notes, models = (_priced_samples(todo) if priced
                              else _forecast_samples(todo, reached, work))
    for i, c in todo.iterrows():
        if i not in samples:
            continue
        key = _key(c)
        runs = int((repeats or {}).get(key, 1))
        level = (float((levels or {}).get(key, THROUGHPUT_LEVEL)) if c["predicted"]
                 else _band_level(runs) if runs > 1 else None)
        rows.append(_throughput_row(c, samples[i], priced, level))
    front = pd.DataFrame(rows, columns=[c for c in FRONT_COLUMNS if c not in (
        "queue_wait_s", "finish_s", "finish_high_s", "pareto")])
    return TargetFront(_finished(front, waits or {}), tuple(notes), models)


def _plain(value: object) -> object:
    """Nested dicts and lists with every non-finite float as None (strict JSON)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _key(row: pd.Series) -> Key:
    """A point's key: (group, nodes, world size)."""
    return str(row[col.GROUP]), int(row[col.NODES]), int(row[col.WORLD_SIZE])


def _band_level(n: int) -> float:
    """How often the min–max of n repeats holds their median: 1 - 2 * 0.5**n."""
    return 1 - 2 * 0.5 ** n


def _trained_row(r: pd.Series, work: str) -> dict[str, object]:
    s = float(r["samples_to_target"])
    return {"group": r[col.GROUP], "work": work, "nodes": int(r[col.NODES]),
            "ranks_per_node": int(r[col.RANKS_PER_NODE]),
            "world_size": int(r[col.WORLD_SIZE]), "global_batch": float(r[col.GLOBAL_BATCH]),
            "kind": MEASURED, "basis": TRAINED, "samples": s, "samples_low": s,
            "samples_high": s, "time_to_target_s": float(r["time_to_target_s"]),
            "time_low": float(r["time_low"]), "time_high": float(r["time_high"]),
            "node_hours": float(r["node_hours"]), "node_hours_low": float(r["node_hours_low"]),
            "node_hours_high": float(r["node_hours_high"]),
            "level": float(r["coverage"]), "doubt": ""}


@dataclass(frozen=True)
class Samples:
    """A point's samples to the target, with their interval and where they come from."""

    value: float
    low: float
    high: float
    level: float | None  # None: no band (the rule's exact samples, or one run's)
    words: str  # "the target's rule", "samples forecast", "measured samples"


Found = tuple[dict[object, Samples], list[str], dict[str, dict[str, object]]]


def _priced_samples(todo: pd.DataFrame) -> Found:
    """The priced rule's samples of each point: exact (cost already priced them)."""
    return {i: Samples(float(v), float(v), float(v), None, "the target's rule")
            for i, v in todo["samples"].items()}, [], {}


def _forecast_samples(todo: pd.DataFrame, reached: pd.DataFrame, work_of: Mapping[str, str]
                      ) -> Found:
    """Each point's samples to the target, from the runs of its work (`work_of`: each
    group's) that reached it: at a global batch they reached, their median with their
    min–max; elsewhere the samples forecast fitted on them. Notes say which points
    neither reaches."""
    got: dict[object, Samples] = {}
    notes: list[str] = []
    models: dict[str, dict[str, object]] = {}
    if todo.empty:
        return got, notes, models
    runs = reached.assign(work=[work_of.get(str(g), "") for g in reached[col.GROUP]])
    for work, points in todo.groupby("work", sort=False):
        mine = runs[runs["work"] == work]
        batches = mine["global_batch"].to_numpy(float)
        values = mine["samples_to_target"].to_numpy(float)
        for i, c in points.iterrows():
            at = values[batches == float(c[col.GLOBAL_BATCH])]
            if len(at):
                got[i] = Samples(float(np.median(at)), float(at.min()), float(at.max()),
                                 _band_level(len(at)) if len(at) > 1 else None,
                                 f"measured samples ({len(at)} run{'s' * (len(at) > 1)})")
        points = points[[i not in got for i in points.index]]
        name = f" ({work})" if work else ""
        if points.empty:
            continue
        if len(np.unique(batches)) < 3:
            notes.append(f"no samples forecast{name}: runs reached the target at "
                         f"{len(np.unique(batches))} global batch(es), it needs 3 or more; "
                         f"{len(points)} point(s) left off the front")
            continue
        top = float(batches.max()) * MAX_FACTOR
        asked = sorted({float(b) for b in points[col.GLOBAL_BATCH] if 0 < float(b) <= top})
        far = len(points) - int((points[col.GLOBAL_BATCH].astype(float) <= top).sum())
        if far:
            notes.append(f"{far} point(s){name} left off the front: global batch beyond "
                         f"{MAX_FACTOR:g}x the largest that reached the target "
                         f"({batches.max():,.0f})")
        if not asked:
            continue
        try:
            forecast = forecast_to_target(batches, values, asked, level=SAMPLES_LEVEL)
        except ScalestudyError as err:  # the forecast refuses: say why, price nothing
            notes.append(f"no samples forecast{name}: {err}")
            continue
        models[work] = dict(forecast.model)
        by = {p.global_batch: p for p in forecast.predictions}
        for i, c in points.iterrows():
            p = by.get(float(c[col.GLOBAL_BATCH]))
            if p is not None:
                got[i] = Samples(p.value, p.low, p.high, p.level, "samples forecast")
    return got, notes, models


def _throughput_row(c: pd.Series, samples: Samples, priced: bool, level: float | None
                    ) -> dict[str, object]:
    """A point priced from its throughput (measured or forecast) and its samples: the
    short end the fewest samples at the fastest throughput, the long end the most at
    the slowest. `level`: the throughput band's (None: measured once, no band). The
    interval's level is the smaller of the parts' that have a band (NaN: none has)."""
    rate = float(c["samples_per_s"])
    per = float(c["samples"])  # the samples the cost table's times are of
    fast = per / float(c["time_s_low"]) if c["time_s_low"] > 0 else rate
    slow = per / float(c["time_s_high"]) if c["time_s_high"] > 0 else rate
    nodes = int(c[col.NODES])
    time_s, low, high = samples.value / rate, samples.low / fast, samples.high / slow
    source = ("throughput forecast" if c["predicted"] else "measured throughput"
              + (" (1 run)" if level is None else ""))
    levels = [v for v in (level, samples.level) if v is not None]
    return {"group": c[col.GROUP], "work": c["work"], "nodes": nodes,
            "ranks_per_node": int(c[col.RANKS_PER_NODE]), "world_size": int(c[col.WORLD_SIZE]),
            "global_batch": float(c[col.GLOBAL_BATCH]),
            "kind": FORECAST if c["predicted"] or not priced else MEASURED,
            "basis": f"{source} × {samples.words}", "samples": samples.value,
            "samples_low": samples.low, "samples_high": samples.high,
            "time_to_target_s": time_s, "time_low": low, "time_high": high,
            "node_hours": nodes * time_s / 3600, "node_hours_low": nodes * low / 3600,
            "node_hours_high": nodes * high / 3600,
            "level": min(levels) if levels else math.nan,
            "doubt": str(c.get("doubt") or "")}


def _finished(front: pd.DataFrame, waits: Mapping[int, float]) -> pd.DataFrame:
    """Each point's queue wait and time to result (wait + run; its long end too), and the
    front of time against node-hours per work (points whose values cannot be true left
    out, as in cost)."""
    front = front.assign(queue_wait_s=[float(waits.get(int(n), math.nan))
                                       for n in front[col.NODES]], pareto=False)
    wait = front["queue_wait_s"].fillna(0.0)
    front["finish_s"] = front["time_to_target_s"] + wait
    front["finish_high_s"] = front["time_high"] + wait
    # .loc and a bool mask: an empty object-typed mask would pick columns, not rows
    doubtful = front["doubt"].map(lambda d: any(c in str(d) for c in IMPLAUSIBLE))
    ok = front.loc[~doubtful.astype(bool)]
    for _, idx in ok.groupby("work", sort=False).groups.items():
        sub = front.loc[idx]
        keep = pareto_front(sub["time_to_target_s"].to_numpy(float),
                            sub[col.NODE_HOURS].to_numpy(float))
        front.loc[sub.index[keep], "pareto"] = True
    return front[list(FRONT_COLUMNS)]
