"""The report's section "Where the hours go": per point a stacked bar of the measured
wall clock's parts (start-up, compute, communication, input wait, checkpoints,
evaluation, not timed) with the expected failures beside it, and a table of the same
numbers (results.analysis.hours computes them; docs/goodput.md says how)."""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.axes import Axes

from scalestudy.report.page import Block, Heading, Image, Items, Note, Para, Table
from scalestudy.results.analysis.hours import LABELS, PARTS, TOLERANCE, sentence, startup_words

#: The picture's file next to the page.
FILE = "hours.png"
TITLE = "Where the hours go"
#: One colour per part, the expected failures hatched.
COLOURS: dict[str, str] = {
    "startup_s": "#7f7f7f", "compute_s": "#1f77b4", "communication_s": "#ff7f0e",
    "input_wait_s": "#2ca02c", "checkpoints_s": "#9467bd", "evaluation_s": "#8c564b",
    "not_timed_s": "#d9d9d9", "expected_failures_s": "#d62728"}
METHOD = (
    "Each bar is the mean over a point's completed runs of its measured wall clock (the "
    "run's start to its end), split by what the runs timed: start-up (launch line to the "
    "first step), the training steps split by the measured communication overhead and "
    "input wait (compute the rest), checkpoints (saves × blocked save time, plus a load), "
    "evaluation; \"not timed\" is what is left. The parts add up when \"not timed\" is "
    f"within {TOLERANCE:.0%} of the wall clock. Expected failures (hatched, on top) are "
    "the model's, not measured: the time failures would add to a run like this at the "
    "system's failure rate (docs/goodput.md).")


def _label(row: pd.Series) -> str:
    """A bar's label: the point's group and its scale."""
    where = f"{int(row['nodes'])}n×{int(row['ranks_per_node'])}"
    return f"{row['group']}\n{where}" if row["group"] else where


#: At most this many bars: past it, a bar per group (its largest scale, where the hours
#: go), still at most this many; the table and hours.csv keep every point.
MAX_BARS = 48


def _plotted(hours: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The points to draw, and what the title says of those left out ("" for none)."""
    if len(hours) <= MAX_BARS:
        return hours, ""
    largest = hours.loc[hours.groupby("group", sort=False)["nodes"].idxmax()]
    kept = largest.head(MAX_BARS)
    return kept, (f"{len(kept)} of {len(hours)} points: each group's largest; every "
                  "point in the table")


def plot_hours(hours: pd.DataFrame, ax: Axes, title: str | None = None) -> None:
    """A stacked bar per point of the wall clock's parts (seconds), expected failures
    hatched on top."""
    ax.set_title(title or TITLE, fontsize=11, wrap=True)
    ax.set_ylabel("seconds (mean over the point's runs)")
    ax.grid(True, axis="y", alpha=0.3)
    if hours.empty:
        ax.text(0.5, 0.5, "No run measured its wall clock", ha="center", va="center",
                transform=ax.transAxes)
        return
    hours, said = _plotted(hours)
    if said:
        ax.set_title(f"{title or TITLE} ({said})", fontsize=11, wrap=True)
    x = list(range(len(hours)))
    bottom = [0.0] * len(hours)
    for part in (*PARTS, "expected_failures_s"):
        values = [max(0.0, float(v)) if math.isfinite(float(v)) else 0.0
                  for v in hours[part]]
        if not any(values):
            continue
        ax.bar(x, values, bottom=bottom, color=COLOURS[part], label=LABELS[part],
               edgecolor="white" if part != "expected_failures_s" else "black",
               hatch="//" if part == "expected_failures_s" else None, lw=0.5)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.plot(x, hours["wall_s"], "k_", ms=18, mew=2, ls="none", label="measured wall clock")
    ax.set_xticks(x, [_label(r) for _, r in hours.iterrows()], fontsize=8)
    ax.legend(fontsize=8, loc="upper left", ncol=2)


def _cell(value: object, wall: float) -> str:
    """Seconds with their share of the wall clock, or "n/a" where not measured."""
    v = float(value)  # type: ignore[arg-type]
    if not math.isfinite(v):
        return "n/a"
    return f"{v:,.4g} s ({v / wall:.0%})" if wall > 0 else f"{v:,.4g} s"


def hours_blocks(hours: pd.DataFrame, failure_rate: str) -> list[Block]:
    """The section (nothing when no run measured its wall clock)."""
    if hours.empty:
        return []
    heads = ["point", "runs", "wall clock", *(LABELS[p] for p in PARTS),
             "expected failures", "adds up"]
    records = [pd.Series(r) for r in hours.to_dict("records")]
    rows = [[_label(r).replace("\n", " "), str(int(r["runs"])), f"{r['wall_s']:,.4g} s",
             *(_cell(r[p], float(r["wall_s"])) for p in PARTS),
             _cell(r["expected_failures_s"], float(r["wall_s"])),
             "yes" if r["adds_up"] else "no" + (f" ({r['unknown']} not measured)"
                                                 if r["unknown"] else "")]
            for r in records]
    rate = (f"Failure rate: {failure_rate}." if failure_rate else
            "Expected failures: not known: no failure rate (the results store holds none of "
            "this system's node-hours and the spec gives no `failures: {per_node_hour}`).")
    split = [f"{_label(r).replace(chr(10), ' ')}: {startup_words(r)}"
             for r in records if startup_words(r)]
    out: list[Block] = [Heading(TITLE), Note(METHOD), Para(sentence(hours)), Para(rate),
                        Image(FILE, TITLE), Table(heads, rows)]
    if split:
        out += [Para("Start-up, split (mean over the point's runs):"), Items(split)]
    return out
