"""Time and node-hours to a measured target per point of a study: how long each scale took
to train to the target (docs/target.md), what it cost, which point trains fastest and
which cheapest, and the Pareto front of time against node-hours among them.

A point is one group of the scaling table (efficiency.py: workload, model, batch, backend,
tuning...) at one (nodes, ranks_per_node). Only completed runs that measured a target
count (`target_reached` set by the bundled workload); a run that did not reach it is
counted as not reached, never averaged in. Over the repeats that reached it:

- the median time to the target (`time_to_target_s`: training and evaluation until the
  held-out metric first reached the value) and an interval for that median: the
  distribution-free confidence interval from order statistics (the k-th smallest and the
  k-th largest value, k as large as keeps the binomial coverage at 90 % or more); with
  fewer than 5 repeats no such interval reaches 90 %, and it is the min-max, which holds
  the median with 1 - 2 * 0.5**n (75 % at 3 repeats, 50 % at 2, nothing at 1);
- node-hours to the target = nodes x time / 3600, with the same interval scaled;
- the median samples (and steps) to the target.
"""

from __future__ import annotations

import math

import pandas as pd

from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.cost import hours, point_name
from scalestudy.results.analysis.efficiency import completed_runs, format_value, group_keys

#: The columns a measured target adds to runs.csv (the bundled workload's record).
REACHED, TIME_S, SAMPLES, STEPS, BEST, METRIC = (
    "target_reached", "time_to_target_s", "samples_to_target", "steps_to_target",
    "best_value", "target_metric")
#: The coverage asked of the median's interval.
LEVEL = 0.90
INTERVAL_TEXT = (
    "[interval] = the median's distribution-free confidence interval over the repeats "
    "that reached the target (order statistics, coverage ≥ 90 %); with fewer than 5 such "
    "repeats it is their min–max, which holds the median with 1 − 2·0.5ⁿ (75 % at 3, "
    "50 % at 2, a single value at 1).")
COLUMNS: tuple[str, ...] = (
    "group", "nodes", "ranks_per_node", "world_size", "global_batch", "runs", "reached",
    "not_reached", "time_to_target_s", "time_low", "time_high", "node_hours",
    "node_hours_low", "node_hours_high", "samples_to_target", "steps_to_target",
    "best_not_reached", "interval", "coverage", "fastest", "cheapest", "pareto")


def measured(runs: pd.DataFrame) -> bool:
    """Whether any completed run of the study measured a target (its record says whether
    it reached it)."""
    if REACHED not in runs.columns:
        return False
    done = completed_runs(runs)
    return bool(len(done)) and bool(done[REACHED].map(_flag).notna().any())


def _flag(value: object) -> bool | None:
    """runs.csv's `target_reached` (a bool, or its text after a CSV round trip) -> bool;
    None when the run measured no target."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, str):
        text = value.strip().lower()
        return True if text in ("true", "1", "yes") else False if text in (
            "false", "0", "no") else None
    return bool(value)


def median_interval(values: list[float]) -> tuple[float, float, float, float]:
    """(median, low, high, coverage) of `values`: the order-statistic interval of the
    median at ≥ LEVEL coverage, or the min–max (with its lower coverage) when too few."""
    x = sorted(values)
    n = len(x)
    if n == 0:
        return math.nan, math.nan, math.nan, math.nan
    median = float(pd.Series(x).median())
    best_k, coverage = 1, 1 - 2 * 0.5 ** n if n > 1 else 0.0
    for k in range(2, n // 2 + 1):  # [x_(k), x_(n+1-k)]: P(inside) = 1 - 2 P(Bin <= k-1)
        cover = 1 - 2 * sum(math.comb(n, i) for i in range(k)) * 0.5 ** n
        if cover < LEVEL:
            break
        best_k, coverage = k, cover
    return median, float(x[best_k - 1]), float(x[n - best_k]), coverage


def _labels(table: pd.DataFrame, keys: list[str]) -> dict[tuple[str, ...], str]:
    """The scaling table's group label of each (key values..., nodes, ranks_per_node)."""
    return {_key(r, keys): str(r[col.GROUP]) for _, r in table.iterrows()}


def _key(row: pd.Series, keys: list[str]) -> tuple[str, ...]:
    return (*(format_value(row.get(k)) for k in keys),
            format_value(row[col.NODES]), format_value(row[col.RANKS_PER_NODE]))


def to_target(runs: pd.DataFrame, table: pd.DataFrame, scaling: str) -> pd.DataFrame:
    """One row per point that measured a target (COLUMNS), in the scaling table's order;
    empty when no run measured one. `table`: the study's scaling table (its group labels)."""
    if not measured(runs):
        return pd.DataFrame(columns=list(COLUMNS))
    done = completed_runs(runs)
    done = done.assign(_reached=done[REACHED].map(_flag))
    done = done[done["_reached"].notna()]
    keys = group_keys(runs, scaling)
    labels = _labels(table, keys)
    rows = []
    for _, part in done.groupby([*keys, col.NODES, col.RANKS_PER_NODE], dropna=False,
                                sort=False):
        first = part.iloc[0]
        reached = part[part["_reached"].astype(bool)]
        times = pd.to_numeric(reached[TIME_S], errors="coerce").dropna()
        median, low, high, coverage = median_interval([float(t) for t in times])
        nodes = int(first[col.NODES])
        best = pd.to_numeric(part.loc[~part["_reached"].astype(bool), BEST]
                             if BEST in part else pd.Series(dtype=float),
                             errors="coerce").dropna()
        rows.append({
            "group": labels.get(_key(first, keys), ""), "nodes": nodes,
            "ranks_per_node": int(first[col.RANKS_PER_NODE]),
            "world_size": int(first[col.WORLD_SIZE]),
            "global_batch": pd.to_numeric(pd.Series([first.get(col.GLOBAL_BATCH)]),
                                          errors="coerce").iloc[0],
            "runs": len(part), "reached": len(reached), "not_reached": len(part) - len(reached),
            "time_to_target_s": median, "time_low": low, "time_high": high,
            "node_hours": nodes * median / 3600, "node_hours_low": nodes * low / 3600,
            "node_hours_high": nodes * high / 3600,
            "samples_to_target": _median(reached, SAMPLES),
            "steps_to_target": _median(reached, STEPS),
            "best_not_reached": _best(best, str(first.get(METRIC, ""))),
            "interval": ("none" if len(times) == 0 else "order statistics" if coverage >= LEVEL
                         else "min–max"),
            "coverage": coverage})
    out = pd.DataFrame(rows, columns=[c for c in COLUMNS
                                      if c not in ("fastest", "cheapest", "pareto")])
    order = {label: i for i, label in enumerate(dict.fromkeys(table[col.GROUP].astype(str)))}
    out = out.sort_values(["group", "world_size", "nodes"], kind="stable",
                          key=lambda s: s.map(order) if s.name == "group" else s)
    return _marked(out.reset_index(drop=True))


def reached_runs(runs: pd.DataFrame, table: pd.DataFrame, scaling: str) -> pd.DataFrame:
    """One row per completed run that reached a measured target: its point's group label
    (the scaling table's), global batch and samples to the target (what the samples
    forecast of the target front is fitted on; empty when none reached one)."""
    out = pd.DataFrame(columns=["group", "global_batch", "samples_to_target"])
    if not measured(runs) or SAMPLES not in runs.columns:
        return out
    done = completed_runs(runs)
    done = done[done[REACHED].map(lambda v: _flag(v) is True).astype(bool)]
    keys = group_keys(runs, scaling)
    labels = _labels(table, keys)
    got = pd.DataFrame({
        "group": [labels.get(_key(r, keys), "") for _, r in done.iterrows()],
        "global_batch": pd.to_numeric(done[col.GLOBAL_BATCH], errors="coerce").to_numpy(),
        "samples_to_target": pd.to_numeric(done[SAMPLES], errors="coerce").to_numpy()})
    ok = (got["global_batch"] > 0) & (got["samples_to_target"] > 0)
    return got[ok].reset_index(drop=True) if len(got) else out


def _median(rows: pd.DataFrame, column: str) -> float:
    if column not in rows.columns:
        return math.nan
    values = pd.to_numeric(rows[column], errors="coerce").dropna()
    return float(values.median()) if len(values) else math.nan


def _best(values: pd.Series, metric: str) -> float:
    """The best value a not-reached run got: the lowest loss, the highest accuracy."""
    if values.empty:
        return math.nan
    return float(values.max() if "accuracy" in metric else values.min())


def _marked(out: pd.DataFrame) -> pd.DataFrame:
    """The fastest and the cheapest point, and the Pareto front of time against
    node-hours among the points that reached the target."""
    out = out.assign(fastest=False, cheapest=False, pareto=False)
    ok = out[out["time_to_target_s"].map(lambda v: math.isfinite(float(v)))]
    if ok.empty:
        return out
    out.loc[ok["time_to_target_s"].idxmin(), "fastest"] = True
    out.loc[ok["node_hours"].idxmin(), "cheapest"] = True
    for i, r in ok.iterrows():
        t, h = float(r["time_to_target_s"]), float(r["node_hours"])
        beaten = ((ok["time_to_target_s"] <= t) & (ok["node_hours"] <= h)
                  & ((ok["time_to_target_s"] < t) | (ok["node_hours"] < h)))
        out.loc[i, "pareto"] = not bool(beaten.any())
    return out


def point_label(row: pd.Series, several: bool) -> str:
    """A point as people say it: `global batch 32 at 2 GPUs on 1 node`."""
    where = point_name(row)
    return f"{row['group']} at {where}" if several or row["group"] else where


def sentence(points: pd.DataFrame) -> str:
    """Which point trains fastest and which cheapest, with their medians (or why none)."""
    if points.empty:
        return ""
    ok = points[points["fastest"] | points["cheapest"]]
    if ok.empty:
        return (f"No point reached the target: {int(points['not_reached'].sum())} run(s), "
                "none of them reached it.")
    several = points["group"].nunique() > 1
    fast = points[points["fastest"]].iloc[0]
    cheap = points[points["cheapest"]].iloc[0]
    said = (f"{hours(fast['time_to_target_s'])} for {fast['node_hours']:,.3g} node-hours")
    if fast.name == cheap.name:
        return (f"Fastest and cheapest to the target: {point_label(fast, several)} ({said}).")
    return (f"Fastest to the target: {point_label(fast, several)} ({said}); cheapest: "
            f"{point_label(cheap, several)} ({cheap['node_hours']:,.3g} node-hours in "
            f"{hours(cheap['time_to_target_s'])}).")
