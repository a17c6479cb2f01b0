"""Speedup and parallel efficiency from the tidy run table (pandas only, no plotting).

World size P = nodes x ranks_per_node. Within a group of comparable runs, P0 is the
smallest world size (on a tie, the configuration with fewer nodes) and

    speedup(P)    = throughput(P) / throughput(P0)
    efficiency(P) = (throughput(P) / P) / (throughput(P0) / P0)

where throughput is the median over repeats of the images/s over all ranks. The
baseline P0 is configurable (`baseline=`): "smallest" (default), "node" (the largest
world size on one node) or a world size; a group that lacks the requested one falls
back to its smallest world size and says so in `baseline_rule`. Runs are flagged by
results.analysis.quality (stragglers, too few iterations, noise), never silently dropped.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.collect import STATUS_COLUMNS
from scalestudy.results.analysis.quality import (
    Thresholds,
    merge_flags,
    point_flags,
    repeat_cv,
    run_quality,
)

SCALING_MODES: tuple[str, ...] = ("weak", "strong")
#: Parameters that vary inside a group: the points of one scaling curve.
SHAPE_COLUMNS: tuple[str, ...] = ("nodes", "ranks_per_node", "world_size", "dp", "repeat",
                                  "run_id")
#: The batch column that varies with P in each scaling mode (the other one is fixed).
VARYING_BATCH: dict[str, str] = {"weak": "global_batch", "strong": "batch_size"}
#: Known parameters, used when a table has no `state` column to mark where they end.
KNOWN_PARAMS: tuple[str, ...] = (
    "run_id", "study", "system", "scaling", "nodes", "ranks_per_node", "world_size",
    "batch_size", "global_batch", "backend", "tuning", "repeat", "workload", "model",
    "image_size", "precision", "dp",
)
#: Order in which varying parameters are named in a group label.
LABEL_ORDER: tuple[str, ...] = ("workload", "model", "image_size", "precision", "backend",
                                "tuning")
TABLE_COLUMNS: tuple[str, ...] = (
    "nodes", "ranks_per_node", "world_size", "batch_size", "global_batch", "n_repeats",
    "throughput_median", "throughput_min", "throughput_max", "throughput_per_gpu",
    "ideal_throughput", "speedup", "efficiency", "baseline",
)
#: Metrics of the bundled workload's diagnostics, medians over repeats (NaN when absent).
DIAGNOSTIC_COLUMNS: tuple[str, ...] = (
    "step_time_s", "compute_time_s", "compute_throughput", "comm_overhead", "grad_bytes",
    "num_params", "allreduce_busbw_GBps", "allreduce_latency_s", "lr", "lr_warmup_iters",
    "energy_j_per_sample", "job_power_w", "startup_s",
)
#: A transformer run's layout and model-FLOP figures (medians; absent for other models;
#: a column that is also a grid axis stays the group's parameter).
TRANSFORMER_COLUMNS: tuple[str, ...] = (
    "tp", "pp", "microbatches", "seq_len", "bubble_fraction", "samples_per_s",
    "tokens_per_s_per_gpu", "model_tflops_per_gpu", "peak_tflops", "mfu",
    "attention_flops_share",
)
#: Quality columns after the diagnostics: see results.analysis.quality.
QUALITY_COLUMNS: tuple[str, ...] = ("throughput_cv", "rank_spread", "flags", "baseline_rule")
Baseline = str | int


def unit_of(table: pd.DataFrame) -> str:
    """The throughput's unit: what the runs recorded (`tokens/s` for the transformers),
    img/s for records that say nothing (a `command` workload, older records)."""
    if col.THROUGHPUT_UNIT in table.columns:
        units = table[col.THROUGHPUT_UNIT].dropna().astype(str).unique()
        if len(units):
            return " or ".join(sorted(units))
    return "img/s"


def groups(table: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(label, rows) per group of a scaling table, in table order."""
    return [(str(g), rows) for g, rows in table.groupby("group", sort=False)]


def param_columns(runs: pd.DataFrame) -> list[str]:
    """The run parameter columns: those before `state` (collect's layout)."""
    cols = list(runs.columns)
    if "state" in cols:
        return cols[: cols.index("state")]
    return [c for c in cols if c in KNOWN_PARAMS]


def group_keys(runs: pd.DataFrame, scaling: str) -> list[str]:
    """Parameters that define a group (a scaling curve) in this scaling mode."""
    if scaling not in SCALING_MODES:
        raise ValueError(f"scaling must be one of {SCALING_MODES}, got {scaling!r}")
    drop = {*SHAPE_COLUMNS, VARYING_BATCH[scaling], *STATUS_COLUMNS}
    return [c for c in param_columns(runs) if c not in drop]


def format_value(value: object) -> str:
    """A parameter value for people: 16.0 -> "16", NaN/None -> "none"."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "none"
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)


def _label_columns(keys: list[str], combos: pd.DataFrame, fixed_batch: str) -> list[str]:
    varying = [k for k in keys if k != fixed_batch and combos[k].nunique(dropna=False) > 1]
    return sorted(varying, key=lambda k: (LABEL_ORDER.index(k) if k in LABEL_ORDER
                                          else len(LABEL_ORDER), keys.index(k)))


def _label(combo: pd.Series, shown: list[str], scaling: str) -> str:
    parts = []
    for key in shown:
        text = format_value(combo[key])
        if key == "container":  # `none` alone would not say what it is
            parts.append("bare" if text == "none" else f"in {text}")
            continue
        parts.append(text if isinstance(combo[key], str) else f"{key} {text}")
    if scaling == "weak":
        parts.append(f"batch {format_value(combo.get('batch_size'))}")
    else:
        parts.append(f"global batch {format_value(combo.get('global_batch'))}")
    return " ".join(parts)


def _empty_table(keys: list[str]) -> pd.DataFrame:
    cols = ["group", *[k for k in keys if k not in TABLE_COLUMNS], *TABLE_COLUMNS,
            *DIAGNOSTIC_COLUMNS, *QUALITY_COLUMNS]
    dtypes = {"group": str, "baseline": bool, "flags": str, "baseline_rule": str}
    return pd.DataFrame({c: pd.Series(dtype=dtypes.get(c, float)) for c in cols})


def _baseline_row(agg: pd.DataFrame, baseline: Baseline) -> tuple[int, str]:
    """Index of the baseline row in `agg` (sorted by world size) and how it was chosen."""
    if baseline == "node":
        one = agg.index[agg[col.NODES] == 1]
        if len(one):
            return int(one[-1]), "one node"
        return 0, "no one-node run: smallest world size"
    if isinstance(baseline, int) and not isinstance(baseline, bool):
        hit = agg.index[agg[col.WORLD_SIZE] == baseline]
        if len(hit):
            return int(hit[0]), f"world size {baseline}"
        return 0, f"world size {baseline} not measured: smallest world size"
    return 0, "smallest world size"


def _aggregate(done: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per group and (nodes, ranks_per_node), in order of first appearance:
    median/min/max throughput over repeats, their CV, diagnostics' medians, flags."""
    cols = [*keys, "nodes", "ranks_per_node"]
    numeric = [c for c in (*TRANSFORMER_COLUMNS, *col.INPUT_COLUMNS, *col.NOISE_COLUMNS)
               if c in done.columns and c not in cols]
    done = done.assign(**{c: pd.to_numeric(done[c], errors="coerce") for c in numeric})
    by = done.groupby(cols, dropna=False, sort=False)
    named = {"world_size": ("world_size", "first")}
    if col.DP in done.columns:
        named[col.DP] = ("dp", "first")
    named |= {c: (c, "first") for c in ("batch_size", "global_batch") if c not in keys}
    agg = by.agg(**named, n_repeats=("throughput", "size"),
                 throughput_median=("throughput", "median"),
                 throughput_min=("throughput", "min"), throughput_max=("throughput", "max"))
    agg["throughput_cv"] = by[col.THROUGHPUT].agg(repeat_cv)
    for column in DIAGNOSTIC_COLUMNS:
        agg[column] = by[column].median() if column in done.columns else np.nan
    for column in numeric:
        agg[column] = by[column].median()
    for column in ("throughput_unit", "peak_source", *col.INPUT_TEXT_COLUMNS):
        if column in done.columns:
            agg[column] = by[column].first()
    agg[col.RANK_SPREAD] = by[col.RANK_SPREAD].max()
    agg[col.FLAGS] = by[col.FLAGS].agg(",".join)
    return agg.reset_index()


def _curve(agg: pd.DataFrame, baseline: Baseline = "smallest") -> pd.DataFrame:
    """One group's aggregated points, sorted by world size, scaled to its baseline."""
    agg = agg.sort_values(["world_size", "nodes"], kind="stable").reset_index(drop=True)
    b, rule = _baseline_row(agg, baseline)
    p0 = float(agg.loc[b, "world_size"])
    t0 = float(agg.loc[b, "throughput_median"])
    size = agg[col.WORLD_SIZE].astype(float)
    agg[col.THROUGHPUT_PER_GPU] = agg[col.THROUGHPUT_MEDIAN] / size
    agg["ideal_throughput"] = size / p0 * t0
    agg["speedup"] = agg[col.THROUGHPUT_MEDIAN] / t0
    agg[col.EFFICIENCY] = (agg[col.THROUGHPUT_MEDIAN] / size) / (t0 / p0)
    agg[col.BASELINE] = False
    agg.loc[b, ["speedup", "efficiency", "baseline"]] = [1.0, 1.0, True]
    agg[col.BASELINE_RULE] = rule
    return agg


def completed_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Completed runs with a finite positive throughput; world_size = nodes x ranks_per_node."""
    if col.STATE not in runs.columns or col.THROUGHPUT not in runs.columns:
        return runs.iloc[0:0].copy()
    done = runs[runs[col.STATE] == "completed"].copy()
    done[col.THROUGHPUT] = pd.to_numeric(done[col.THROUGHPUT], errors="coerce").astype(float)
    done = done[np.isfinite(done[col.THROUGHPUT]) & (done[col.THROUGHPUT] > 0)]
    for column in ("nodes", "ranks_per_node"):
        done[column] = pd.to_numeric(done[column], errors="coerce")
    done = done.dropna(subset=["nodes", "ranks_per_node"])
    done[col.NODES] = done[col.NODES].astype(int)
    done[col.RANKS_PER_NODE] = done[col.RANKS_PER_NODE].astype(int)
    done[col.WORLD_SIZE] = done[col.NODES] * done[col.RANKS_PER_NODE]
    for column in ("batch_size", "global_batch"):
        if column not in done.columns:
            done[column] = np.nan
    for column in DIAGNOSTIC_COLUMNS:
        if column in done.columns:
            done[column] = pd.to_numeric(done[column], errors="coerce").astype(float)
    return done


def one_peak(done: pd.DataFrame) -> pd.DataFrame:
    """One MFU denominator for the whole study: where the runs divided by different peaks
    (each measured its own matmul on a loaded machine), every MFU is recomputed against
    the highest of them, the one least disturbed, shown as `peak_tflops` (each run's own
    stays in runs.csv). A peak given by the profile or the spec is the same for all."""
    if "peak_tflops" not in done or "model_tflops_per_gpu" not in done:
        return done
    peaks = pd.to_numeric(done[col.PEAK_TFLOPS], errors="coerce")
    if peaks.dropna().nunique() < 2:
        return done
    peak = float(peaks.max())
    out = done.copy()
    out[col.PEAK_TFLOPS] = peak
    out[col.MFU] = pd.to_numeric(out["model_tflops_per_gpu"], errors="coerce") / peak
    out["peak_source"] = (f"the highest of {int(peaks.notna().sum())} peaks measured by the "
                          "runs, one for the study")
    return out


def scaling_table(runs: pd.DataFrame, scaling: str, baseline: Baseline = "smallest",
                  thresholds: Thresholds | None = None) -> pd.DataFrame:
    """Per group and (nodes, ranks_per_node): median/min/max throughput over repeats,
    per-GPU throughput, ideal throughput, speedup and efficiency against the baseline,
    then the diagnostics' medians and the quality flags.

    Rows come in group order (first appearance in `runs`), then by world size and nodes.
    """
    th = thresholds or Thresholds()
    keys = group_keys(runs, scaling)
    done = completed_runs(runs)
    if done.empty:
        return _empty_table(keys)
    done = one_peak(done)
    quality = run_quality(done, th)
    done[col.RANK_SPREAD] = quality[col.RANK_SPREAD]
    done[col.FLAGS] = quality[col.FLAGS]
    agg = _aggregate(done, keys)
    grouped = agg.groupby(keys, dropna=False, sort=False) if keys else [((), agg)]
    curves = [_curve(points, baseline) for _, points in grouped]
    combos = pd.DataFrame([c.iloc[0] for c in curves]).reset_index(drop=True)
    fixed_batch = "batch_size" if scaling == "weak" else "global_batch"
    shown = _label_columns(keys, combos, fixed_batch)
    for curve, (_, combo) in zip(curves, combos.iterrows(), strict=True):
        curve.insert(0, "group", _label(combo, shown, scaling))
    table = pd.concat(curves, ignore_index=True)
    noisy = table["throughput_cv"] > th.max_cv
    table[col.FLAGS] = [merge_flags([f, "noisy-repeats" if n else "", p])
                      for f, n, p in zip(table[col.FLAGS], noisy, point_flags(table),
                                         strict=True)]
    extra = [c for c in (*TRANSFORMER_COLUMNS, *col.INPUT_COLUMNS, *col.INPUT_TEXT_COLUMNS,
                         *col.NOISE_COLUMNS, "dp", "throughput_unit", "peak_source")
             if c in table.columns and c not in keys]
    order = ["group", *[k for k in keys if k not in TABLE_COLUMNS], *TABLE_COLUMNS,
             *DIAGNOSTIC_COLUMNS, *QUALITY_COLUMNS, *extra]
    table = table[order]
    for column in ("nodes", "ranks_per_node", "world_size", "n_repeats"):
        table[column] = table[column].astype(int)
    table[col.BASELINE] = table[col.BASELINE].astype(bool)
    return table


def failures(runs: pd.DataFrame) -> pd.DataFrame:
    """Failed runs with what identifies them (varying parameters) and the reason."""
    if col.STATE not in runs.columns:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in ("run_id", "reason")})
    failed = runs[runs[col.STATE] == "failed"]
    params = param_columns(runs)
    always = ["run_id", "nodes", "ranks_per_node", "world_size", "repeat"]
    varying = [c for c in params if c not in always and c != "study"
               and runs[c].nunique(dropna=False) > 1]
    cols = [c for c in [*always, *varying, "exit_code", "reason", "failure", "failure_line"]
            if c in runs.columns]
    return failed[cols].reset_index(drop=True)
