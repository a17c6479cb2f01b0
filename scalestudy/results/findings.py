"""Findings: short sentences computed from the numbers of the report.

Every sentence quotes numbers that the report's tables show (efficiency, per-GPU
throughput, global batch, comm overhead, the model's fit and predictions, run counts).
"""

from __future__ import annotations

import math

import pandas as pd

from scalestudy.results.analyze import format_value

#: Efficiency levels the findings report crossings of.
LEVELS: tuple[float, ...] = (0.90, 0.75)


def _at(row: pd.Series) -> str:
    return (f"{int(row['world_size'])} GPUs ({int(row['nodes'])} × "
            f"{int(row['ranks_per_node'])}, global batch {format_value(row['global_batch'])})")


def efficiency_findings(table: pd.DataFrame) -> list[str]:
    """Where each group first drops below 90 % and 75 % efficiency, or that none does."""
    out = []
    for group, rows in table.groupby("group", sort=False):
        rows = rows.sort_values("world_size")
        low = rows.loc[rows["efficiency"].idxmin()]
        firsts: dict[int, list[float]] = {}  # row -> the levels it is the first below
        for level in LEVELS:
            below = rows[rows["efficiency"] < level]
            if len(below):
                firsts.setdefault(below.index[0], []).append(level)
        for index, levels in firsts.items():
            first = rows.loc[index]
            named = " and ".join(f"{level:.0%}" for level in levels)
            out.append(f"{group}: efficiency falls below {named} at {_at(first)}: "
                       f"{first['efficiency']:.1%}.")
        if not firsts:
            out.append(f"{group}: efficiency stays at or above {LEVELS[0]:.0%} up to "
                       f"{int(rows['world_size'].max())} GPUs (lowest {low['efficiency']:.1%} "
                       f"at {int(low['world_size'])} GPUs).")
    return out


def comm_findings(table: pd.DataFrame, points: pd.DataFrame) -> list[str]:
    """Communication's share of the step at each group's largest scale: measured when
    the runs carry comm_overhead, else as the model attributes it."""
    out = []
    for group, rows in table.groupby("group", sort=False):
        top = rows.loc[rows["world_size"].idxmax()]
        if len(rows) < 2:
            continue
        measured = top.get("comm_overhead", float("nan"))
        if measured is not None and math.isfinite(measured):
            out.append(f"{group}: at {int(top['world_size'])} GPUs, gradient sync takes "
                       f"{measured:.1%} of the step time (measured comm overhead).")
            continue
        fit = points[(points["group"] == group) & (points["world_size"] == top["world_size"])]
        if len(fit):
            out.append(f"{group}: at {int(top['world_size'])} GPUs, the model attributes "
                       f"{fit['comm_share'].iloc[0]:.1%} of the step time to communication.")
    return out


def batch_findings(table: pd.DataFrame, scaling: str) -> list[str]:
    """Weak scaling with a batch sweep: does the largest per-GPU batch beat the smallest
    at the largest world size measured with both?"""
    if scaling != "weak" or table["batch_size"].nunique() < 2:
        return []
    rest = table["group"].str.replace(r"\s*batch \S+$", "", regex=True)
    out = []
    for key, rows in table.assign(_rest=rest).groupby("_rest", sort=False):
        both = rows.groupby("world_size").filter(lambda r: r["batch_size"].nunique() > 1)
        if both.empty:
            continue
        at = both[both["world_size"] == both["world_size"].max()]
        small = at.loc[at["batch_size"].idxmin()]
        large = at.loc[at["batch_size"].idxmax()]
        gain = large["throughput_per_gpu"] / small["throughput_per_gpu"] - 1
        verdict = "helps" if gain > 0.02 else ("hurts" if gain < -0.02 else "makes no "
                                                                           "difference")
        name = f"{key}: " if key else ""
        out.append(
            f"{name}at {int(small['world_size'])} GPUs, per-GPU batch "
            f"{format_value(large['batch_size'])} (global {format_value(large['global_batch'])}"
            f") gives {large['throughput_per_gpu']:,.1f} img/s per GPU vs "
            f"{small['throughput_per_gpu']:,.1f} at batch {format_value(small['batch_size'])} "
            f"(global {format_value(small['global_batch'])}) ({gain:+.1%}): the larger batch "
            f"{verdict} (efficiency {large['efficiency']:.1%} vs {small['efficiency']:.1%}).")
    return out


def lr_findings(table: pd.DataFrame, scaling: str) -> list[str]:
    """The learning-rate scaling the growth of the global batch calls for."""
    g = pd.to_numeric(table["global_batch"], errors="coerce").dropna()
    if g.empty:
        return []
    lo, hi = float(g.min()), float(g.max())
    if hi <= lo:
        return [f"The global batch is {format_value(hi)} at every scale ({scaling} scaling): "
                "the learning rate needs no rescaling."]
    k = hi / lo
    warm = ("a gradual warm-up over the first epochs (Goyal et al. used 5 epochs at a "
            "global batch of 8,192)" if k >= 8 else "a short warm-up")
    out = [f"The global batch grows from {format_value(lo)} to {format_value(hi)} "
           f"({k:g}×): linear scaling multiplies the learning rate by {k:g}, square-root "
           f"scaling by {math.sqrt(k):.2f}; use {warm}."]
    used = table.dropna(subset=["lr"]) if "lr" in table.columns else table[:0]
    if len(used) and used["global_batch"].nunique() > 1:
        first = used.loc[used["global_batch"].idxmin()]
        last = used.loc[used["global_batch"].idxmax()]
        kg = float(last["global_batch"]) / float(first["global_batch"])
        ratio = float(last["lr"]) / float(first["lr"])
        rule = ("linear" if math.isclose(ratio, kg, rel_tol=0.02) else "square-root"
                if math.isclose(ratio, math.sqrt(kg), rel_tol=0.02) else "no" if
                math.isclose(ratio, 1.0, rel_tol=0.02) else "a custom")
        out.append(f"The runs used lr {float(first['lr']):.4g} at global batch "
                   f"{format_value(first['global_batch'])} and {float(last['lr']):.4g} at "
                   f"{format_value(last['global_batch'])} ({ratio:.3g}×: {rule} scaling), "
                   f"warm-up {format_value(last.get('lr_warmup_iters'))} iterations.")
    return out


def model_findings(fits: pd.DataFrame, preds: pd.DataFrame) -> list[str]:
    """The model's hold-out error and its prediction at the largest scale predicted."""
    out = []
    for fit in fits.itertuples(index=False):
        if fit.status != "fitted":
            out.append(f"{fit.group}: no model fit ({fit.status}).")
            continue
        text = f"{fit.group}: the model fits with {fit.rms_residual:.1%} rms residual"
        if math.isfinite(fit.holdout_error):
            text += (f"; fitted without {int(fit.holdout_world_size)} GPUs it predicts that "
                     f"point within {fit.holdout_error:+.1%}")
        p = preds[preds["group"] == fit.group]
        if len(p):
            last = p.iloc[-1]
            text += (f"; predicted efficiency at {int(last['nodes'])} nodes "
                     f"({int(last['world_size'])} GPUs): {last['efficiency_predicted']:.1%}")
        out.append(text + ".")
    return out


def run_findings(runs: pd.DataFrame, table: pd.DataFrame) -> list[str]:
    """Failed runs and flagged points."""
    out = []
    if "state" in runs.columns:
        failed = int((runs["state"] == "failed").sum())
        if failed:
            out.append(f"{failed} of {len(runs)} runs failed: see Failed runs for why.")
    flags = table["flags"].fillna("") if "flags" in table.columns else pd.Series(dtype=str)
    flagged = int((flags != "").sum())
    if flagged:
        codes = pd.Series([c for f in flags for c in f.split(",") if c]).value_counts()
        detail = ", ".join(f"{c}: {n}" for c, n in codes.items())
        out.append(f"{flagged} of {len(table)} points carry quality flags ({detail}); "
                   "they are kept in the medians, see Quality flags.")
    return out


def compute_findings(table: pd.DataFrame) -> list[str]:
    """Does compute alone (no gradient sync) slow down with scale? Per image, largest
    world size vs the baseline, when the runs carry compute_time_s."""
    if "compute_time_s" not in table.columns:
        return []
    out = []
    for group, rows in table.groupby("group", sort=False):
        rows = rows.dropna(subset=["compute_time_s"])
        base = rows[rows["baseline"].astype(bool)]
        if base.empty or len(rows) < 2:
            continue
        b, top = base.iloc[0], rows.loc[rows["world_size"].idxmax()]
        ratio = (top["compute_time_s"] / top["batch_size"]) / (b["compute_time_s"]
                                                                / b["batch_size"])
        if ratio > 1.1:
            out.append(
                f"{group}: compute alone (no gradient sync) takes "
                f"{top['compute_time_s'] * 1e3:.3g} ms per step at {int(top['world_size'])} "
                f"GPUs vs {b['compute_time_s'] * 1e3:.3g} ms at {int(b['world_size'])} "
                f"({ratio:.2f}× per image): part of the loss is compute slowing down "
                "(shared cores, memory bandwidth, clocks), not communication.")
    return out


def bound_findings(bounds: pd.DataFrame | None) -> list[str]:
    """What the ring allreduce bound says about the measured efficiency."""
    out = []
    for b in (bounds if bounds is not None else pd.DataFrame()).itertuples(index=False):
        text = (f"{b.group}: at {b.world_size} GPUs a ring allreduce of "
                f"{b.grad_bytes / 1e6:,.1f} MB at the probe's {b.probe_busbw_GBps:.3g} GB/s "
                f"takes {b.ring_time_s * 1e3:.3g} ms per step, which caps efficiency at "
                f"{b.efficiency_bound:.1%} without overlap; measured {b.efficiency_measured:.1%}")
        if b.efficiency_measured > b.efficiency_bound:
            text += " (communication overlaps compute)"
        elif b.efficiency_measured < b.efficiency_bound - 0.1:
            text += " (most of the loss is not the allreduce's bandwidth)"
        out.append(text + ".")
    return out


def findings(table: pd.DataFrame, runs: pd.DataFrame, scaling: str, fits: pd.DataFrame,
             points: pd.DataFrame, preds: pd.DataFrame,
             bounds: pd.DataFrame | None = None) -> list[str]:
    """All findings, most important first."""
    if table.empty:
        return run_findings(runs, table)
    return [*efficiency_findings(table), *comm_findings(table, points),
            *compute_findings(table), *bound_findings(bounds),
            *batch_findings(table, scaling),
            *model_findings(fits, preds), *lr_findings(table, scaling),
            *run_findings(runs, table)]
