"""A study's forecasts: its scaling-table rows as forecast points (the same for `predict`
and the report, and for a study and its stored copy), and the report's predictions
replaced by forecasts with their intervals, up to what the forecast supports."""

from __future__ import annotations

import math

import pandas as pd

from scalestudy.core.errors import ScalestudyError
from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.commmodel import units_per_sample
from scalestudy.results.analysis.forecast import LAYOUT_COLUMNS, Forecast, forecast


def study_points(rows: pd.DataFrame, scaling: str
                 ) -> tuple[pd.DataFrame, tuple[float, float] | None]:
    """A study group's scaling-table rows as forecast points (the per-GPU batch in the
    throughput's own unit, so that step times are seconds; the layout where the runs
    carry it), and the allreduce probe of its largest scale (busbw GB/s, gradient
    bytes) where the runs measured one."""
    per = units_per_sample(rows)
    points = pd.DataFrame({
        "gpus": rows[col.WORLD_SIZE].astype(int),
        "throughput": rows[col.THROUGHPUT_MEDIAN].astype(float),
        "per_gpu_batch": rows[col.BATCH_SIZE].astype(float) * per,
        "nodes": rows[col.NODES].astype(int),
        "sample_units": per,  # one sample, in the batches' units
        # strong scaling: the global batch held, shared out
        **({"global_batch": rows[col.GLOBAL_BATCH].astype(float) * per}
           if scaling == "strong" else {}),
        **{c: rows[c] for c in LAYOUT_COLUMNS if c in rows}})
    return points, probe_of(rows)


def probe_of(rows: pd.DataFrame) -> tuple[float, float] | None:
    """(busbw GB/s, gradient bytes) of the allreduce probe at a group's largest scale,
    or None where its runs did not measure one."""
    top = rows[rows[col.WORLD_SIZE] == rows[col.WORLD_SIZE].max()]
    busbw = (pd.to_numeric(top["allreduce_busbw_GBps"], errors="coerce").median()
             if "allreduce_busbw_GBps" in top else math.nan)
    grad = (pd.to_numeric(rows[col.GRAD_BYTES], errors="coerce").median()
            if "grad_bytes" in rows else math.nan)
    return (float(busbw), float(grad)) if busbw > 0 and grad > 0 else None


def with_intervals(table: pd.DataFrame, fits: pd.DataFrame, preds: pd.DataFrame,
                   scaling: str, level: float = 0.9) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The report's predictions (commmodel.model_study's, qualified) as forecasts: each
    group's measured medians forecast at its predicted scales, the figure, efficiency,
    comm share and step time replaced, the interval and the model added. A group the
    forecast refuses loses its predictions, and its fit says why (`withheld`); a scale
    beyond what the forecast supports (forecast_limits.beyond) is dropped, and the comm
    share is NaN where the points do not tell compute and communication apart."""
    fits, out = fits.copy(), []
    asked = []
    for group, rows in preds.groupby("group", sort=False):
        measured = table[table[col.GROUP] == group]
        points, probe = study_points(measured, scaling)
        per_node = measured[col.RANKS_PER_NODE].dropna().unique() \
            if "ranks_per_node" in measured else []
        asked.append((points, [int(g) for g in rows[col.WORLD_SIZE]], level,
                      int(per_node[0]) if len(per_node) == 1 else None, probe))
    # each forecast takes milliseconds (its refits solved together): forking would cost
    # more than it saves
    answers = [_group_forecast(a) for a in asked]
    for (group, rows), got in zip(preds.groupby("group", sort=False), answers, strict=True):
        measured = table[table[col.GROUP] == group]
        if isinstance(got, str):
            fits.loc[fits[col.GROUP] == group, "withheld"] = f"no forecast ({got})"
            continue
        rows = rows.copy()
        last = float(measured.sort_values("world_size")[col.EFFICIENCY].iloc[-1])
        for i, p in enumerate(got.predictions):
            if p.limit:  # beyond what the forecast supports: not shown
                continue
            ratio = p.throughput / float(rows["throughput_predicted"].iloc[i])
            rows.iloc[i, rows.columns.get_indexer(
                ["throughput_predicted", "efficiency_predicted", "step_time_fitted",
                 "comm_share", "low", "high", "level", "forecast_model",
                 "above_measured"])] = [
                p.throughput, float(rows["efficiency_predicted"].iloc[i]) * ratio,
                float(rows["step_time_fitted"].iloc[i]) / ratio,
                p.comm_s / p.step_s if p.split else math.nan,
                p.low, p.high, p.level, f"{got.model['terms']} ({got.model['latency']})",
                float(rows["efficiency_predicted"].iloc[i]) * ratio > last + 1e-9]
        out.append(rows[[not p.limit for p in got.predictions]])
    return fits, (pd.concat(out, ignore_index=True) if out else preds.iloc[0:0])


def _group_forecast(args: tuple[pd.DataFrame, list[int], float, int | None,
                                tuple[float, float] | None]) -> Forecast | str:
    """One report group's forecast, or why there is none (for `fork_pool.mapped`)."""
    points, gpus, level, per_node, probe = args
    try:
        return forecast(points, gpus, level=level, gpus_per_node=per_node, probe=probe)
    except ScalestudyError as e:
        return str(e)
