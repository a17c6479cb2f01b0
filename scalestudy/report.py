"""The study report: Markdown and self-contained HTML, PNG plots, CSV of the data.

Plots are drawn on `matplotlib.figure.Figure` objects with the Agg canvas; pyplot (and
its global figure manager) is never used. `write_report` builds the whole report in a
temporary directory and swaps it in at the end, so a crash never leaves half a report.
"""

from __future__ import annotations

import base64
import html
import io
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogFormatter, NullLocator, PercentFormatter

from scalestudy.analyze import failures, format_value
from scalestudy.collect import STATES

PLOTS: tuple[tuple[str, str], ...] = (
    ("throughput.png", "Throughput vs GPUs"),
    ("efficiency.png", "Parallel efficiency vs GPUs"),
)
TABLE_HEADERS: tuple[str, ...] = (
    "GPUs", "nodes × ranks/node", "per-GPU batch", "global batch",
    "throughput img/s: median [min–max]", "per-GPU img/s", "speedup", "efficiency", "repeats",
)
Table = tuple[list[str], list[list[str]]]


def _num(value: float) -> str:
    """Images/s for people: 3 significant digits at least, thousands separated."""
    if not np.isfinite(value):
        return "n/a"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"


class _PlainLogFormatter(LogFormatter):
    """Log-axis labels as plain numbers (1,000 rather than 10^3); LogFormatter picks
    which ticks get a label."""

    def _num_to_string(self, x: float, vmin: float, vmax: float) -> str:
        return f"{x:,.0f}" if x >= 1 else f"{x:g}"


def _groups(table: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    return [(str(g), rows) for g, rows in table.groupby("group", sort=False)]


def _gpu_axis(ax: Axes, table: pd.DataFrame) -> None:
    """Log2 x axis with a tick at each world size, labelled as plain integers."""
    ax.set_xscale("log", base=2)
    sizes = sorted({int(p) for p in table["world_size"]}) if not table.empty else [1, 2, 4, 8]
    ax.set_xticks(sizes)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:g}"))
    ax.set_xlim(sizes[0] / 1.4, sizes[-1] * 1.4)
    ax.set_xlabel("GPUs (world size = nodes × ranks/node)")
    ax.grid(True, which="major", alpha=0.3)


def _no_data(ax: Axes) -> None:
    ax.text(0.5, 0.5, "No completed runs yet", transform=ax.transAxes,
            ha="center", va="center", fontsize=12, color="0.4")


def _legend(ax: Axes, extra: Line2D) -> None:
    handles, labels = ax.get_legend_handles_labels()
    ax.legend([*handles, extra], [*labels, extra.get_label()], fontsize=8, loc="best")


def _nonnegative(err: list[np.ndarray]) -> list[np.ndarray]:
    """Error-bar lengths, with rounding noise below zero clipped (matplotlib rejects it)."""
    return [np.clip(e, 0.0, None) for e in err]


def plot_throughput(table: pd.DataFrame, ax: Axes, title: str | None = None) -> None:
    """Log-log throughput vs GPUs per group, min–max error bars, dashed ideal line."""
    ax.set_title(title or "Throughput vs GPUs")
    ax.set_ylabel("Throughput (img/s, all GPUs)")
    _gpu_axis(ax, table)
    if table.empty:
        _no_data(ax)
        ax.set_yticks([])
        return
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(_PlainLogFormatter(labelOnlyBase=False))
    ax.yaxis.set_minor_formatter(_PlainLogFormatter(labelOnlyBase=False))
    cmap = colormaps["tab10"]
    for i, (group, rows) in enumerate(_groups(table)):
        color = cmap(i % 10)
        med = rows["throughput_median"].to_numpy(float)
        err = _nonnegative([med - rows["throughput_min"].to_numpy(float),
                            rows["throughput_max"].to_numpy(float) - med])
        ax.errorbar(rows["world_size"], med, yerr=err, fmt="o-", color=color, capsize=3,
                    label=group)
        ax.plot(rows["world_size"], rows["ideal_throughput"], "--", color=color, alpha=0.6)
    _legend(ax, Line2D([], [], ls="--", color="0.4", label="ideal (linear from baseline)"))


def plot_efficiency(table: pd.DataFrame, ax: Axes, title: str | None = None) -> None:
    """Efficiency vs GPUs (x log2, y from 0) per group with a 1.0 reference line."""
    ax.set_title(title or "Parallel efficiency vs GPUs")
    ax.set_ylabel("Parallel efficiency (per-GPU img/s vs baseline)")
    _gpu_axis(ax, table)
    ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0))
    top = 1.1
    if table.empty:
        _no_data(ax)
    else:
        cmap = colormaps["tab10"]
        annotate = len(table) <= 24
        for i, (group, rows) in enumerate(_groups(table)):
            color = cmap(i % 10)
            eff = rows["efficiency"].to_numpy(float)
            scale = eff / rows["throughput_median"].to_numpy(float)
            err = _nonnegative([eff - rows["throughput_min"].to_numpy(float) * scale,
                                rows["throughput_max"].to_numpy(float) * scale - eff])
            ax.errorbar(rows["world_size"], eff, yerr=err, fmt="o-", color=color, capsize=3,
                        label=group)
            if annotate:
                base = rows["baseline"].to_numpy(bool)
                for x, y in zip(rows["world_size"][~base], eff[~base], strict=True):
                    ax.annotate(f"{y:.0%}", (x, y), textcoords="offset points", xytext=(7, 0),
                                ha="left", va="center", fontsize=7, color=color,
                                bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none",
                                      "alpha": 0.8})
            top = max(top, float(np.nanmax(err[1] + eff)) * 1.08)
    ax.axhline(1.0, ls="--", color="0.4", lw=1)
    ax.set_ylim(0, top)
    _legend(ax, Line2D([], [], ls="--", color="0.4", label="ideal (100 %)"))


def render_png(draw: Callable[[pd.DataFrame, Axes, str], None], table: pd.DataFrame,
               title: str) -> bytes:
    """Draw on a fresh Agg figure and return the PNG bytes (no pyplot state)."""
    fig = Figure(figsize=(8, 5), layout="constrained")
    FigureCanvasAgg(fig)
    draw(table, fig.add_subplot(), title)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    return buf.getvalue()


def group_tables(table: pd.DataFrame) -> list[tuple[str, str, Table]]:
    """(group label, baseline note, (headers, rows)) for each group, cells as text."""
    out = []
    for group, rows in _groups(table):
        body = []
        for r in rows.itertuples(index=False):
            spread = f"{_num(r.throughput_median)} [{_num(r.throughput_min)}–" \
                     f"{_num(r.throughput_max)}]"
            body.append([
                str(r.world_size), f"{r.nodes} × {r.ranks_per_node}",
                format_value(r.batch_size), format_value(r.global_batch), spread,
                _num(r.throughput_per_gpu), f"{r.speedup:.2f}", f"{r.efficiency:.1%}",
                str(r.n_repeats),
            ])
        base = rows[rows["baseline"].astype(bool)].iloc[0]
        note = (f"Baseline: {base.world_size} GPU{'s' if base.world_size != 1 else ''} "
                f"({base.nodes} × {base.ranks_per_node}), "
                f"{_num(base.throughput_median)} img/s.")
        out.append((group, note, (list(TABLE_HEADERS), body)))
    return out


def failure_table(runs: pd.DataFrame) -> Table:
    """Failed runs as text cells (run id, configuration, exit code, reason)."""
    failed = failures(runs)
    rows = [["" if pd.isna(v) else format_value(v) for v in rec]
            for rec in failed.itertuples(index=False)]
    return [str(c) for c in failed.columns], rows


def run_counts(runs: pd.DataFrame) -> str:
    """A summary like `12 runs planned: 10 completed, 1 failed, 1 pending`."""
    states = runs["state"].astype(str) if "state" in runs.columns else pd.Series(dtype=str)
    counts = states.value_counts()
    names = [*[s for s in STATES if s in counts], *[s for s in counts.index if s not in STATES]]
    parts = ", ".join(f"{counts[s]} {s}" for s in names)
    return f"{len(runs)} runs planned" + (f": {parts}" if parts else "")


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").strip()


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(_md_cell(h) for h in headers) + " |",
             "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>\n"
                   for row in rows)
    attr = f' class="{cls}"' if cls else ""
    return f"<table{attr}>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody>\n</table>"


CSS = """body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;
color:#222}table{border-collapse:collapse;margin:.5em 0 1.5em}th,td{border:1px solid #ccc;
padding:.25em .6em;text-align:right}th{background:#f3f3f3}.failed td:last-child{text-align:left}
img{max-width:100%}.note{color:#555}figure{margin:1em 0}"""


def _definitions(scaling: str) -> str:
    fixed = ("per-GPU batch fixed, global batch grows with the GPUs" if scaling == "weak"
             else "global batch fixed, per-GPU batch shrinks with the GPUs")
    return (f"{scaling.capitalize()} scaling ({fixed}). Throughput is images/s over all "
            "GPUs, median over repeats. Speedup = throughput(P) / throughput(P0); "
            "efficiency = (throughput(P) / P) / (throughput(P0) / P0), P0 = the smallest "
            "world size in the group (fewer nodes on a tie).")


def _markdown(name: str, description: str, scaling: str, date: str, counts: str,
              groups: list[tuple[str, str, Table]], failed: Table) -> str:
    out = [f"# Scaling study: {name}", "", f"_Generated {date}._ {counts}.", ""]
    if description.strip():
        out += [description.strip(), ""]
    out += [_definitions(scaling), ""]
    if not groups:
        out += ["**No completed runs yet**: nothing to analyse.", ""]
    for group, note, (headers, rows) in groups:
        out += [f"## {group}", "", note, "", _md_table(headers, rows), ""]
    out += ["## Plots", ""]
    out += [f"![{title}]({fname})" + "\n" for fname, title in PLOTS]
    out += ["## Failed runs", ""]
    out += [_md_table(*failed) if failed[1] else "None.", ""]
    out += ["## Data", "", "- [scaling.csv](scaling.csv): the tables and plotted data",
            "- [failures.csv](failures.csv): the failed runs",
            "- [../runs.csv](../runs.csv): one row per run", ""]
    return "\n".join(out)


def _html(name: str, description: str, scaling: str, date: str, counts: str,
          groups: list[tuple[str, str, Table]], failed: Table,
          images: dict[str, bytes]) -> str:
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>Scaling study: {e(name)}</title><style>{CSS}</style></head><body>",
           f"<h1>Scaling study: {e(name)}</h1>",
           f'<p class="note">Generated {e(date)}. {e(counts)}.</p>']
    out += [f"<p>{e(p.strip())}</p>" for p in description.split("\n\n") if p.strip()]
    out.append(f'<p class="note">{e(_definitions(scaling))}</p>')
    if not groups:
        out.append("<p><strong>No completed runs yet</strong>: nothing to analyse.</p>")
    for group, note, (headers, rows) in groups:
        out += [f"<h2>{e(group)}</h2>", f'<p class="note">{e(note)}</p>',
                _html_table(headers, rows)]
    out.append("<h2>Plots</h2>")
    for fname, title in PLOTS:
        data = base64.b64encode(images[fname]).decode("ascii")
        out.append(f'<figure><img alt="{e(title)}" src="data:image/png;base64,{data}">'
                   f"<figcaption>{e(title)}: {e(name)}, {e(date)}</figcaption></figure>")
    out.append("<h2>Failed runs</h2>")
    out.append(_html_table(*failed, cls="failed") if failed[1] else "<p>None.</p>")
    out.append("</body></html>\n")
    return "\n".join(out)


def _swap_in(tmp: Path, final: Path) -> None:
    """Replace directory `final` by `tmp`; the old one is moved aside, then removed."""
    aside = None
    if final.exists():
        aside = Path(tempfile.mkdtemp(prefix=f"{final.name}.old", dir=final.parent))
        os.rename(final, aside / final.name)
    try:
        os.rename(tmp, final)
    except BaseException:
        if aside is not None:
            os.rename(aside / final.name, final)
            shutil.rmtree(aside, ignore_errors=True)
        raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def write_report(study_dir: Path, name: str, description: str, scaling: str,
                 runs: pd.DataFrame, table: pd.DataFrame) -> Path:
    """Write `report/` (index.md, self-contained index.html, PNGs, CSVs) atomically;
    return the path of index.html."""
    study_dir = Path(study_dir)
    study_dir.mkdir(parents=True, exist_ok=True)
    date = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z").strip()
    tmp = Path(tempfile.mkdtemp(prefix="report.tmp", dir=study_dir))
    try:
        tmp.chmod(0o755)
        images = {
            "throughput.png": render_png(
                plot_throughput, table, f"{name}: throughput, {scaling} scaling ({date})"),
            "efficiency.png": render_png(
                plot_efficiency, table, f"{name}: efficiency, {scaling} scaling ({date})"),
        }
        for fname, data in images.items():
            (tmp / fname).write_bytes(data)
        table.to_csv(tmp / "scaling.csv", index=False)
        failures(runs).to_csv(tmp / "failures.csv", index=False)
        counts = run_counts(runs)
        groups = group_tables(table)
        failed = failure_table(runs)
        (tmp / "index.md").write_text(
            _markdown(name, description, scaling, date, counts, groups, failed),
            encoding="utf-8")
        (tmp / "index.html").write_text(
            _html(name, description, scaling, date, counts, groups, failed, images),
            encoding="utf-8")
        _swap_in(tmp, study_dir / "report")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return study_dir / "report" / "index.html"
