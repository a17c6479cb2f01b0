"""What a container costs: each containerised point of a study beside the same point run
bare (the `container` axis: `none` and one or more images), from the scaling table's
medians and repeat bands. The throughput and step time are the repeats' medians with
their min-max band; the start-up time is the job's launch line to the last rank's first
step (the record's `startup_s`). A difference counts only where the two sides' repeat
bands do not overlap: otherwise the verdict is that there is none within the noise, and
with one repeat a side that nothing can be told.
"""

from __future__ import annotations

import math

import pandas as pd

from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.efficiency import VARYING_BATCH, format_value

BARE = "none"
COLUMNS: tuple[str, ...] = (
    "container", "point", "nodes", "world_size", "n_repeats_bare", "n_repeats_container",
    "throughput_bare", "throughput_bare_min", "throughput_bare_max",
    "throughput_container", "throughput_container_min", "throughput_container_max",
    "throughput_change", "step_time_bare", "step_time_container", "startup_bare",
    "startup_container", "verdict")


def _value(row: pd.Series, name: str) -> float:
    value = row.get(name)
    return float(value) if value is not None and pd.notna(value) else math.nan


def verdict(bare: tuple[float, float, int], boxed: tuple[float, float, int],
            change: float) -> str:
    """What the two repeat bands (min, max, repeats) say about the container."""
    if bare[2] < 2 or boxed[2] < 2:
        return "one repeat a side: cannot tell a difference from noise"
    if boxed[0] <= bare[1] and bare[0] <= boxed[1]:
        return "no difference within the noise (the repeat bands overlap)"
    return f"{'slower' if change < 0 else 'faster'} in the container by {abs(change):.1%}"


def container_costs(table: pd.DataFrame, scaling: str) -> pd.DataFrame:
    """One row per containerised point that was also measured bare (empty without a
    container axis)."""
    if table.empty or col.CONTAINER not in table or not (table[col.CONTAINER] == BARE).any():
        return pd.DataFrame(columns=list(COLUMNS))
    first_metric = list(table.columns).index(col.NODES)
    keys = [c for c in table.columns[:first_metric] if c not in (col.GROUP, col.CONTAINER)]
    keys += [col.NODES, col.RANKS_PER_NODE, VARYING_BATCH[scaling]]
    as_key = table[keys].map(format_value).apply(tuple, axis=1)
    bare = {k: r for k, (_, r) in zip(as_key, table.iterrows(), strict=True)
            if r[col.CONTAINER] == BARE}
    rows = []
    for key, (_, r) in zip(as_key, table.iterrows(), strict=True):
        if r[col.CONTAINER] == BARE or key not in bare:
            continue
        b = bare[key]
        change = _value(r, col.THROUGHPUT_MEDIAN) / _value(b, col.THROUGHPUT_MEDIAN) - 1
        sides = [(_value(x, col.THROUGHPUT_MIN), _value(x, col.THROUGHPUT_MAX),
                  int(_value(x, col.N_REPEATS))) for x in (b, r)]
        point = " ".join(f"{k} {format_value(r[k])}" for k in keys
                         if k not in (col.NODES, col.RANKS_PER_NODE))
        rows.append({
            "container": str(r[col.CONTAINER]), "point": point,
            "nodes": int(r[col.NODES]), "world_size": int(r[col.WORLD_SIZE]),
            "n_repeats_bare": sides[0][2], "n_repeats_container": sides[1][2],
            "throughput_bare": _value(b, col.THROUGHPUT_MEDIAN),
            "throughput_bare_min": sides[0][0], "throughput_bare_max": sides[0][1],
            "throughput_container": _value(r, col.THROUGHPUT_MEDIAN),
            "throughput_container_min": sides[1][0],
            "throughput_container_max": sides[1][1],
            "throughput_change": change,
            "step_time_bare": _value(b, "step_time_s"),
            "step_time_container": _value(r, "step_time_s"),
            "startup_bare": _value(b, "startup_s"),
            "startup_container": _value(r, "startup_s"),
            "verdict": verdict(sides[0], sides[1], change),
        })
    return pd.DataFrame(rows, columns=list(COLUMNS))


def finding(costs: pd.DataFrame) -> list[str]:
    """One sentence per container over its points."""
    out = []
    for name, rows in costs.groupby("container", sort=False):
        noise = rows["verdict"].str.startswith("no difference").sum()
        told = rows["verdict"].str.contains("in the container by").sum()
        median = float(rows["throughput_change"].median())
        start = (rows["startup_container"] - rows["startup_bare"]).dropna()
        startup = (f"; start-up {float(start.median()):+.1f} s" if len(start) else "")
        out.append(f"Container {name}: throughput {median:+.1%} against bare (median of "
                   f"{len(rows)} point(s)); {noise} point(s) show no difference within the "
                   f"noise, {told} a difference beyond it{startup}.")
    return out
