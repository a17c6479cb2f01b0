"""Compare two studies (e.g. before/after an NCCL tuning change or a software upgrade):
the points both measured, aligned, with throughput and efficiency and B / A ratios.

Points are aligned on their shape (nodes, ranks per node, per-GPU and global batch)
and on the parameters both studies share, except those whose values differ entirely
between them: those are what is being compared (a tuning variant, a backend, the
study name) and are named in the output instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from scalestudy.analyze import format_value, scaling_table
from scalestudy.collect import read_runs, write_csv_atomic
from scalestudy.errors import ScalestudyError
from scalestudy.plots import CMAP, _gpu_axis, _log_y

SHAPE: tuple[str, ...] = ("nodes", "ranks_per_node", "world_size", "batch_size",
                          "global_batch")
COLUMNS: tuple[str, ...] = ("throughput_a", "throughput_b", "throughput_ratio",
                            "efficiency_a", "efficiency_b", "efficiency_ratio")


@dataclass
class Side:
    """One study of a comparison: its name, where its runs are, its scaling table."""

    name: str
    runs_csv: Path
    scaling: str
    table: pd.DataFrame


def load_side(arg: Path, results: Path) -> Side:
    """A study spec (its results/<name>/runs.csv) or a results directory -> Side."""
    arg = Path(arg)
    if arg.is_dir():
        directory = arg
    elif arg.suffix in (".yaml", ".yml"):
        from scalestudy.spec import load_study

        directory = Path(results) / load_study(arg).name
    else:
        raise ScalestudyError(f"{arg}: neither a study spec (.yaml) nor a results directory; "
                              "give a spec or results/<study>")
    csv = directory / "runs.csv"
    if not csv.is_file():
        raise ScalestudyError(f"{csv}: no runs.csv; run `scalestudy collect STUDY` (or "
                              "`report`) for that study first")
    runs = read_runs(csv)
    scaling = str(runs["scaling"].dropna().iloc[0]) if "scaling" in runs and runs[
        "scaling"].notna().any() else "weak"
    name = str(runs["study"].dropna().iloc[0]) if "study" in runs and runs[
        "study"].notna().any() else directory.name
    return Side(name, csv, scaling, scaling_table(runs, scaling))


def _params(table: pd.DataFrame) -> list[str]:
    cols = list(table.columns)
    return cols[1:cols.index("nodes")] if "nodes" in cols else []


def _as_text(table: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    out = table.copy()
    for c in cols:
        out[c] = out[c].map(format_value)
    return out


def align(a: Side, b: Side) -> tuple[pd.DataFrame, dict[str, tuple[str, str]]]:
    """(aligned frame, {parameter: (A's values, B's values)} of what differs)."""
    shared = [c for c in _params(a.table) if c in _params(b.table) and c != "study"]
    ta, tb = _as_text(a.table, [*shared, *SHAPE]), _as_text(b.table, [*shared, *SHAPE])
    differs = {c: (", ".join(sorted(set(ta[c]))), ", ".join(sorted(set(tb[c]))))
               for c in shared if not set(ta[c]) & set(tb[c])}
    keys = [*SHAPE, *[c for c in shared if c not in differs]]
    keep = ["group", "throughput_median", "efficiency"]
    merged = ta[[*keys, *keep]].merge(tb[[*keys, *keep]], on=keys, suffixes=("_a", "_b"))
    merged = merged.rename(columns={"throughput_median_a": "throughput_a",
                                    "throughput_median_b": "throughput_b"})
    merged["throughput_ratio"] = merged["throughput_b"] / merged["throughput_a"]
    merged["efficiency_ratio"] = merged["efficiency_b"] / merged["efficiency_a"]
    merged["world_size"] = merged["world_size"].astype(int)
    merged = merged.sort_values(["group_a", "world_size"], kind="stable")
    return merged[["group_a", "group_b", *keys, *COLUMNS]].reset_index(drop=True), differs


def plot_compare(frame: pd.DataFrame, axes: tuple, names: tuple[str, str]) -> None:
    """Left: throughput of A (solid) and B (dashed) vs GPUs; right: B / A ratio."""
    left, right = axes
    left.set_title(f"Throughput: {names[0]} (solid) vs {names[1]} (dashed)")
    left.set_ylabel("Throughput (img/s, all GPUs)")
    right.set_title(f"Throughput ratio {names[1]} / {names[0]}")
    right.set_ylabel("ratio (B / A)")
    for ax in axes:
        _gpu_axis(ax, frame["world_size"])
    _log_y(left)
    for i, (group, rows) in enumerate(frame.groupby("group_a", sort=False)):
        color = CMAP(i % 10)
        left.plot(rows["world_size"], rows["throughput_a"], "o-", color=color, label=group)
        left.plot(rows["world_size"], rows["throughput_b"], "s--", color=color)
        right.plot(rows["world_size"], rows["throughput_ratio"], "o-", color=color,
                   label=group)
    right.axhline(1.0, ls="--", color="0.4", lw=1)
    for ax in axes:
        ax.legend(fontsize=8, loc="best")


def compare(a_arg: Path, b_arg: Path, out: Path | None = None,
            results: Path = Path("results")) -> tuple[pd.DataFrame, dict, Path]:
    """Align two studies, write compare.csv / compare.md / compare.png to `out`
    (default results/compare-A-vs-B); (aligned frame, what differs, out dir)."""
    a, b = load_side(a_arg, results), load_side(b_arg, results)
    frame, differs = align(a, b)
    if frame.empty:
        raise ScalestudyError(f"{a.runs_csv} and {b.runs_csv} share no measured point "
                              "(same nodes, ranks per node and batch); compare studies over "
                              "the same grid")
    out = Path(out) if out is not None else Path(results) / f"compare-{a.name}-vs-{b.name}"
    out.mkdir(parents=True, exist_ok=True)
    write_csv_atomic(frame, out / "compare.csv")
    fig = Figure(figsize=(13, 5), layout="constrained")
    FigureCanvasAgg(fig)
    plot_compare(frame, tuple(fig.subplots(1, 2)), (a.name, b.name))
    date = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z").strip()
    fig.suptitle(f"{a.name} vs {b.name} ({a.scaling} / {b.scaling} scaling, {date})")
    tmp = out / ".compare.png.tmp"
    fig.savefig(tmp, format="png", dpi=100, metadata={"Software": None})
    tmp.replace(out / "compare.png")
    md = out / ".compare.md.tmp"
    md.write_text(markdown(frame, differs, a, b), encoding="utf-8")
    md.replace(out / "compare.md")
    return frame, differs, out


def rows_text(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The aligned table as text cells (shared by Markdown and the terminal)."""
    headers = ["group (A)", "GPUs", "nodes × ranks/node", "per-GPU batch", "global batch",
               "A img/s", "B img/s", "B / A", "A efficiency", "B efficiency", "B / A eff."]
    rows = [[str(r.group_a), str(r.world_size), f"{r.nodes} × {r.ranks_per_node}",
             str(r.batch_size), str(r.global_batch), f"{r.throughput_a:,.1f}",
             f"{r.throughput_b:,.1f}", f"{r.throughput_ratio:.3f}", f"{r.efficiency_a:.1%}",
             f"{r.efficiency_b:.1%}",
             f"{r.efficiency_ratio:.3f}" if np.isfinite(r.efficiency_ratio) else "n/a"]
            for r in frame.itertuples(index=False)]
    return headers, rows


def markdown(frame: pd.DataFrame, differs: dict, a: Side, b: Side) -> str:
    """compare.md: what differs, the aligned table, the plot."""
    headers, rows = rows_text(frame)
    lines = [f"# {a.name} vs {b.name}", "",
             f"A = {a.runs_csv}, B = {b.runs_csv}. Throughput is images/s over all GPUs "
             "(median over repeats); efficiency is against each study's own baseline.", ""]
    lines += [f"- {k}: A {va}; B {vb}" for k, (va, vb) in differs.items()] or [
        "- no parameter differs entirely between the studies"]
    lines += ["", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines += ["", "![comparison](compare.png)", ""]
    return "\n".join(lines)
