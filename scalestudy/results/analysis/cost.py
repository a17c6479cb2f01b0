"""What a scale costs: time to solution, node-hours, GPU-hours and energy per point of the
scaling table, the Pareto front of time against node-hours, and the point a deadline
or a budget picks.

A point's cost comes from its measured median throughput, with the repeat band (the
fastest repeat gives the low end of the time, the slowest the high end). With a
`target:` the work is one training run (core.target: samples, and epochs that may
grow with the global batch); without one, a million of the throughput's units: samples
(images), or tokens for a transformer, whose throughput is tokens/s. Energy is priced only
where it was measured (NVML on the ranks' GPUs, or the scheduler's accounting):
never invented.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd

from scalestudy.core.target import Target
from scalestudy.core.values import number
from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.efficiency import format_value, unit_of
from scalestudy.results.analysis.quality import IMPLAUSIBLE

#: Samples one unit of work is without a target.
PER_MILLION = 1e6
COST_COLUMNS: tuple[str, ...] = (
    "group", "nodes", "ranks_per_node", "world_size", "batch_size", "global_batch",
    "samples", "samples_per_s", "time_s", "time_s_low", "time_s_high", "node_hours",
    "node_hours_low", "node_hours_high", "gpu_hours", "energy_kwh", "energy_source",
    "predicted", "pareto", "pareto_group", "work", "unit", "units", "doubt",
)
#: Columns that say which work a point does: points that agree on them (and on the
#: target) are alternatives, whatever their batch, backend, tuning or layout.
WORK_COLUMNS: tuple[str, ...] = ("model", "image_size", "seq_len")


@dataclass(frozen=True)
class CostBasis:
    """What the costs are of: one training run (a target), or a million of the
    throughput's units (samples: images; tokens for a transformer)."""

    target: Target | None
    smallest_batch: float
    #: The throughput's unit, plural: "samples" (images), or "tokens".
    units: str = "samples"

    def samples(self, global_batch: float, per_sample: float = 1.0) -> float | None:
        """Samples of one unit of work at this global batch (`per_sample`: units per
        sample, so that without a target the work is a million units)."""
        if self.target is None:
            return PER_MILLION / per_sample
        return self.target.samples(global_batch, self.smallest_batch)

    def unit(self) -> str:
        """What one cost is of, for column headers and sentences."""
        return "to the target" if self.target is not None else f"per million {self.units}"


def cost_table(table: pd.DataFrame, basis: CostBasis,
               predictions: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per measured point (and per qualified prediction, `predicted` True): the
    samples of one unit of work, time (median, low, high), node-hours, GPU-hours,
    energy where measured, and whether the point is on the Pareto front: `pareto` among
    every alternative that does the same work (the same model and input, any batch,
    backend, tuning or layout), `pareto_group` within its group only. `doubt` says why a
    point's value cannot decide a front (superlinear, negative-comm: it is left out of
    both fronts; measured-once: kept, and said wherever it is named)."""
    rows = []
    works = {}
    for point in table.itertuples(index=False):
        fields = point._asdict()
        works[fields[col.GROUP]] = _work(fields)
        rows.append(_row({**fields, "work": works[fields[col.GROUP]]}, basis, predicted=False))
    if predictions is not None and len(predictions):
        for pred in predictions.itertuples(index=False):
            p = pred._asdict()
            thr = float(p["throughput_predicted"])
            nodes, size = int(p[col.NODES]), int(p[col.WORLD_SIZE])
            point = {"group": p[col.GROUP], "nodes": nodes, "world_size": size,
                     "ranks_per_node": size // max(nodes, 1), "batch_size": p[col.BATCH_SIZE],
                     "global_batch": p[col.GLOBAL_BATCH], "throughput_median": thr,
                     # the forecast's interval is the prediction's band
                     "throughput_min": _band(p.get("low"), thr),
                     "throughput_max": _band(p.get("high"), thr),
                     "work": works.get(p[col.GROUP], "")}
            rows.append(_row(point, basis, predicted=True))
    frame = pd.DataFrame([r for r in rows if r is not None], columns=list(COST_COLUMNS))
    if frame.empty:
        return frame
    implausible = frame["doubt"].map(lambda d: any(c in str(d) for c in IMPLAUSIBLE))
    for column, by in (("pareto", "work"), ("pareto_group", "group")):
        frame[column] = False
        for _, idx in frame[~implausible].groupby(by, sort=False).groups.items():
            sub = frame.loc[idx]
            front = pareto_front(sub["time_s"].to_numpy(float),
                                 sub[col.NODE_HOURS].to_numpy(float))
            frame.loc[sub.index[front], column] = True
    return frame


def _band(value: object, central: float) -> float:
    """One end of a prediction's interval (the central value where it has none)."""
    end = _number(value)
    return end if end is not None and math.isfinite(end) and end > 0 else central


def _work(point: dict[str, object]) -> str:
    """What work a point does, as a label (`resnet50, image_size 224`; "" when the
    table does not say)."""
    known = {c: point[c] for c in WORK_COLUMNS
             if c in point and point[c] is not None and str(point[c]) not in ("", "nan")}
    if "seq_len" in known:  # a transformer: its image size means nothing
        known.pop("image_size", None)
    return ", ".join(str(v) if c == "model" else f"{c} {v}" for c, v in known.items())


def _point_per_sample(point: dict[str, object]) -> float:
    """Units per sample of one point: its sequence length where it counted tokens/s."""
    seq = _number(point.get(col.SEQ_LEN))
    return seq if point.get(col.THROUGHPUT_UNIT) == "tokens/s" and seq and seq > 0 else 1.0


def _row(point: dict[str, object], basis: CostBasis, predicted: bool
         ) -> dict[str, object] | None:
    global_batch = float(point[col.GLOBAL_BATCH])  # type: ignore[arg-type]
    per = _point_per_sample(point)
    samples = basis.samples(global_batch, per)
    rate = (_number(point.get(col.THROUGHPUT_MEDIAN)) or 0.0) / per
    if samples is None or not rate > 0:
        return None
    fast = (_number(point.get(col.THROUGHPUT_MAX)) or rate * per) / per
    slow = (_number(point.get(col.THROUGHPUT_MIN)) or rate * per) / per
    nodes, gpus = float(point[col.NODES]), float(point[col.WORLD_SIZE])  # type: ignore[arg-type]
    time_s = samples / rate
    low = samples / fast if fast > 0 else time_s
    high = samples / slow if slow > 0 else time_s
    energy, source = _energy(point, samples, time_s)
    return {
        "group": point[col.GROUP], "nodes": int(nodes),
        "ranks_per_node": int(point.get(col.RANKS_PER_NODE) or gpus / nodes),  # type: ignore[call-overload]
        "world_size": int(gpus), "batch_size": point[col.BATCH_SIZE],
        "global_batch": global_batch, "samples": samples, "samples_per_s": rate,
        "time_s": time_s, "time_s_low": low, "time_s_high": high,
        "node_hours": nodes * time_s / 3600, "node_hours_low": nodes * low / 3600,
        "node_hours_high": nodes * high / 3600, "gpu_hours": gpus * time_s / 3600,
        "energy_kwh": energy, "energy_source": source, "predicted": predicted,
        "pareto": False, "pareto_group": False, "work": point.get("work", ""),
        "unit": "tokens" if per != 1 else "samples", "units": samples * per,
        "doubt": ",".join([*(c for c in str(point.get(col.FLAGS) or "").split(",")
                             if c in IMPLAUSIBLE),
                           *(["measured-once"] if point.get(col.N_REPEATS) == 1 else [])]),
    }


def _energy(point: dict[str, object], samples: float, time_s: float
            ) -> tuple[float, str | None]:
    """(kWh, source) of one unit of work from what was measured, else (NaN, None):
    J per sample from NVML, or the job's average power from the scheduler's accounting."""
    per_sample = _number(point.get("energy_j_per_sample"))
    if per_sample is not None and per_sample > 0:
        return per_sample * samples / 3.6e6, str(point.get("energy_source") or "nvml")
    power = _number(point.get("job_power_w"))
    if power is not None and power > 0:
        return power * time_s / 3.6e6, "scheduler accounting (job's average power)"
    return float("nan"), None


#: A cell as a finite float, else None (numeric text and booleans read as numbers).
_number = partial(number, text=True, booleans=True)


def pareto_front(time_s: Sequence[float] | np.ndarray, cost: Sequence[float] | np.ndarray
                 ) -> np.ndarray:
    """Indices of the points no other point beats on both time and cost (minimising
    both; ties kept), in order of time. O(n log n): sort by time, keep falling costs."""
    t = np.asarray(time_s, float)
    c = np.asarray(cost, float)
    order = np.lexsort((c, t))
    kept: list[int] = []
    best = math.inf
    for i in order:
        if c[i] < best or (c[i] == best and kept and t[i] == t[kept[-1]]):
            kept.append(int(i))
            best = min(best, float(c[i]))
    return np.asarray(kept, dtype=int)


def _finish(costs: pd.DataFrame) -> pd.Series:
    """Each point's time to result: its expected queue wait (where known) and its run."""
    return costs["finish_s"] if "finish_s" in costs else costs["time_s"]


def cheapest_within(costs: pd.DataFrame, deadline_s: float) -> pd.Series | None:
    """The measured point with the fewest node-hours that finishes within the deadline,
    its expected queue wait counted."""
    ok = costs[(_finish(costs) <= deadline_s) & ~costs["predicted"].astype(bool)]
    return None if ok.empty else ok.loc[ok[col.NODE_HOURS].idxmin()]


def first_to_finish(costs: pd.DataFrame) -> pd.Series | None:
    """The measured point whose result comes first: queue wait plus run."""
    measured = costs[~costs["predicted"].astype(bool)]
    return None if measured.empty else measured.loc[_finish(measured).idxmin()]


def _wait_words(row: pd.Series) -> str:
    """`after ~12 min in the queue` where the wait is known, else ""."""
    wait = _number(row.get(col.QUEUE_WAIT_S))
    return f", after an expected {hours(wait)} in the queue" if wait is not None else ""


def fastest_within(costs: pd.DataFrame, budget_node_hours: float) -> pd.Series | None:
    """The measured point that finishes soonest within the node-hour budget."""
    ok = costs[(costs[col.NODE_HOURS] <= budget_node_hours) & ~costs["predicted"].astype(bool)]
    return None if ok.empty else ok.loc[ok["time_s"].idxmin()]


def hours(seconds: float) -> str:
    """A duration for people: 42 s, 7.5 min, 3.1 h, 2.3 d."""
    if not math.isfinite(seconds):
        return "n/a"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size * (2 if unit == "d" else 1):
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


def parse_duration(text: str) -> float:
    """`6h`, `90min`, `45m`, `2d`, `30s` or `1:30:00` -> seconds; ValueError that says the
    forms otherwise (a bare number too: hours and seconds are both plausible)."""
    raw = text.strip().lower()
    units = {"d": 86400.0, "h": 3600.0, "min": 60.0, "m": 60.0, "s": 1.0}
    for unit in ("min", "d", "h", "m", "s"):
        if raw.endswith(unit):
            number = raw[: -len(unit)].strip()
            try:
                value = float(number) * units[unit]
            except ValueError:
                break
            if value > 0 and math.isfinite(value):
                return value
            break
    else:
        if ":" in raw:
            parts = raw.split(":")
            if len(parts) == 3 and all(p.isdigit() for p in parts):
                h, m, s = (int(p) for p in parts)
                if h * 3600 + m * 60 + s > 0:
                    return float(h * 3600 + m * 60 + s)
        else:
            try:
                value = float(raw)
            except ValueError:
                value = -1.0
            if value > 0 and math.isfinite(value):  # 6 hours or 6 seconds? Say which.
                raise ValueError(f"{text!r} has no unit: write {raw}h, {raw}min, {raw}d or "
                                 f"{raw}s (or H:MM:SS)")
    raise ValueError(f"{text!r} is not a duration: write e.g. 6h, 90min, 2d, 30s or 1:30:00")


def cost_basis(table: pd.DataFrame, target: Target | None) -> CostBasis:
    """What a study's costs are of: its target, or a million of its throughput's units."""
    units = "tokens" if unit_of(table) == "tokens/s" else "samples"
    smallest = float(pd.to_numeric(table[col.GLOBAL_BATCH], errors="coerce").min()) \
        if not table.empty else 1.0
    return CostBasis(target, smallest, units)


def costs_of(table: pd.DataFrame, target: Target | None, predictions: pd.DataFrame,
             waits: Mapping[int, float] | None = None) -> pd.DataFrame:
    """The cost table of a scaling table (qualified predictions included, marked), with
    each point's expected queue wait (`waits`: seconds by node count; NaN where not
    known) and its time to result, the wait plus the run (`finish_s`)."""
    costs = cost_table(table, cost_basis(table, target), None if table.empty else predictions)
    known = waits or {}
    costs[col.QUEUE_WAIT_S] = [float(known.get(int(n), math.nan)) for n in costs[col.NODES]] \
        if len(costs) else []
    costs["finish_s"] = costs["time_s"] + costs[col.QUEUE_WAIT_S].fillna(0.0) \
        if len(costs) else []
    return costs


def point_name(row: pd.Series) -> str:
    """`8 nodes (32 GPUs)`, or `4 GPUs on 1 node`."""
    nodes, gpus = int(row[col.NODES]), int(row[col.WORLD_SIZE])
    if nodes == 1:
        return f"{gpus} GPU{'s' if gpus != 1 else ''} on 1 node"
    return f"{nodes} nodes ({gpus} GPUs)"


def node_hours_text(value: float) -> str:
    return f"{value:,.3g} node-hours"


def pick_sentences(costs: pd.DataFrame, deadline_s: float | None,
                   budget_node_hours: float | None) -> list[str]:
    """What `--deadline` and `--budget` pick among the measured points."""
    out = []
    measured = costs[~costs["predicted"].astype(bool)] if len(costs) else costs
    if deadline_s is not None and len(measured):
        got = cheapest_within(costs, deadline_s)
        first = first_to_finish(costs)
        if got is None and first is not None:
            out.append(f"Deadline {hours(deadline_s)}: no measured point meets it; the "
                       f"first to finish, {point_name(first)} ({first['group']}), takes "
                       f"{hours(first['time_s'])}{_wait_words(first)}.")
        elif got is not None:
            out.append(f"Deadline {hours(deadline_s)}: the cheapest point that meets it is "
                       f"{point_name(got)} ({got['group']}, global batch "
                       f"{format_value(got['global_batch'])}): {hours(got['time_s'])}"
                       f"{_wait_words(got)}, for {node_hours_text(got['node_hours'])}.")
            if first is not None and first.name != got.name:
                out.append(f"The first to finish is {point_name(first)} ({first['group']}): "
                           f"{hours(first['time_s'])}{_wait_words(first)}, for "
                           f"{node_hours_text(first['node_hours'])}.")
    if budget_node_hours is not None and len(measured):
        got = fastest_within(costs, budget_node_hours)
        if got is None:
            cheapest = measured.loc[measured[col.NODE_HOURS].idxmin()]
            out.append(f"Budget {budget_node_hours:g} node-hours: no measured point fits; "
                       f"the cheapest, {point_name(cheapest)}, needs "
                       f"{node_hours_text(cheapest['node_hours'])}.")
        else:
            out.append(f"Budget {budget_node_hours:g} node-hours: the fastest point within "
                       f"it is {point_name(got)} ({got['group']}): {hours(got['time_s'])} for "
                       f"{node_hours_text(got['node_hours'])}.")
    return out
