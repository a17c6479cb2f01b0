"""Measurement quality: which runs and points should not be trusted blindly.

A run is flagged (never dropped) when

- `straggler`: its slowest rank is more than `straggler` (default 10 %) below the mean
  rank (`1 - throughput_per_rank_min / throughput_per_rank_mean`);
- `few-iters`: it timed fewer than `min_iters` (default 10) iterations;
- `noisy-run`: the coefficient of variation of its iteration times
  (`iter_time_std / iter_time_mean`) is above `max_cv` (default 5 %).

A point (one configuration, all its repeats) is also flagged `noisy-repeats` when the
coefficient of variation of throughput over its repeats is above `max_cv`, and
`oversubscribed` when more ranks ran on one host than it has cores (`host_view`: the
report knows the cores, the runs do not). Values that cannot be true, or cannot carry a
conclusion, are flagged too (`point_flags`): `superlinear` (efficiency above 100 %) and
`negative-comm` (a comm overhead below -1 %: the timing noise exceeds it); the cost front
names a point measured once as "measured once: not a conclusion". Flagged runs stay in
the median; the report lists them with the numbers that flagged them.

`host_view` also blanks the comm overhead at one rank: with no gradient sync there,
1 - compute time / step time is only the timing noise between two measurements.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from scalestudy.results.analysis import columns as col

FLAG_CODES: tuple[str, ...] = ("straggler", "few-iters", "noisy-run", "noisy-repeats",
                                "oversubscribed", "superlinear", "negative-comm")
#: Point flags that make a value implausible: such a point decides no conclusion.
IMPLAUSIBLE: tuple[str, ...] = ("superlinear", "negative-comm")
#: Efficiency above this is flagged `superlinear` (past rounding: 100.5 %).
SUPERLINEAR = 1.005
#: A comm overhead below this (at 2 ranks or more) is flagged `negative-comm`: timing
#: noise larger than the quantity measured.
NEGATIVE_COMM = -0.01


@dataclass(frozen=True)
class Thresholds:
    """Limits beyond which a run or point is flagged."""

    straggler: float = 0.10
    max_cv: float = 0.05
    min_iters: int = 10

    def describe(self) -> str:
        """The thresholds in one sentence, for the report."""
        return (f"Flags: straggler = slowest rank more than {self.straggler:.0%} below the "
                f"mean rank; few-iters = fewer than {self.min_iters} timed iterations; "
                f"noisy-run / noisy-repeats = coefficient of variation of iteration times / "
                f"of throughput over repeats above {self.max_cv:.0%}; oversubscribed = more "
                "ranks on one host than it has cores; superlinear = efficiency above 100 % "
                "(implausible: check the baseline point); negative-comm = comm overhead "
                "below -1 % (timing noise larger than the overhead).")


def _column(runs: pd.DataFrame, name: str) -> pd.Series:
    if name not in runs.columns:
        return pd.Series(np.nan, index=runs.index, dtype=float)
    return pd.to_numeric(runs[name], errors="coerce").astype(float)


def run_quality(runs: pd.DataFrame, th: Thresholds) -> pd.DataFrame:
    """Per run (same index as `runs`): rank_spread, iter_cv, iters and `flags`
    (comma-joined codes, "" when none)."""
    spread = 1 - _column(runs, "throughput_per_rank_min") / _column(
        runs, "throughput_per_rank_mean")
    cv = _column(runs, "iter_time_std") / _column(runs, "iter_time_mean")
    iters = _column(runs, "iters")
    checks = {
        "straggler": spread > th.straggler,
        "few-iters": iters < th.min_iters,
        "noisy-run": cv > th.max_cv,
    }
    flags = pd.Series("", index=runs.index, dtype=object)
    for code, hit in checks.items():
        hit = hit.fillna(False).astype(bool)
        flags[hit] = flags[hit].map(lambda f, c=code: f"{f},{c}" if f else c)
    return pd.DataFrame({"rank_spread": spread, "iter_cv": cv, "iters": iters,
                         "flags": flags}, index=runs.index)


def point_flags(table: pd.DataFrame) -> pd.Series:
    """Per point of a scaling table: superlinear, negative-comm (codes)."""
    efficiency = _column(table, "efficiency")
    comm = _column(table, "comm_overhead")
    world = _column(table, "world_size")
    checks = {
        "superlinear": efficiency > SUPERLINEAR,
        "negative-comm": (comm < NEGATIVE_COMM) & (world > 1),
    }
    flags = pd.Series("", index=table.index, dtype=object)
    for code, hit in checks.items():
        hit = hit.fillna(False).astype(bool)
        flags[hit] = flags[hit].map(lambda f, c=code: f"{f},{c}" if f else c)
    return flags


def repeat_cv(throughputs: pd.Series) -> float:
    """Sample std / mean of a point's throughput over repeats (NaN for one repeat)."""
    values = throughputs.to_numpy(float)
    if len(values) < 2 or values.mean() <= 0:
        return float("nan")
    return float(values.std(ddof=1) / values.mean())


def merge_flags(codes: list[str]) -> str:
    """Comma-joined codes in FLAG_CODES order, each once."""
    seen = {c for text in codes for c in str(text).split(",") if c}
    return ",".join(c for c in FLAG_CODES if c in seen)


def flagged_runs(done: pd.DataFrame, th: Thresholds) -> pd.DataFrame:
    """The flagged runs with the numbers that flagged them (for the report)."""
    q = run_quality(done, th)
    keep = q[col.FLAGS] != ""
    cols = [c for c in ("run_id", "nodes", "ranks_per_node", "batch_size", "repeat")
            if c in done.columns]
    out = done.loc[keep, cols].copy()
    out[col.FLAGS] = q.loc[keep, "flags"]
    out[col.RANK_SPREAD] = q.loc[keep, "rank_spread"]
    out["iter_cv"] = q.loc[keep, "iter_cv"]
    out["iters"] = q.loc[keep, "iters"]
    return out.reset_index(drop=True)


def host_view(table: pd.DataFrame, cores_per_host: int | None = None,
              one_host: bool = False) -> pd.DataFrame:
    """The scaling table as the report shows it: comm overhead NaN at one rank (no
    sync there), `ranks_per_host` (the world size when every rank runs on one host,
    else ranks per node), `host_cores` and the `oversubscribed` flag where the ranks on
    a host outnumber its cores (not checked when `cores_per_host` is None)."""
    out = table.copy()
    if col.COMM_OVERHEAD in out.columns:
        out[col.COMM_OVERHEAD] = out[col.COMM_OVERHEAD].where(out[col.WORLD_SIZE] > 1)
    if out.empty:
        return out.assign(ranks_per_host=pd.Series(dtype=float),
                          host_cores=pd.Series(dtype=float))
    out["ranks_per_host"] = out["world_size" if one_host else "ranks_per_node"].astype(int)
    out["host_cores"] = float(cores_per_host) if cores_per_host else np.nan
    over = out["ranks_per_host"] > out["host_cores"]
    out[col.FLAGS] = [merge_flags([f, "oversubscribed" if o else ""])
                    for f, o in zip(out[col.FLAGS].fillna(""), over, strict=True)]
    return out
