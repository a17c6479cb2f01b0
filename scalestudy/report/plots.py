"""Plots of a scaling study: each function takes a frame (from results.analysis.efficiency,
results.analysis.commmodel or results.history.compare) and a matplotlib axis, and draws on it only.

Figures are plain `matplotlib.figure.Figure` objects on the Agg canvas; pyplot (and
its global figure manager) is never used.
"""

from __future__ import annotations

import io
import re
import textwrap
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import (
    FuncFormatter,
    LogFormatter,
    LogLocator,
    NullFormatter,
    NullLocator,
    PercentFormatter,
)

from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis import fork_pool
from scalestudy.results.analysis.efficiency import format_value, groups, unit_of

Draw = Callable[[pd.DataFrame, Axes, str], None]
#: Characters of a title that fit over one of two panels side by side (wrapped beyond).
HALF_WIDTH = 55
CMAP = colormaps["tab10"]


class _PlainLogFormatter(LogFormatter):
    """Log-axis labels as plain numbers (1,000 rather than 10^3); LogFormatter picks
    which ticks get a label."""

    def _num_to_string(self, x: float, vmin: float, vmax: float) -> str:
        return f"{x:,.0f}" if x >= 1 else f"{x:g}"


def gpu_axis(ax: Axes, sizes_in: pd.Series) -> None:
    """Log2 x axis with a tick at each world size, labelled as plain integers."""
    ax.set_xscale("log", base=2)
    sizes = sorted({int(p) for p in sizes_in}) if len(sizes_in) else [1, 2, 4, 8]
    if len(sizes) > 12:
        sizes = [s for i, s in enumerate(sizes) if i % (len(sizes) // 12 + 1) == 0]
    ax.set_xticks(sizes)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:,.0f}"))
    ax.set_xlim(min(sizes_in, default=1) / 1.4, max(sizes_in, default=8) * 1.4)
    ax.set_xlabel("GPUs (world size = nodes × ranks/node)")
    ax.grid(True, which="major", alpha=0.3)


def log_y(ax: Axes) -> None:
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(_PlainLogFormatter(labelOnlyBase=False))
    ax.yaxis.set_minor_formatter(_PlainLogFormatter(labelOnlyBase=False))


def log_plain(axis: Axis) -> None:
    """A log axis (set already) ticked at 1, 2 and 5 of each decade, labelled as plain
    numbers (0.7, 2, 50: never 7×10⁻¹), no minor labels to overlap."""
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:,.0f}" if x >= 10
                                           else f"{x:.3g}"))
    axis.set_minor_formatter(NullFormatter())


def _no_data(ax: Axes, text: str = "No completed runs yet") -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=12,
            color="0.4")


#: Legend entries shown at most; the rest are summed up in one entry.
MAX_LEGEND = 12


def _legend(ax: Axes, *extra: Line2D) -> None:
    """A legend of at most MAX_LEGEND entries (plus `extra`), placed where it hides least
    when that is cheap to find."""
    handles, labels = ax.get_legend_handles_labels()
    if len(handles) > MAX_LEGEND:
        more = len(handles) - MAX_LEGEND + 1
        handles = [*handles[:MAX_LEGEND - 1], Line2D([], [], ls="none")]
        labels = [*labels[:MAX_LEGEND - 1], f"… {more} more (see the tables)"]
    ax.legend([*handles, *extra], [*labels, *(e.get_label() for e in extra)], fontsize=8,
              loc="best" if len(handles) <= 4 else "upper left")


def _nonnegative(err: list[np.ndarray]) -> list[np.ndarray]:
    """Error-bar lengths, with rounding noise below zero clipped (matplotlib rejects it)."""
    return [np.clip(e, 0.0, None) for e in err]


def plot_throughput(table: pd.DataFrame, ax: Axes, title: str | None = None) -> None:
    """Log-log throughput vs GPUs per group, min–max band over repeats, dashed ideal."""
    ax.set_title(title or "Throughput vs GPUs")
    ax.set_ylabel(f"Throughput ({unit_of(table)}, all GPUs)")
    gpu_axis(ax, table[col.WORLD_SIZE] if not table.empty else pd.Series(dtype=int))
    if table.empty:
        _no_data(ax)
        ax.set_yticks([])
        return
    log_y(ax)
    for i, (group, rows) in enumerate(groups(table)):
        color = CMAP(i % 10)
        med = rows[col.THROUGHPUT_MEDIAN].to_numpy(float)
        err = _nonnegative([med - rows[col.THROUGHPUT_MIN].to_numpy(float),
                            rows[col.THROUGHPUT_MAX].to_numpy(float) - med])
        ax.errorbar(rows[col.WORLD_SIZE], med, yerr=err, fmt="o-", color=color, capsize=3,
                    label=group)
        if len(rows) > 1:
            ax.fill_between(rows[col.WORLD_SIZE], rows[col.THROUGHPUT_MIN],
                            rows[col.THROUGHPUT_MAX], color=color, alpha=0.15, lw=0)
        ax.plot(rows[col.WORLD_SIZE], rows["ideal_throughput"], "--", color=color, alpha=0.6)
    _legend(ax, Line2D([], [], ls="--", color="0.4", label="ideal (linear from baseline)"))


def plot_efficiency(table: pd.DataFrame, ax: Axes, title: str | None = None) -> None:
    """Efficiency vs GPUs (x log2, y from 0) per group with a 100 % reference line."""
    ax.set_title(title or "Parallel efficiency vs GPUs")
    ax.set_ylabel(f"Parallel efficiency (per-GPU {unit_of(table)} vs baseline)")
    gpu_axis(ax, table[col.WORLD_SIZE] if not table.empty else pd.Series(dtype=int))
    ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0))
    top = 1.1
    if table.empty:
        _no_data(ax)
    else:
        annotate = len(table) <= 24
        for i, (group, rows) in enumerate(groups(table)):
            color = CMAP(i % 10)
            eff = rows[col.EFFICIENCY].to_numpy(float)
            scale = eff / rows[col.THROUGHPUT_MEDIAN].to_numpy(float)
            err = _nonnegative([eff - rows[col.THROUGHPUT_MIN].to_numpy(float) * scale,
                                rows[col.THROUGHPUT_MAX].to_numpy(float) * scale - eff])
            ax.errorbar(rows[col.WORLD_SIZE], eff, yerr=err, fmt="o-", color=color, capsize=3,
                        label=group)
            if annotate:
                base = rows[col.BASELINE].to_numpy(bool)
                for x, y in zip(rows[col.WORLD_SIZE][~base], eff[~base], strict=True):
                    ax.annotate(f"{y:.0%}", (x, y), textcoords="offset points", xytext=(7, 0),
                                ha="left", va="center", fontsize=7, color=color,
                                bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none",
                                      "alpha": 0.8})
            top = max(top, float(np.nanmax(err[1] + eff)) * 1.08)
    ax.axhline(1.0, ls="--", color="0.4", lw=1)
    ax.set_ylim(0, top)
    _legend(ax, Line2D([], [], ls="--", color="0.4", label="ideal (100 %)"))


def _without_batch(label: str) -> str:
    return re.sub(r"\s*(global )?batch \S+$", "", label)


def plot_per_gpu_vs_batch(table: pd.DataFrame, ax: Axes, title: str | None = None) -> None:
    """Per-GPU throughput vs per-GPU batch: one line per world size (and configuration)."""
    ax.set_title(title or "Per-GPU throughput vs per-GPU batch")
    ax.set_xlabel("Per-GPU batch (images)")
    ax.set_ylabel(f"Throughput per GPU ({unit_of(table)})")
    ax.grid(True, alpha=0.3)
    if table.empty:
        _no_data(ax)
        return
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:g}"))
    keys = table[col.GROUP].map(_without_batch)
    lines = table.assign(_key=keys).groupby(["_key", "world_size"], sort=False)
    for i, ((key, size), rows) in enumerate(lines):
        rows = rows.sort_values("batch_size")
        label = f"{key + ', ' if key else ''}{size} GPU{'s' if size != 1 else ''}"
        ax.plot(rows[col.BATCH_SIZE], rows[col.THROUGHPUT_PER_GPU], "o-", color=CMAP(i % 10),
                label=label)
    ax.set_ylim(bottom=0)
    _legend(ax)


def plot_variants(table: pd.DataFrame, ax: Axes, title: str | None = None) -> None:
    """Bars of throughput per group at each scale (backend, tuning, precision ...), with
    the repeat min–max as error bars."""
    ax.set_title(title or "Throughput per configuration at each scale")
    ax.set_ylabel(f"Throughput ({unit_of(table)}, all GPUs)")
    ax.set_xlabel("GPUs (world size)")
    if table.empty:
        _no_data(ax)
        return
    parts = groups(table)[:MAX_LEGEND]
    if len(parts) < table[col.GROUP].nunique():
        ax.set_title(f"{ax.get_title()} (first {len(parts)} of {table['group'].nunique()})")
    sizes = sorted({s for _, rows in parts for s in rows[col.WORLD_SIZE]})
    width = 0.8 / len(parts)
    for i, (group, rows) in enumerate(parts):
        at = {int(s): r for s, r in zip(rows[col.WORLD_SIZE], rows.itertuples(), strict=True)}
        xs = [j + (i - (len(parts) - 1) / 2) * width for j, s in enumerate(sizes) if s in at]
        got = [at[int(s)] for s in sizes if s in at]
        med = np.array([r.throughput_median for r in got])
        err = _nonnegative([med - [r.throughput_min for r in got],
                            np.array([r.throughput_max for r in got]) - med])
        ax.bar(xs, med, width, yerr=err, capsize=2, color=CMAP(i % 10), label=group)
    ax.set_xticks(range(len(sizes)), [str(int(s)) for s in sizes])
    ax.grid(True, axis="y", alpha=0.3)
    _legend(ax)


def heatmap_batch(table: pd.DataFrame) -> str:
    """The batch that defines a curve: the per-GPU batch in weak scaling, the global
    batch in strong scaling (where the per-GPU batch changes along each curve)."""
    varies = table.groupby("group", sort=False)[col.BATCH_SIZE].nunique().max() > 1
    return "global_batch" if varies else "batch_size"


def heatmap_data(table: pd.DataFrame) -> pd.DataFrame:
    """Efficiency by batch (rows, see heatmap_batch) and nodes (columns): full nodes only
    (the most ranks per node measured at that node count), median over configurations."""
    if table.empty:
        return pd.DataFrame()
    batch = heatmap_batch(table)
    most = table.groupby([batch, "nodes"])[col.RANKS_PER_NODE].transform("max")
    full = table[table[col.RANKS_PER_NODE] == most]
    return full.pivot_table(index=batch, columns="nodes", values="efficiency",
                            aggfunc="median").sort_index()


def plot_heatmap(table: pd.DataFrame, ax: Axes, title: str | None = None) -> None:
    """Nodes × batch heatmap of efficiency (per-GPU batch in weak scaling, global batch
    in strong scaling), each cell labelled."""
    ax.set_title(title or "Parallel efficiency by nodes and batch")
    data = heatmap_data(table)
    if data.empty:
        _no_data(ax)
        return
    values = data.to_numpy(float)
    image = ax.imshow(values, cmap="RdYlGn", vmin=0.5, vmax=1.0, aspect="auto",
                      origin="lower")
    ax.set_xticks(range(data.shape[1]), [format_value(c) for c in data.columns])
    ax.set_yticks(range(data.shape[0]), [format_value(i) for i in data.index])
    ax.set_xlabel("Nodes")
    ax.set_ylabel("Per-GPU batch (images)" if heatmap_batch(table) == "batch_size"
                  else "Global batch (images)")
    for (r, c), v in np.ndenumerate(values):
        if np.isfinite(v):
            ax.text(c, r, f"{v:.0%}", ha="center", va="center", fontsize=8)
    ax.figure.colorbar(image, ax=ax, label="efficiency (median over configurations)",
                       format=PercentFormatter(xmax=1.0))


def plot_comm_overhead(table: pd.DataFrame, ax: Axes, title: str | None = None) -> None:
    """Measured share of step time spent in gradient sync vs GPUs, per group."""
    ax.set_title(title or "Communication overhead vs GPUs")
    ax.set_ylabel("Comm overhead (1 − compute time / step time)")
    rows_all = table.dropna(subset=[col.COMM_OVERHEAD]) if "comm_overhead" in table else table[:0]
    gpu_axis(ax, rows_all[col.WORLD_SIZE])
    ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0))
    if rows_all.empty:
        _no_data(ax, "The runs carry no comm_overhead")
        return
    for i, (group, rows) in enumerate(groups(rows_all)):
        ax.plot(rows[col.WORLD_SIZE], rows[col.COMM_OVERHEAD], "o-", color=CMAP(i % 10),
                label=group)
    low = float(rows_all[col.COMM_OVERHEAD].min())  # below 0: timing noise, shown as is
    ax.set_ylim(min(0.0, low * 1.15), max(0.1, float(rows_all[col.COMM_OVERHEAD].max()) * 1.15))
    ax.axhline(0.0, color="0.4", lw=0.8)
    _legend(ax)


def plot_model(frames: pd.DataFrame, ax: Axes, title: str | None = None) -> None:
    """Measured and fitted step time vs GPUs, and the predicted step time beyond
    (`frames`: commmodel points and predictions stacked, `kind` = measured/predicted)."""
    ax.set_title(title or "Step time: measured, model fit and prediction")
    ax.set_ylabel("Step time (s)")
    gpu_axis(ax, frames[col.WORLD_SIZE] if not frames.empty else pd.Series(dtype=int))
    if frames.empty:
        _no_data(ax, "No group has enough points for a fit")
        return
    log_y(ax)
    for i, (group, rows) in enumerate(frames.groupby("group", sort=False)):
        color = CMAP(i % 10)
        meas = rows[rows["kind"] == "measured"]
        pred = rows[rows["kind"] == "predicted"]
        ax.plot(meas[col.WORLD_SIZE], meas["step_time_measured"], "o", color=color,
                label=f"{group} (measured)")
        fitted = pd.concat([meas[["world_size", "step_time_fitted"]],
                            pred[["world_size", "step_time_fitted"]]])
        ax.plot(fitted[col.WORLD_SIZE], fitted["step_time_fitted"], "-", color=color, alpha=0.7)
        ax.plot(pred[col.WORLD_SIZE], pred["step_time_fitted"], "x", color=color)
    predicted = bool((frames["kind"] == "predicted").any())
    _legend(ax, Line2D([], [], ls="-", marker="x" if predicted else "", color="0.4",
                       label="model fit, then predicted (x)" if predicted else
                       "model fit (no predictions: see the report's rule)"))


def plot_compare(frame: pd.DataFrame, axes: tuple[Axes, Axes], names: tuple[str, str]) -> None:
    """Left: throughput of A (solid) and B (dashed) vs GPUs; right: B / A ratio."""
    left, right = axes
    left.set_title(textwrap.fill(f"Throughput: {names[0]} (solid) vs {names[1]} (dashed)",
                                 HALF_WIDTH))
    left.set_ylabel(f"Throughput ({unit_of(frame)}, all GPUs)")
    right.set_title(textwrap.fill(f"Throughput ratio {names[1]} / {names[0]}", HALF_WIDTH))
    right.set_ylabel("ratio (B / A)")
    for ax in axes:
        gpu_axis(ax, frame[col.WORLD_SIZE])
    log_y(left)
    for i, (group, rows) in enumerate(frame.groupby("group_a", sort=False)):
        color = CMAP(i % 10)
        left.plot(rows[col.WORLD_SIZE], rows["throughput_a"], "o-", color=color, label=group)
        left.plot(rows[col.WORLD_SIZE], rows["throughput_b"], "s--", color=color)
        right.plot(rows[col.WORLD_SIZE], rows["throughput_ratio"], "o-", color=color,
                   label=group)
    right.axhline(1.0, ls="--", color="0.4", lw=1)
    for ax in axes:
        ax.legend(fontsize=8, loc="best")


#: The most points the cost plot labels one by one; past it, only the front's points.
LABEL_EVERY_POINT = 60


def plot_cost(costs: pd.DataFrame, ax: Axes, title: str | None = None) -> None:
    """Time to solution vs node-hours: the front across every alternative joined in
    black, each group's own front thin in its colour, points on the front filled,
    dominated points grey, predictions hollow; each point labelled with its nodes (or
    its GPUs, where node counts do not tell a group's points apart); past
    LABEL_EVERY_POINT points, only the points on the front, and the legend says so."""
    per = _cost_basis(costs)
    ax.set_title(title or f"Time to solution vs node-hours ({per})", fontsize=11, wrap=True)
    ax.set_xlabel(f"Time to solution, hours ({per})")
    ax.set_ylabel(f"Node-hours ({per})")
    ax.grid(True, which="major", alpha=0.3)
    if costs.empty:
        _no_data(ax, "No point could be priced")
        return
    ax.set_xscale("log")
    ax.set_yscale("log")
    log_plain(ax.xaxis)
    log_plain(ax.yaxis)
    ax.margins(x=0.15, y=0.1)  # room for the points' labels inside the axes
    by_gpus = any(rows[col.NODES].duplicated().any() for _, rows in costs.groupby("group"))
    every_label = len(costs) <= LABEL_EVERY_POINT  # beyond, labels would be an ink blot
    for _, rows in costs.groupby("work", sort=False):
        front = rows[rows[col.PARETO]].sort_values("time_s")
        ax.plot(front["time_s"] / 3600, front[col.NODE_HOURS], "-", color="black", lw=2,
                alpha=0.8, zorder=1, label="front (every alternative)")
    for i, (group, rows) in enumerate(costs.groupby("group", sort=False)):
        color = CMAP(i % 10)
        own = rows[rows["pareto_group"]].sort_values("time_s")
        ax.plot(own["time_s"] / 3600, own[col.NODE_HOURS], "--", color=color, lw=1, alpha=0.6,
                label=f"{group} (its own front)")
        x, y = rows["time_s"] / 3600, rows[col.NODE_HOURS]
        predicted, on_front = rows["predicted"].astype(bool), rows[col.PARETO].astype(bool)
        # a dominated point: grey, ringed in its group's colour; one line per kind
        for face, kind in (("none", predicted), (color, ~predicted & on_front),
                           ("0.75", ~predicted & ~on_front)):
            if kind.any():
                ax.plot(x[kind], y[kind], "o", ls="none", mfc=face, mec=color, ms=7,
                        mew=1.5, zorder=2)
        counts = rows[col.WORLD_SIZE] if by_gpus else rows[col.NODES]
        what = "GPU" if by_gpus else "node"
        shown = slice(None) if every_label else on_front.to_numpy()
        for xi, yi, count in zip(x[shown], y[shown], counts.astype(int)[shown],
                                     strict=True):
            label = ax.annotate(f"{count} {what}{'s' if count != 1 else ''}", (xi, yi),
                                textcoords="offset points", xytext=(6, 4), fontsize=7,
                                color=color)
            label.set_in_layout(False)  # inside the axes: the layout need not measure it
    _legend(ax, Line2D([], [], ls="none", marker="o", color="0.75", label="dominated"),
            Line2D([], [], ls="none", marker="o", mfc="none", mec="0.3",
                   label="predicted (model)"),
            *([] if every_label else [Line2D([], [], ls="none", label=(
                f"{len(costs)} points: only those on the front are labelled"))]))


def _cost_basis(costs: pd.DataFrame) -> str:
    """What one cost is of: a million samples (tokens), or the study's target."""
    if costs.empty or "units" not in costs:
        return "per million samples"
    unit = str(costs[col.UNIT].iloc[0]) if "unit" in costs else "samples"
    return f"per million {unit}" if (costs["units"].round() == 1e6).all() else "to the target"


def render_png(draw: Draw, frame: pd.DataFrame, title: str, size: tuple[float, float] = (8, 5)
               ) -> bytes:
    """Draw on a fresh Agg figure and return the PNG bytes (no pyplot state)."""
    fig = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(fig)
    draw(frame, fig.add_subplot(), title)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return buf.getvalue()


#: One picture to draw: (file name, draw, frame, title).
Picture = tuple[str, Draw, pd.DataFrame, str]


class Drawing:
    """Pictures being drawn: in forked processes side by side where this host has the
    CPUs (each plot of a 10,000-run study takes most of a second), else one by one when
    asked for; `images()` gives the same PNG bytes either way."""

    def __init__(self, pictures: Sequence[Picture]) -> None:
        self.pictures = list(pictures)
        self.pool = fork_pool.pool(len(self.pictures))
        self.pending = [] if self.pool is None else [
            (name, self.pool.submit(render_png, draw, frame, title))
            for name, draw, frame, title in self.pictures]

    def images(self) -> dict[str, bytes]:
        """Each picture's PNG bytes, by file name (waits for the processes)."""
        if self.pool is None:
            return {name: render_png(draw, frame, title)
                    for name, draw, frame, title in self.pictures}
        return {name: future.result() for name, future in self.pending}

    def __enter__(self) -> Drawing:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
