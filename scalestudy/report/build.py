"""The study report: draw one `Analysis` (results.analysis.study) as Markdown, self-contained
HTML, PNG plots, CSV of the data and summary.json in results/<study>/report/.

Nothing here analyses: `build_report` writes everything in a temporary directory and
swaps it in at the end, so a crash never leaves half a report. See docs/report.md for
what each section means.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from scalestudy.report.hours import FILE as HOURS_FILE
from scalestudy.report.hours import hours_blocks, plot_hours
from scalestudy.report.page import (
    Block,
    Heading,
    Headline,
    Image,
    Items,
    Link,
    Note,
    Para,
    Table,
    html_page,
    markdown,
)
from scalestudy.report.plots import (
    Draw,
    Drawing,
    heatmap_data,
    plot_comm_overhead,
    plot_cost,
    plot_efficiency,
    plot_heatmap,
    plot_model,
    plot_per_gpu_vs_batch,
    plot_throughput,
    plot_variants,
    render_png,
)
from scalestudy.report.sections import (
    container_blocks,
    cost_blocks,
    not_measured_blocks,
    parallelism_blocks,
    straggler_blocks,
    to_target_blocks,
)
from scalestudy.report.tables import (
    bound_table,
    failure_table,
    fit_table,
    flags_table,
    group_tables,
    prediction_table,
    reference_table,
    residual_table,
)
from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.collect import STATES
from scalestudy.results.analysis.commmodel import PREDICTION_RULE
from scalestudy.results.analysis.efficiency import failures
from scalestudy.results.analysis.study import Analysis
from scalestudy.results.analysis.summary import dump

__all__ = ["Report", "build_report", "plot_efficiency", "plot_throughput", "render_png"]


@dataclass(frozen=True)
class Report:
    """What a report build produced: where its page is, the analysis it drew, and what
    the results store said when the study's runs went into it (empty: not stored)."""

    html: Path
    analysis: Analysis
    stored: str = ""


def run_counts(runs: pd.DataFrame) -> str:
    """A summary like `12 runs planned: 10 completed, 1 failed, 1 pending`."""
    states = runs[col.STATE].astype(str) if col.STATE in runs.columns else pd.Series(dtype=str)
    counts = states.value_counts()
    names = [*[s for s in STATES if s in counts], *[s for s in counts.index if s not in STATES]]
    parts = ", ".join(f"{counts[s]} {s}" for s in names)
    return f"{len(runs)} runs planned" + (f": {parts}" if parts else "")


def _definitions(a: Analysis) -> str:
    scaling, options, unit = a.scaling, a.options, a.unit
    cores, one_host = a.where.cores_per_host, a.where.one_host
    batch = "batch per data-parallel replica" if unit == "tokens/s" else "per-GPU batch"
    fixed = (f"{batch} fixed, global batch grows with the GPUs" if scaling == "weak"
             else f"global batch fixed, {batch} shrinks with the GPUs")
    hosts = (f"Oversubscription is checked against {cores} cores per host"
             + (" (every rank runs on this one host)" if one_host else "") if cores else
             "Oversubscription is not checked: the system profile gives no cores per node")
    return (f"{scaling.capitalize()} scaling ({fixed}). Throughput is {unit} over all "
            "GPUs, median over repeats, [min–max] over repeats. Speedup = throughput(P) / "
            "throughput(P0); efficiency = (throughput(P) / P) / (throughput(P0) / P0), P0 = "
            f"the baseline (asked for: {options.baseline}); the baseline runs the same "
            "backend at its own world size (DDP at world size 1 for a 1-GPU baseline), so "
            "100 % is that loop under DDP, not a bare training loop (side by side on CPU a "
            "bare loop was about 3 % faster). Comm overhead = 1 − compute time "
            "/ step time; it is not shown at 1 GPU (—), where there is no gradient sync and "
            "the difference is timing noise (runs.csv keeps the raw value). "
            + options.thresholds.describe() + f" {hosts}.")


MODEL_TEXT = ("Step time t(P) = a·b(P) + 2(P−1)/P·S/B + α·L(P): compute (b = per-GPU batch), "
              "ring allreduce of S gradient bytes at bus bandwidth B, latency α per {lat}. "
              "Measured step time = work per step / throughput, in the throughput's unit "
              "(global batch, × sequence length for tokens). Fitted by non-negative least "
              "squares on relative residuals; the hold-out check refits without the largest "
              "world size and predicts it.")


BOUND_TEXT = ("At each group's largest scale: a ring allreduce of S gradient bytes takes at "
              "least 2(P−1)/P·S/busbw (busbw from the allreduce probe); with compute time "
              "t_c, efficiency cannot exceed t_c / (t_c + t_ring) unless communication "
              "overlaps compute (DDP overlaps it with the backward pass).")


Plot = tuple[str, str, Draw, pd.DataFrame, str]


def _plots(a: Analysis) -> list[Plot]:
    """(file, title, draw, frame, data csv) of each plot the data supports."""
    table, fits = a.table, a.fits
    out: list[tuple[str, str, Draw, pd.DataFrame, str]] = [
        ("throughput.png", "Throughput vs GPUs", plot_throughput, table, "scaling.csv"),
        ("efficiency.png", "Parallel efficiency vs GPUs", plot_efficiency, table,
         "scaling.csv")]
    if table.empty:
        return out
    if table[col.BATCH_SIZE].nunique() > 1:
        out.append(("per_gpu_batch.png", "Per-GPU throughput vs per-GPU batch",
                    plot_per_gpu_vs_batch, table, "scaling.csv"))
    if table[col.GROUP].nunique() > 1:
        out.append(("variants.png", "Throughput per configuration at each scale",
                    plot_variants, table, "scaling.csv"))
    heat = heatmap_data(table)
    if heat.shape[0] > 1 and heat.shape[1] > 1:
        out.append(("heatmap.png", "Efficiency by nodes and batch", plot_heatmap,
                    table, "heatmap.csv"))
    if table[col.COMM_OVERHEAD].notna().any():
        out.append(("comm_overhead.png", "Communication overhead vs GPUs", plot_comm_overhead,
                    table, "scaling.csv"))
    if (fits["status"] == "fitted").any():
        out.append(("model.png", "Step time: measured, fit and prediction", plot_model,
                    a.model_frame, "model_points.csv"))
    if len(a.costs):
        out.append(("cost.png", "", plot_cost, a.costs,
                    "cost.csv"))
    if len(a.hours):
        out.append((HOURS_FILE, "Where the hours go", plot_hours, a.hours, "hours.csv"))
    return out


def _predictions(fits: pd.DataFrame, preds: pd.DataFrame, max_nodes: int,
                 unit: str = "img/s") -> list[Block]:
    """The predictions with the rule they passed, or why there are none (per group)."""
    reach = f" (up to {max_nodes:,} nodes)" if len(preds) else ""  # none: no reach
    b: list[Block] = [Heading(level=3, text=f"Predictions{reach}"), Note(PREDICTION_RULE)]
    if len(preds):
        b.append(Table.of(prediction_table(preds, unit)))
    why = [(str(f.group), str(f.withheld)) for f in fits.itertuples() if f.withheld]
    reasons = list(dict.fromkeys(w for _, w in why))
    if len(reasons) == 1:
        who = "" if len(why) == len(fits) else " for " + ", ".join(g for g, _ in why)
        b.append(Para(f"Predictions{who}: none, because {reasons[0]}."))
    elif reasons:
        b += [Para("Predictions withheld:"), Items([f"{g}: {w}." for g, w in why])]
    return b


def _blocks(a: Analysis, description: str, files: set[str]) -> list[Block]:
    """The page, top to bottom."""
    table, runs = a.table, a.runs
    b: list[Block] = [Heading(level=1, text=f"Scaling study: {a.name}"),
                      Note(f"Generated {a.generated}. {run_counts(runs)}. {a.measured_on}")]
    b += [Para(p.strip()) for p in description.split("\n\n") if p.strip()]
    b += [Note(_definitions(a)), Heading("Findings")]
    b += [Headline(a.headline)] if a.headline else []
    b.append(Items(a.found.items or ["No completed runs yet."]))
    if a.found.more:
        b.append(Note(f"{len(a.found.more)} more finding(s) in summary.json."))
    if table.empty:
        b.append(Para("No completed runs yet: nothing to analyse."))
    for group, note, tab in group_tables(table):
        b += [Heading(group), Note(note), Table.of(tab)]
    if len(a.checks):
        b += [Heading("References"),
              Para(f"{len(a.checks) - a.failed_checks} passed, {a.failed_checks} failed."),
              Table.of(reference_table(a.checks))]
    if not table.empty:
        b += _model_blocks(a)
    b += parallelism_blocks(table)
    # with a measured target the picks are on its front: said in its section, not Cost's
    trained = len(a.to_target) > 0
    b += to_target_blocks(a.to_target, a.front.points if a.front is not None else None,
                          a.picks if trained else ())
    b += hours_blocks(a.hours, a.failure_rate)
    b += cost_blocks(a.costs, runs, a.target, () if trained else a.picks, a.waits)
    if a.spend is not None:
        b += [Heading("What the study used", 3), Items(a.spend.sentences())]
    b += not_measured_blocks(a.not_measured)
    b += straggler_blocks(a.stragglers)
    b += container_blocks(a.containers, a.unit)
    b.append(Heading("Plots"))
    b += [Image(fname, title) for fname, title, *_ in _plots(a)
          if fname not in ("cost.png", HOURS_FILE)]
    b += [Heading("Quality flags"),
          Table.of(flags_table(a.flagged)) if len(a.flagged) else Para("None.")]
    failed_tab = failure_table(runs)
    b += [Heading("Failed runs"), Table.of(failed_tab) if failed_tab[1] else Para("None.")]
    b += [Heading("Data"), Items([Link(f, f, f": {what}") for f, what in DATA_FILES
                                  if f in files]
                           + [Link("../runs.csv", "../runs.csv", ": one row per run")])]
    return _on_cpus(b) if cpu_only(runs) else b


#: What a table header says of GPUs, as it reads where every rank ran on CPU cores.
CPU_WORDS: tuple[tuple[str, str], ...] = (
    ("GPU-hours", "rank-hours"), ("per-GPU", "per-rank"), ("GPUs", "ranks"),
    ("GPU", "rank"))


def cpu_only(runs: pd.DataFrame) -> bool:
    """Every run that says its device ran on CPUs (the tables then count ranks)."""
    devices = set(runs[col.DEVICE].dropna().astype(str)) if "device" in runs else set()
    return devices == {"cpu"}


def _on_cpus(blocks: list[Block]) -> list[Block]:
    """The page's tables with their GPU words said of ranks (CPU runs have no GPU)."""
    def said(text: str) -> str:
        for gpu, cpu in CPU_WORDS:
            text = text.replace(gpu, cpu)
        return text

    return [Table([said(h) for h in block.headers], block.rows)
            if isinstance(block, Table) else block for block in blocks]


def _model_blocks(a: Analysis) -> list[Block]:
    """The Communication model section: fits, residuals, the ring bound, predictions."""
    b: list[Block] = [
        Heading("Communication model"),
        Note(MODEL_TEXT.format(lat="log2 P" if a.options.latency == "log"
                               else "extra rank (P − 1)")),
        Table.of(fit_table(a.fits, a.unit))]
    if len(a.points):
        b += [Heading(level=3, text="Residuals"), Table.of(residual_table(a.points))]
    if len(a.bounds):
        b += [Heading(level=3, text="Ring allreduce bound"), Note(BOUND_TEXT),
              Table.of(bound_table(a.bounds))]
    b += _predictions(a.fits, a.predictions, a.options.max_nodes, a.unit)
    if a.scored:
        b += [Heading(level=3, text="Earlier forecasts of these scales"),
              Note("Forecasts of this system kept in the results store's ledger (by "
                   "`predict` or an earlier report) that this study's runs now measure, "
                   "scored against the median of the runs since each was made."),
              Items(list(a.scored))]
    return b


DATA_FILES: tuple[tuple[str, str], ...] = (
    ("scaling.csv", "the scaling tables and the data of the throughput, efficiency, "
     "per-GPU batch, configuration and comm-overhead plots"),
    ("heatmap.csv", "the data of the heatmap"),
    ("model_fit.csv", "the model's parameters per group"),
    ("model_points.csv", "measured vs fitted step time (the model plot's data)"),
    ("model_predictions.csv", "predicted throughput and efficiency at larger scales"),
    ("ring_bound.csv", "the ring allreduce time from the probe and the bound it sets"),
    ("references.csv", "the reference checks"),
    ("flags.csv", "the flagged runs"),
    ("failures.csv", "the failed runs"),
    ("cost.csv", "time to solution, node-hours, GPU-hours, energy and the Pareto front"),
    ("to_target.csv", "time, node-hours and samples to the measured target per point"),
    ("target_front.csv", "time and node-hours to the target of measured and forecast "
     "points, with intervals, and the front"),
    ("hours.csv", "where each point's wall clock went, and the expected failures"),
    ("summary.json", "the summary `scalestudy report --json` prints"),
)


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


#: Plots that take longest to draw (many groups: error bars, labels), drawn first so that
#: the processes drawing side by side finish together.
SLOW_PLOTS: tuple[str, ...] = ("throughput.png", "model.png", "cost.png", "efficiency.png")


def _slowest_first(plot: Plot) -> int:
    return SLOW_PLOTS.index(plot[0]) if plot[0] in SLOW_PLOTS else len(SLOW_PLOTS)


def _data(a: Analysis, plots: list[Plot]) -> dict[str, pd.DataFrame]:
    """The CSV files of the report, by name."""
    csvs: dict[str, pd.DataFrame] = {
        "scaling.csv": a.table, "failures.csv": failures(a.runs), "model_fit.csv": a.fits,
        "model_points.csv": a.model_frame, "model_predictions.csv": a.predictions,
        "flags.csv": a.flagged, "ring_bound.csv": a.bounds, "cost.csv": a.costs}
    if any(p[0] == "heatmap.png" for p in plots):
        csvs["heatmap.csv"] = heatmap_data(a.table).reset_index()
    if len(a.checks):
        csvs["references.csv"] = a.checks
    if len(a.to_target):
        csvs["to_target.csv"] = a.to_target
    if a.front is not None and len(a.front.points):
        csvs["target_front.csv"] = a.front.points
    if len(a.hours):
        csvs["hours.csv"] = a.hours
    return csvs


def build_report(study_dir: Path, analysis: Analysis, description: str = "") -> Report:
    """Draw an analysis into `study_dir/report/`: plots, CSV, summary.json, Markdown and
    HTML, written aside and swapped in whole (a crash never leaves half a report)."""
    a, study_dir = analysis, Path(study_dir)
    study_dir.mkdir(parents=True, exist_ok=True)
    plots = _plots(a)
    csvs = _data(a, plots)
    tmp = Path(tempfile.mkdtemp(prefix="report.tmp", dir=study_dir))
    try:
        tmp.chmod(0o755)
        with Drawing([(fname, draw, frame, f"{a.name}: {title}" + (
                "" if fname == "cost.png" else f", {a.scaling} scaling") + f" ({a.generated})")
                for fname, title, draw, frame, _ in sorted(plots, key=_slowest_first)]
                     ) as drawing:  # the plots draw while the rest is written
            for fname, frame in csvs.items():
                frame.to_csv(tmp / fname, index=False)
            (tmp / "summary.json").write_text(dump(a.summary), encoding="utf-8")
            blocks = _blocks(a, description, {*csvs, "summary.json"})
            (tmp / "index.md").write_text(markdown(blocks), encoding="utf-8")
            images = drawing.images()
        for fname, data in images.items():
            (tmp / fname).write_bytes(data)
        (tmp / "index.html").write_text(html_page(
            blocks, f"Scaling study: {a.name}", f"{a.name}, {a.generated}", images),
            encoding="utf-8")
        _swap_in(tmp, study_dir / "report")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Report(html=study_dir / "report" / "index.html", analysis=a)
