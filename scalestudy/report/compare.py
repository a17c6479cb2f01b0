"""`scalestudy compare`'s files: compare.csv, compare.md and compare.png of two studies
aligned by results.history.compare, each written atomically."""

from __future__ import annotations

import io
from datetime import datetime
from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from scalestudy.execute.workspace import write_atomic
from scalestudy.report.plots import plot_compare
from scalestudy.report.tables import compare_table, markdown_table
from scalestudy.results.analysis.collect import write_csv_atomic
from scalestudy.results.analysis.efficiency import unit_of
from scalestudy.results.history.compare import Side


def markdown(frame: pd.DataFrame, differs: dict[str, tuple[str, str]], a: Side, b: Side,
             warning: str | None = None) -> str:
    """compare.md: what differs, the aligned table, the plot."""
    lines = [f"# {a.name} vs {b.name}", ""]
    if warning:
        lines += [f"**Warning: {warning}**", ""]
    unit = unit_of(frame)
    lines += [f"A = {a.runs_csv}, B = {b.runs_csv}. Throughput is {unit} over all GPUs "
              "(median over repeats, [min–max] over them, (n) repeats); a ratio whose two "
              "bands overlap is marked \"within noise\"; efficiency is against each "
              "study's own baseline, and one above 100 % is flagged: superlinear scaling "
              "usually means a noisy or slow baseline.", ""]
    lines += [f"- {k}: A {va}; B {vb}" for k, (va, vb) in differs.items()] or [
        "- no parameter or setting differs between the studies"]
    lines += ["", markdown_table(*compare_table(frame)), "", "![comparison](compare.png)", ""]
    return "\n".join(lines)


def write_compare(frame: pd.DataFrame, differs: dict[str, tuple[str, str]], a: Side,
                  b: Side, out: Path, warning: str | None = None) -> Path:
    """Write compare.csv, compare.md and compare.png into `out`; returns `out`."""
    out.mkdir(parents=True, exist_ok=True)
    write_csv_atomic(frame, out / "compare.csv")
    fig = Figure(figsize=(13, 5), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    plot_compare(frame, (left, right), (a.name, b.name))
    date = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z").strip()
    fig.suptitle(f"{a.name} vs {b.name} ({a.scaling} / {b.scaling} scaling, {date})")
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=100, metadata={"Software": None})
    write_atomic(out / "compare.png", png.getvalue())
    write_atomic(out / "compare.md", markdown(frame, differs, a, b, warning))
    return out
