"""The report's tables as text cells (headers, rows): one function per table, shared by
the Markdown and HTML report, `compare` and the terminal; and the one Markdown table
writer."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.efficiency import failures, format_value, groups, unit_of

#: A table's text: (headers, rows of cells).
Cells = tuple[list[str], list[list[str]]]
TABLE_HEADERS: tuple[str, ...] = (
    "GPUs", "nodes × ranks/node", "{batch}", "global batch",
    "throughput {unit}: median [min–max]", "per-GPU {unit}", "speedup", "efficiency", "repeats",
)


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").strip()


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table; `|`, backslashes and newlines in cells are escaped."""
    lines = ["| " + " | ".join(_md_cell(h) for h in headers) + " |",
             "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def num(value: float) -> str:
    """Images/s for people: 3 significant digits at least, thousands separated."""
    if value is None or not np.isfinite(value):
        return "n/a"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"


def pct(value: float, signed: bool = False) -> str:
    """A fraction as a percentage, "n/a" when missing."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:+.1%}" if signed else f"{value:.1%}"


def seconds(value: float) -> str:
    """Seconds with a unit that keeps three digits (s, ms, µs)."""
    if value is None or not math.isfinite(value):
        return "n/a"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(value) >= scale or unit == "µs":
            return f"{value / scale:.3g} {unit}"
    return f"{value:g} s"


def batch_header(unit: str) -> str:
    """What `batch_size` is, in a column header: sequences per data-parallel replica for
    a transformer (tokens/s), the per-GPU batch otherwise."""
    return "batch per replica (sequences)" if unit == "tokens/s" else "per-GPU batch"


def group_tables(table: pd.DataFrame) -> list[tuple[str, str, Cells]]:
    """(group label, baseline note, (headers, rows)) for each group, cells as text.
    Comm overhead and flags get a column when any point of the group has one (comm
    overhead is "—" at 1 GPU: no sync there), ranks per host / cores when a point of
    the group oversubscribed its host."""
    out = []
    for group, rows in groups(table):
        comm = "comm_overhead" in rows and rows[col.COMM_OVERHEAD].notna().any()
        hosts = "flags" in rows and rows[col.FLAGS].fillna("").str.contains(
            "oversubscribed").any()
        flags = "flags" in rows and (rows[col.FLAGS].fillna("") != "").any()
        compute = "compute_time_s" in rows and rows[col.COMPUTE_TIME_S].notna().any()
        lr = "lr" in rows and rows[col.LR].notna().any()
        noisy = col.NOISE_SCALE in rows and rows[col.NOISE_SCALE].notna().any()
        headers = [*(h.format(unit=unit_of(rows), batch=batch_header(unit_of(rows)))
                     for h in TABLE_HEADERS),
                   *(["compute time (no sync)"] if compute else []),
                   *(["comm overhead"] if comm else []),
                   *(["ranks per host / cores"] if hosts else []),
                   *(["lr (warm-up iters)"] if lr else []),
                   *(["noise scale [interval]"] if noisy else []),
                   *([col.FLAGS] if flags else [])]
        body = []
        for r in rows.itertuples(index=False):
            spread = f"{num(r.throughput_median)} [{num(r.throughput_min)}–" \
                     f"{num(r.throughput_max)}]"
            cells = [str(r.world_size), f"{r.nodes} × {r.ranks_per_node}",
                     format_value(r.batch_size), format_value(r.global_batch), spread,
                     num(r.throughput_per_gpu), f"{r.speedup:.2f}", f"{r.efficiency:.1%}",
                     str(r.n_repeats)]
            cells += [seconds(r.compute_time_s)] if compute else []
            cells += [pct(r.comm_overhead) if r.world_size > 1 else "—"] if comm else []
            cells += [f"{r.ranks_per_host} / {int(r.host_cores)}"] if hosts else []
            cells += [f"{r.lr:.4g} ({format_value(r.lr_warmup_iters)})"] if lr else []
            cells += [noise_cell(r.noise_scale, getattr(r, "noise_scale_low", None),
                                 getattr(r, "noise_scale_high", None))] if noisy else []
            cells += [str(r.flags or "").replace(",", ", ")] if flags else []
            body.append(cells)
        base = rows[rows[col.BASELINE].astype(bool)].iloc[0]
        rule = base.get(col.BASELINE_RULE, "smallest world size")
        note = (f"Baseline ({rule}): {base.world_size} GPU{'s' if base.world_size != 1 else ''} "
                f"({base.nodes} × {base.ranks_per_node}), "
                f"{num(base.throughput_median)} {unit_of(rows)} at global batch "
                f"{format_value(base.global_batch)}." + own_baseline_note(table, rows))
        out.append((group, note, (headers, body)))
    return out


def noise_cell(value: float | None, low: float | None, high: float | None) -> str:
    """A point's gradient noise scale (samples) and its interval: "18.1 [15.4–20.9]",
    "18.1 [15.4–∞)" when unbounded above, "—" where none was measured."""
    if value is None or pd.isna(value):
        return "—"
    if low is None or pd.isna(low):
        return f"{value:.3g}"
    upper = "∞)" if high is None or pd.isna(high) else f"{high:.3g}]"
    return f"{value:.3g} [{low:.3g}–{upper}"


def own_baseline_note(table: pd.DataFrame, rows: pd.DataFrame) -> str:
    """For a group whose baseline is not the study's smallest scale: that its efficiency
    is against that baseline, so not on one scale with the other groups'."""
    base = int(rows.loc[rows[col.BASELINE].astype(bool), "world_size"].iloc[0])
    smallest = int(table[col.WORLD_SIZE].min())
    if base <= smallest:
        return ""
    return (f" Its baseline is not the study's smallest scale ({smallest} "
            f"GPU{'s' if smallest != 1 else ''}): its efficiency is against its own "
            f"{base} GPUs, not on one scale with the other groups'; compare throughput at "
            "equal GPUs.")


def failure_table(runs: pd.DataFrame) -> Cells:
    """Failed runs as text cells (run id, configuration, exit code, reason)."""
    failed = failures(runs)
    rows = [["" if pd.isna(v) else format_value(v) for v in rec]
            for rec in failed.itertuples(index=False)]
    return [str(c) for c in failed.columns], rows


def flags_table(flagged: pd.DataFrame) -> Cells:
    """Flagged runs with the numbers that flagged them."""
    headers = ["run id", "nodes × ranks/node", "per-GPU batch", "repeat", "flags",
               "slowest rank below mean", "iteration-time CV", "timed iterations"]
    rows = [[str(r.run_id), f"{r.nodes} × {r.ranks_per_node}", format_value(r.batch_size),
             format_value(r.repeat), r.flags.replace(",", ", "), pct(r.rank_spread),
             pct(r.iter_cv),
             format_value(r.iters)] for r in flagged.itertuples(index=False)]
    return headers, rows


def fit_table(fits: pd.DataFrame, unit: str = "img/s") -> Cells:
    """One row per group: fitted terms and parameters, residual, hold-out error (the
    hold-out's throughput in `unit`)."""
    headers = ["group", "fit", "compute per step", "bandwidth B", "probe busbw",
               "latency α (per unit of L)", "rms residual", "hold-out: predicted / measured",
               "hold-out error", "predictions"]
    rows = []
    for f in fits.itertuples(index=False):
        shown = "withheld" if getattr(f, "withheld", "") else "shown"
        if f.status != "fitted":
            rows.append([str(f.group), str(f.status), *["n/a"] * 7, shown])
            continue
        hold = (f"{num(f.holdout_predicted)} / {num(f.holdout_measured)} {unit} at "
                f"{int(f.holdout_world_size)} GPUs" if math.isfinite(f.holdout_error)
                else "too few points to hold one out")
        bw = (f"{f.bandwidth_GBps:.3g} GB/s ({'fitted' if f.bandwidth_from == 'fit' else 'probe'})"
              if math.isfinite(f.bandwidth_GBps) else "n/a (gradient size unknown)")
        probe = (f"{f.probe_busbw_GBps:.3g} GB/s" if f.probe_busbw_GBps is not None
                 and math.isfinite(f.probe_busbw_GBps) else "n/a")
        rows.append([str(f.group), str(f.terms), seconds(f.t_compute_s), bw, probe,
                     f"{seconds(f.latency_s)} (L = {f.latency_term})", pct(f.rms_residual), hold,
                     pct(f.holdout_error, signed=True), shown])
    return headers, rows


def residual_table(points: pd.DataFrame) -> Cells:
    """Measured vs fitted step time at each measured point."""
    headers = ["group", "GPUs", "per-GPU batch", "global batch", "step time measured",
               "step time fitted", "residual", "comm share (model)"]
    rows = [[str(p.group), str(p.world_size), format_value(p.batch_size),
             format_value(p.global_batch), seconds(p.step_time_measured),
             seconds(p.step_time_fitted), pct(p.residual, signed=True), pct(p.comm_share)]
            for p in points.itertuples(index=False)]
    return headers, rows


def prediction_table(preds: pd.DataFrame, unit: str = "img/s") -> Cells:
    """Predicted throughput and efficiency at 2×, 4× ... the largest measured scale; an
    efficiency above the one measured at the largest scale says so."""
    level = f"{float(preds['level'].iloc[0]):.0%}" if len(preds) else "90%"
    headers = ["group", "scale", "nodes", "GPUs", "per-GPU batch", "global batch",
               f"predicted {unit}", f"{level} interval", "predicted efficiency",
               "comm share", "model"]
    rows = [[str(p.group), f"{p.factor}×", str(p.nodes), str(p.world_size),
             format_value(p.batch_size), format_value(p.global_batch),
             num(p.throughput_predicted), f"{num(p.low)}–{num(p.high)}",
             pct(p.efficiency_predicted)
             + (" (above the largest measured scale's)" if getattr(p, "above_measured", False)
                else ""), pct(p.comm_share), str(p.forecast_model)]
            for p in preds.itertuples(index=False)]
    return headers, rows


def reference_table(checks: pd.DataFrame) -> Cells:
    """Each reference check: where, measured, accepted range, pass/fail."""
    headers = ["result", "metric", "where", "point", "global batch", "reference",
               "accepted", "measured", "deviation", "declared at"]
    rows = []
    for c in checks.itertuples(index=False):
        eff = c.metric == "efficiency"
        value = pct(c.value) if eff else num(c.value)
        measured = pct(c.measured) if eff else num(c.measured)
        rows.append([c.result.upper(), c.metric, c.where, c.point,
                     format_value(c.global_batch), value, c.accepted, measured,
                     pct(c.deviation, signed=True), c.source])
    return headers, rows


def bound_table(bounds: pd.DataFrame) -> Cells:
    """Ring allreduce time from the probe and the efficiency it allows (no overlap)."""
    headers = ["group", "GPUs", "gradient bytes", "probe busbw", "ring allreduce time",
               "compute time", "efficiency bound (no overlap)", "measured efficiency"]
    rows = [[str(b.group), str(b.world_size), f"{b.grad_bytes / 1e6:,.1f} MB",
             f"{b.probe_busbw_GBps:.3g} GB/s", seconds(b.ring_time_s),
             f"{seconds(b.compute_time_s)} ({b.compute_source})", pct(b.efficiency_bound),
             pct(b.efficiency_measured)] for b in bounds.itertuples(index=False)]
    return headers, rows


def compare_table(frame: pd.DataFrame) -> Cells:
    """Two studies aligned point by point (results.history.compare.align), with B / A ratios:
    each throughput with its repeat band and count, a ratio within both bands marked,
    an efficiency above 100 % flagged."""
    unit = unit_of(frame)
    energy = bool(frame["energy_ratio"].notna().any()) if "energy_ratio" in frame else False
    per = "1M tokens" if unit == "tokens/s" else "1M samples"
    headers = ["group (A)", "GPUs", "nodes × ranks/node", "per-GPU batch", "global batch",
               f"A {unit} [band] (n)", f"B {unit} [band] (n)", "B / A", "A efficiency",
               "B efficiency", "B / A eff.", f"node-h per {per} B / A",
               *([f"energy per {per} B / A"] if energy else [])]
    banded = "within_band" in frame

    def thr(r: Any, side: str) -> str:
        mid = getattr(r, f"throughput_{side}")
        if not banded:
            return f"{mid:,.1f}"
        return (f"{mid:,.1f} [{getattr(r, f'throughput_min_{side}'):,.1f}–"
                f"{getattr(r, f'throughput_max_{side}'):,.1f}] "
                f"({int(getattr(r, f'n_repeats_{side}'))})")

    def eff(value: float) -> str:
        return f"{value:.1%}" + (" (above 100 %: check)" if value > 1.005 else "")

    rows = [[str(r.group_a), str(r.world_size), f"{r.nodes} × {r.ranks_per_node}",
             str(r.batch_size), str(r.global_batch), thr(r, "a"), thr(r, "b"),
             f"{r.throughput_ratio:.3f}" + (" (within noise)" if banded and r.within_band
                                            else ""),
             eff(r.efficiency_a), eff(r.efficiency_b),
             f"{r.efficiency_ratio:.3f}" if np.isfinite(r.efficiency_ratio) else "n/a",
             f"{r.node_hours_ratio:.3f}" if np.isfinite(r.node_hours_ratio) else "n/a",
             *([f"{r.energy_ratio:.3f}" if np.isfinite(r.energy_ratio) else "n/a"]
               if energy else [])]
            for r in frame.itertuples(index=False)]
    return headers, rows


