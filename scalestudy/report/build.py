"""The study report: analyse a scaling table, then write Markdown, self-contained HTML,
PNG plots, CSV of the data and a JSON summary into results/<study>/report/.

`build_report` writes everything in a temporary directory and swaps it in at the end,
so a crash never leaves half a report. See docs/report.md for what each section means.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from scalestudy.core.spec import Reference
from scalestudy.core.target import Target
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
    cost_blocks,
    costs_of,
    parallelism_blocks,
    pick_sentences,
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
from scalestudy.results.analyze import Baseline, completed_runs, failures, unit_of
from scalestudy.results.collect import STATES
from scalestudy.results.commmodel import (
    MAX_NODES,
    PREDICTION_RULE,
    model_study,
    qualified,
    ring_bounds,
)
from scalestudy.results.findings import findings
from scalestudy.results.quality import Thresholds, flagged_runs, host_view
from scalestudy.results.references import Locate, check_references
from scalestudy.results.summary import dump, headline, summary_dict

__all__ = ["Report", "ReportOptions", "build_report", "plot_efficiency", "plot_throughput",
           "render_png", "write_report"]


@dataclass(frozen=True)
class ReportOptions:
    """How the report analyses: baseline, flag thresholds, the model's terms and reach."""

    baseline: Baseline = "smallest"
    thresholds: Thresholds = field(default_factory=Thresholds)
    latency: str = "log"
    bandwidth: str = "fit"
    max_nodes: int = MAX_NODES
    deadline_s: float | None = None  # `--deadline`: the cheapest point that meets it
    budget_node_hours: float | None = None  # `--budget`: the fastest point within it


@dataclass
class Report:
    """What a report build produced: where, the tables, the checks and the summary."""

    html: Path
    table: pd.DataFrame
    checks: pd.DataFrame
    summary: dict[str, Any]

    @property
    def failed_checks(self) -> int:
        """How many reference checks failed."""
        return int((self.checks["result"] == "fail").sum()) if len(self.checks) else 0


def run_counts(runs: pd.DataFrame) -> str:
    """A summary like `12 runs planned: 10 completed, 1 failed, 1 pending`."""
    states = runs["state"].astype(str) if "state" in runs.columns else pd.Series(dtype=str)
    counts = states.value_counts()
    names = [*[s for s in STATES if s in counts], *[s for s in counts.index if s not in STATES]]
    parts = ", ".join(f"{counts[s]} {s}" for s in names)
    return f"{len(runs)} runs planned" + (f": {parts}" if parts else "")


def _definitions(scaling: str, options: ReportOptions, cores: int | None,
                 one_host: bool, unit: str = "img/s") -> str:
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


def _plots(table: pd.DataFrame, model_frame: pd.DataFrame, fits: pd.DataFrame
           ) -> list[tuple[str, str, Draw, pd.DataFrame, str]]:
    """(file, title, draw, frame, data csv) of each plot the data supports."""
    out: list[tuple[str, str, Draw, pd.DataFrame, str]] = [
        ("throughput.png", "Throughput vs GPUs", plot_throughput, table, "scaling.csv"),
        ("efficiency.png", "Parallel efficiency vs GPUs", plot_efficiency, table,
         "scaling.csv")]
    if table.empty:
        return out
    if table["batch_size"].nunique() > 1:
        out.append(("per_gpu_batch.png", "Per-GPU throughput vs per-GPU batch",
                    plot_per_gpu_vs_batch, table, "scaling.csv"))
    if table["group"].nunique() > 1:
        out.append(("variants.png", "Throughput per configuration at each scale",
                    plot_variants, table, "scaling.csv"))
    heat = heatmap_data(table)
    if heat.shape[0] > 1 and heat.shape[1] > 1:
        out.append(("heatmap.png", "Efficiency by nodes and batch", plot_heatmap,
                    table, "heatmap.csv"))
    if table["comm_overhead"].notna().any():
        out.append(("comm_overhead.png", "Communication overhead vs GPUs", plot_comm_overhead,
                    table, "scaling.csv"))
    if (fits["status"] == "fitted").any():
        out.append(("model.png", "Step time: measured, fit and prediction", plot_model,
                    model_frame, "model_points.csv"))
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


def measured_on(system: str | None, runs: pd.DataFrame, cores: int | None,
                one_host: bool) -> str:
    """Which system the numbers describe, in the report's first lines."""
    name = Path(system).stem if system else "unknown"
    devices = sorted({str(d) for d in runs.get("device", pd.Series(dtype=str)).dropna()})
    on = ("CPUs" if devices == ["cpu"] else "GPUs" if devices == ["cuda"]
          else " and ".join(devices) if devices else "")
    where = (f"this one machine ({cores} cores" + (f", {on}" if on else "") + ")"
             if one_host else "its nodes" + (f" ({on})" if on else ""))
    return (f"Measured on system {name}, {where}: every throughput, cost and prediction "
            "here prices training on that system and answers no question about another.")


def _blocks(name: str, description: str, scaling: str, date: str, runs: pd.DataFrame,
            table: pd.DataFrame, options: ReportOptions, parts: dict[str, Any]) -> list[Block]:
    b: list[Block] = [Heading(level=1, text=f"Scaling study: {name}"),
                      Note(f"Generated {date}. {run_counts(runs)}. {parts['measured_on']}")]
    b += [Para(p.strip()) for p in description.split("\n\n") if p.strip()]
    b.append(Note(_definitions(scaling, options, *parts["hosts"], unit_of(table))))
    found = parts["found"]
    b.append(Heading("Findings"))
    b += [Headline(parts["headline"])] if parts["headline"] else []
    b.append(Items(found.items or ["No completed runs yet."]))
    if found.more:
        b.append(Note(f"{len(found.more)} more finding(s) in summary.json."))
    if table.empty:
        b.append(Para("No completed runs yet: nothing to analyse."))
    for group, note, tab in group_tables(table):
        b += [Heading(group), Note(note), Table.of(tab)]
    checks = parts["checks"]
    if len(checks):
        failed = int((checks["result"] == "fail").sum())
        b += [Heading("References"),
              Para(f"{len(checks) - failed} passed, {failed} failed."),
              Table.of(reference_table(checks))]
    if not table.empty:
        b += [Heading("Communication model"),
              Note(MODEL_TEXT.format(lat="log2 P" if options.latency == "log"
                                         else "extra rank (P − 1)")),
              Table.of(fit_table(parts["fits"], unit_of(table)))]
        if len(parts["points"]):
            b += [Heading(level=3, text="Residuals"), Table.of(residual_table(parts["points"]))]
        if len(parts["bounds"]):
            b += [Heading(level=3, text="Ring allreduce bound"), Note(BOUND_TEXT),
                  Table.of(bound_table(parts["bounds"]))]
        b += _predictions(parts["fits"], parts["preds"], options.max_nodes, unit_of(table))
    b += parallelism_blocks(table)
    b += cost_blocks(parts["costs"], runs, parts["target"], parts["picks"])
    b.append(Heading("Plots"))
    b += [Image(fname, title) for fname, title, *_ in parts["plots"]]
    flagged = parts["flagged"]
    b += [Heading("Quality flags"),
          Table.of(flags_table(flagged)) if len(flagged) else Para("None.")]
    failed_tab = failure_table(runs)
    b += [Heading("Failed runs"), Table.of(failed_tab) if failed_tab[1] else Para("None.")]
    b += [Heading("Data"), Items([Link(f, f, f": {what}") for f, what in DATA_FILES
                                  if f in parts["files"]]
                           + [Link("../runs.csv", "../runs.csv", ": one row per run")])]
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


RefSet = tuple[Sequence[Reference], Locate]


def _check_all(references: Sequence[RefSet], table: pd.DataFrame, system: str
               ) -> pd.DataFrame:
    frames = [check_references(refs, table, system, locate) for refs, locate in references
              if refs]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else check_references(
        [], table, system, lambda loc: "")


def build_report(study_dir: Path, name: str, description: str, scaling: str,
                 runs: pd.DataFrame, table: pd.DataFrame, *,
                 options: ReportOptions | None = None, references: Sequence[RefSet] = (),
                 system: str = "", cores_per_host: int | None = None,
                 one_host: bool = False, target: Target | None = None) -> Report:
    """Analyse, check references and write `report/` atomically. `cores_per_host`:
    the cores of one host (None: unknown, oversubscription is not checked); `one_host`:
    every rank of every run ran on one host (the local system)."""
    options = options or ReportOptions()
    table = host_view(table, cores_per_host, one_host)
    study_dir = Path(study_dir)
    study_dir.mkdir(parents=True, exist_ok=True)
    date = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z").strip()
    fits, points, preds = model_study(table, scaling, options.latency, options.bandwidth,
                                      options.max_nodes)
    preds = qualified(fits, preds)  # only what passes the rule is shown
    model_frame = pd.concat([points.assign(kind="measured"), preds.assign(kind="predicted")],
                            ignore_index=True)
    checks = _check_all(references, table, system)  # with no runs, every reference fails
    bounds = ring_bounds(table, fits)
    parts: dict[str, Any] = {
        "fits": fits, "points": points, "preds": preds, "checks": checks, "bounds": bounds,
        "flagged": flagged_runs(completed_runs(runs), options.thresholds),
        "found": findings(table, runs, scaling, fits, points, bounds),
        "headline": headline(table, scaling, fits, points, preds),
        "hosts": (cores_per_host, one_host), "plots": _plots(table, model_frame, fits),
        "costs": costs_of(table, target, preds), "target": target,
        "measured_on": measured_on(system, runs, cores_per_host, one_host)}
    parts["picks"] = pick_sentences(parts["costs"], options.deadline_s,
                                    options.budget_node_hours)
    parts["findings"] = [*parts["picks"], *parts["found"].all]
    csvs: dict[str, pd.DataFrame] = {
        "scaling.csv": table, "failures.csv": failures(runs), "model_fit.csv": fits,
        "model_points.csv": model_frame, "model_predictions.csv": preds,
        "flags.csv": parts["flagged"], "ring_bound.csv": parts["bounds"],
        "cost.csv": parts["costs"]}
    if any(p[0] == "heatmap.png" for p in parts["plots"]):
        csvs["heatmap.csv"] = heatmap_data(table).reset_index()
    if len(checks):
        csvs["references.csv"] = checks
    parts["files"] = {*csvs, "summary.json"}
    summary = summary_dict(name, scaling, date, runs, table, parts)
    tmp = Path(tempfile.mkdtemp(prefix="report.tmp", dir=study_dir))
    try:
        tmp.chmod(0o755)
        images = {fname: render_png(draw, frame, f"{name}: {title}, {scaling} scaling "
                                    f"({date})")
                  for fname, title, draw, frame, _ in parts["plots"]}
        if len(parts["costs"]):
            images["cost.png"] = render_png(plot_cost, parts["costs"], f"{name}: time to "
                                            f"solution vs node-hours ({date})")
        for fname, data in images.items():
            (tmp / fname).write_bytes(data)
        for fname, frame in csvs.items():
            frame.to_csv(tmp / fname, index=False)
        (tmp / "summary.json").write_text(dump(summary), encoding="utf-8")
        blocks = _blocks(name, description, scaling, date, runs, table, options, parts)
        (tmp / "index.md").write_text(markdown(blocks), encoding="utf-8")
        (tmp / "index.html").write_text(
            html_page(blocks, f"Scaling study: {name}", f"{name}, {date}", images),
            encoding="utf-8")
        _swap_in(tmp, study_dir / "report")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Report(html=study_dir / "report" / "index.html", table=table, checks=checks,
                  summary=summary)


def write_report(study_dir: Path, name: str, description: str, scaling: str,
                 runs: pd.DataFrame, table: pd.DataFrame, **kw: Any) -> Path:
    """`build_report` and return the path of index.html."""
    return build_report(study_dir, name, description, scaling, runs, table, **kw).html
