"""The report in short: the three-line headline for people, and the plain-JSON pieces of
the summary for machines (results.analysis.study serialises it: `scalestudy report --json`,
report/summary.json; NaN as null, every throughput with its per-GPU and global batch)."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.commmodel import Cause, Loss, losses
from scalestudy.results.analysis.efficiency import format_value, unit_of
from scalestudy.results.analysis.findings import compute_clause, headline_loss, sync_clause
from scalestudy.results.analysis.phrases import gpus_text, point_text
from scalestudy.results.analysis.variants import Outcome, variant_outcomes

POINT_KEYS: tuple[str, ...] = (
    "nodes", "ranks_per_node", "world_size", "batch_size", "global_batch", "n_repeats",
    "throughput_median", "throughput_min", "throughput_max", "throughput_per_gpu",
    "speedup", "efficiency", "baseline", "comm_overhead", "ranks_per_host", "host_cores",
    "flags",
)
#: Gradient-sync knobs to suggest per backend, when communication is the main cause.
SYNC_KNOBS: dict[str, str] = {
    "ddp": "fp16 gradient compression (`comm_hook: fp16`) or larger buckets "
           "(`bucket_cap_mb`)",
    "horovod": "fp16 gradient compression (`compression: fp16`)",
}


def cause_line(loss: Loss | None) -> str:
    """The headline's second line: the main cause of the loss, with its share."""
    if loss is None:
        return "Main cause: nothing to compare: every group has a single scale."
    top, kind = loss.top, loss.cause()
    where = (f"in {loss.group} " if loss.group else "") + \
        f"at {gpus_text(top['world_size'])}, "
    if kind is Cause.COMPUTE:
        text = f"compute slowing down, not communication: {where}{compute_clause(loss)}"
        return f"Main cause: {text}" + (f"; {sync_clause(loss)}." if loss.overhead ==
                                        loss.overhead else ".")
    if kind is Cause.COMM:
        slow = (f"; {compute_clause(loss)}" if loss.slowdown == loss.slowdown else "")
        return f"Main cause: gradient sync: {where}{sync_clause(loss)}{slow}."
    if kind is Cause.MODEL:
        return (f"Main cause: communication, as the model attributes it: {where}"
                f"{loss.model_share:.1%} of the step (the runs carry no compute-only timing "
                "to measure it).")
    if kind is Cause.OTHER:
        parts = [c for c, v in ((compute_clause(loss), loss.slowdown),
                                (sync_clause(loss), loss.overhead)) if v == v]
        return (f"Main cause: not compute and not measured sync: {where}"
                f"{' and '.join(parts)}, less than the {top['efficiency']:.1%} efficiency "
                "implies: stragglers, waiting or noise (see Quality flags).")
    if kind is Cause.NONE:
        sync = f"; {sync_clause(loss)}" if loss.overhead == loss.overhead else ""
        return (f"Main cause: no large loss: {where}efficiency stays at "
                f"{top['efficiency']:.1%}{sync}.")
    return (f"Main cause: not measured: {where}the runs carry no compute-only timing and "
            "the model has no fit within its rule (see Communication model).")


def _baseline_size(table: pd.DataFrame, group: str) -> int:
    return int(table.loc[table[col.BASELINE].astype(bool) & (table[col.GROUP] == group),
                         "world_size"].iloc[0])


def scale_line(table: pd.DataFrame) -> str:
    """The headline's first line: efficiency at the largest scale, GPUs, global batch;
    throughput at equal GPUs where the groups there have different baselines (their
    efficiencies are not on one scale)."""
    tops = table.loc[table.groupby("group", sort=False)[col.WORLD_SIZE].idxmax()]
    at = tops[tops[col.WORLD_SIZE] == tops[col.WORLD_SIZE].max()].sort_values("efficiency")
    lo, hi = at.iloc[0], at.iloc[-1]
    bases = {str(g): _baseline_size(table, str(g)) for g in at[col.GROUP]}
    if len(set(bases.values())) > 1:
        return _throughput_line(table, at, bases)
    against = f"against {gpus_text(bases[str(lo['group'])])}"
    if f"{lo['efficiency']:.1%}" == f"{hi['efficiency']:.1%}" and len(at) > 1:
        return (f"Scaling: {lo['efficiency']:.1%} efficiency at {gpus_text(lo['world_size'])} "
                f"({int(lo['nodes'])} × {int(lo['ranks_per_node'])}) in each of the {len(at)} "
                f"groups there, {against}.")
    if len(at) == 1:
        name = f" ({lo['group']})" if table[col.GROUP].nunique() > 1 else ""
        return f"Scaling: {lo['efficiency']:.1%} efficiency at {point_text(lo)}{name}, {against}."
    return (f"Scaling: {lo['efficiency']:.1%} to {hi['efficiency']:.1%} efficiency at "
            f"{gpus_text(lo['world_size'])} ({int(lo['nodes'])} × {int(lo['ranks_per_node'])}), "
            f"{against}: {lo['group']} (global batch {format_value(lo['global_batch'])}) to "
            f"{hi['group']} (global batch {format_value(hi['global_batch'])}).")


def _throughput_line(table: pd.DataFrame, at: pd.DataFrame, bases: dict[str, int]) -> str:
    """Groups at one scale measured from different baselines: compared by throughput."""
    unit = unit_of(table)
    fast = at.loc[at[col.THROUGHPUT_MEDIAN].idxmax()]
    slow = at.loc[at[col.THROUGHPUT_MEDIAN].idxmin()]

    def said(row: pd.Series) -> str:
        base = bases[str(row[col.GROUP])]
        eff = (f"{row['efficiency']:.1%} efficiency against {gpus_text(base)}"
               if base < int(row[col.WORLD_SIZE]) else "its own baseline: no efficiency")
        return (f"{row['group']} ({_thr(row['throughput_median'])} {unit}, global batch "
                f"{format_value(row['global_batch'])}; {eff})")

    return (f"Scaling: at {gpus_text(fast['world_size'])} the {len(at)} groups start from "
            f"different baselines, so they are compared by throughput, not efficiency: "
            f"fastest {said(fast)}, slowest {said(slow)}.")


def _thr(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def next_line(table: pd.DataFrame, scaling: str, loss: Loss | None,
              preds: pd.DataFrame, outcomes: list[Outcome] | None = None) -> str:
    """The headline's third line: the one thing to try next."""
    flags = table[col.FLAGS].fillna("") if col.FLAGS in table.columns else pd.Series(dtype=str)
    over = table[flags.str.contains("oversubscribed")]
    if len(over):
        cores, worst = int(over["host_cores"].iloc[0]), over.loc[over["ranks_per_host"].idxmax()]
        return (f"Try next: at most {cores} ranks per host (it has {cores} cores): with "
                f"{int(worst['ranks_per_host'])} ranks on it, the {int(worst['world_size'])}-GPU"
                " points measure core sharing, not scaling; add hosts or GPUs to go further.")
    outcomes = variant_outcomes(table, scaling) if outcomes is None else outcomes
    wins = [v for v in outcomes if v.gain == v.gain and v.gain > 0]
    if wins:
        dim, best, ref, gain, where = max(wins, key=lambda v: v.gain)
        return f"Try next: {dim} `{best}`: it beats `{ref}` by {gain:+.1%} at {where}."
    kind = loss.cause() if loss is not None else Cause.UNKNOWN
    if kind in (Cause.COMM, Cause.MODEL):
        bigger = "per-GPU" if scaling == "weak" else "global"
        knobs = SYNC_KNOBS.get(str(loss.top.get(col.BACKEND)) if loss is not None else "",
                               "gradient compression")
        return (f"Try next: a larger {bigger} batch (fewer syncs per image) or {knobs}, as "
                "a grid axis or a tuning variant.")
    if kind is Cause.COMPUTE:
        return ("Try next: find what slows compute as ranks are added (memory bandwidth, "
                "clocks, other work on the hosts): efficiency here measures that, not "
                "communication.")
    if kind is Cause.OTHER:
        return ("Try next: repeat the flagged points (see Quality flags): the loss is neither"
                " compute nor the measured sync.")
    ahead = preds[preds[col.GROUP] == loss.group] if loss is not None else preds[:0]
    if kind is Cause.NONE and len(ahead):
        first = ahead.iloc[0]
        return (f"Try next: measure {int(first['nodes'])} nodes ({gpus_text(first['world_size'])}"
                f"), where the model predicts {first['efficiency_predicted']:.1%} efficiency.")
    if kind is Cause.NONE:
        return ("Try next: measure more nodes: efficiency holds so far, and predictions need "
                "a fit within the rule (see Communication model).")
    return ("Try next: run the bundled workload (it times compute without sync) or more world"
            " sizes, so that the cause can be measured.")


def headline(table: pd.DataFrame, scaling: str, fits: pd.DataFrame, points: pd.DataFrame,
             preds: pd.DataFrame, found: list[Loss] | None = None,
             outcomes: list[Outcome] | None = None) -> list[str]:
    """Three lines: how well it scaled, the main cause with its share, what to try next
    (none without completed runs; `found`, `outcomes`: the losses and variant outcomes,
    when already computed)."""
    if table.empty:
        return []
    loss = headline_loss(losses(table, points, fits) if found is None else found)
    return [scale_line(table), cause_line(loss),
            next_line(table, scaling, loss, preds, outcomes)]


def _plain(value: object) -> Any:
    """numpy / pandas scalars -> JSON values; NaN -> None."""
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if not math.isfinite(float(value)) else float(value)
    if value is pd.NA or value is None:
        return None
    return value


def records(frame: pd.DataFrame, keys: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """Rows of a frame as plain dicts (only `keys` when given and present)."""
    cols = [c for c in (keys or tuple(frame.columns)) if c in frame.columns]
    return [{c: _plain(v) for c, v in zip(cols, row, strict=True)}
            for row in frame[cols].itertuples(index=False)]


def dump(summary: dict[str, Any]) -> str:
    """The summary as indented JSON (strict: no NaN)."""
    return json.dumps(summary, indent=1, allow_nan=False) + "\n"
