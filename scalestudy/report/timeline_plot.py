"""`history plot`: per-GPU throughput and efficiency at each scale over time, with repeat
bands, and a marked line where the provenance changed (e.g. `nccl 2.21.5 -> 2.23.4`)."""

from __future__ import annotations

import io
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

from scalestudy.core.errors import ScalestudyError
from scalestudy.execute.workspace import write_atomic
from scalestudy.report.plots import CMAP, HALF_WIDTH
from scalestudy.results.analysis import columns as col
from scalestudy.results.history.changes import ChangePoint
from scalestudy.results.history.timeline import Change

#: Groups drawn at most (one row of two panels each); the rest are named in a note.
MAX_GROUPS = 6


def draw_timeline(points: pd.DataFrame, changes: Sequence[Change], title: str,
                  out: Path, change_points: Sequence[ChangePoint] = ()) -> list[str]:
    """Write the PNG; the groups left out (beyond MAX_GROUPS). `change_points`
    (results.history.changes) are marked on their series: a down or up triangle at the first
    campaign after the change, a filled one when it is confirmed."""
    groups = list(dict.fromkeys(points[col.GROUP]))
    shown, left = groups[:MAX_GROUPS], groups[MAX_GROUPS:]
    fig = Figure(figsize=(12, 3.2 * len(shown) + 0.8), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(shown), 2, squeeze=False, sharex=True)
    for (left_ax, right_ax), group in zip(axes, shown, strict=True):
        rows = points[points[col.GROUP] == group]
        for i, (world, line) in enumerate(rows.groupby("world_size")):
            color = CMAP(i % 10)
            label = f"{world} GPU{'s' if world != 1 else ''}"
            left_ax.plot(line["when"], line["per_gpu"], "o-", color=color, label=label)
            left_ax.fill_between(line["when"], line["per_gpu_min"], line["per_gpu_max"],
                                 color=color, alpha=0.2, lw=0)
            right_ax.plot(line["when"], line[col.EFFICIENCY], "o-", color=color, label=label)
            for c in (c for c in change_points
                      if c.series == group and c.world_size == world):
                when = pd.Timestamp(c.when)
                when = when.tz_localize("UTC") if when.tzinfo is None else when
                at = line[line["when"] >= when].head(1)
                if len(at):
                    left_ax.plot(at["when"], at["per_gpu"], "v" if c.size < 0 else "^",
                                 ms=13, color=color if c.confirmed else "white",
                                 mec="black", mew=1.2, zorder=5)
        unit = str(rows[col.UNIT].iloc[0])
        left_ax.set_title(textwrap.fill(f"{group}: per-GPU throughput", HALF_WIDTH),
                          fontsize=10)
        left_ax.set_ylabel(f"{unit} per GPU (median, band: repeats)")
        right_ax.set_title(textwrap.fill(f"{group}: efficiency vs its smallest scale",
                                         HALF_WIDTH), fontsize=10)
        right_ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0))
        top = rows[col.EFFICIENCY].max()
        right_ax.set_ylim(0, max(1.1, float(top) * 1.05 if top == top else 1.1))
        mine = [c for c in changes if group.startswith(f"{c.system}: ")]
        for ax in (left_ax, right_ax):
            for change in mine:
                ax.axvline(change.when, ls="--", color="0.4", lw=1)
            ax.legend(fontsize=8, loc="lower left")
            ax.grid(alpha=0.3)
    for (left_ax, _), group in zip(axes, shown, strict=True):
        for change in changes:
            if group.startswith(f"{change.system}: "):
                left_ax.annotate(change.label(), (change.when, 1.0),
                                 xycoords=("data", "axes fraction"), rotation=90, va="top",
                                 ha="right", fontsize=7, color="0.3")
    fig.suptitle(title + (f" ({len(left)} more group(s) not drawn)" if left else ""))
    first, last = points["when"].min(), points["when"].max()
    if last - first < pd.Timedelta(hours=1):  # one moment (an import): a day around it
        axes[0][0].set_xlim(first - pd.Timedelta(hours=12), last + pd.Timedelta(hours=12))
    for ax in axes.flat:  # dates, whatever the span
        locator = AutoDateLocator(minticks=3, maxticks=8)
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    fig.autofmt_xdate()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    try:
        write_atomic(Path(out), buffer.getvalue())
    except OSError as exc:
        raise ScalestudyError(f"-o {out}: cannot write it ({exc.strerror}); give a path in a "
                              "directory you can write") from None
    return left
