"""The study report: Markdown and self-contained HTML, PNG plots, CSV of the data, and
a JSON summary.

The report is built as a list of blocks (headings, paragraphs, lists, tables, images)
that render to Markdown and to HTML the same way. `build_report` writes everything in
a temporary directory and swaps it in at the end, so a crash never leaves half a
report. See docs/report.md for what each section means.
"""

from __future__ import annotations

import base64
import html
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from scalestudy.analyze import Baseline, completed_runs, failures
from scalestudy.collect import STATES
from scalestudy.commmodel import MAX_NODES, model_study, ring_bounds
from scalestudy.findings import findings
from scalestudy.plots import (
    Draw,
    heatmap_data,
    plot_comm_overhead,
    plot_efficiency,
    plot_heatmap,
    plot_model,
    plot_per_gpu_vs_batch,
    plot_throughput,
    plot_variants,
    render_png,
)
from scalestudy.quality import Thresholds, flagged_runs
from scalestudy.references import Locate, check_references
from scalestudy.reporttables import (
    bound_table,
    failure_table,
    fit_table,
    flags_table,
    group_tables,
    prediction_table,
    reference_table,
    residual_table,
)
from scalestudy.spec import Reference

__all__ = ["Report", "ReportOptions", "build_report", "plot_efficiency", "plot_throughput",
           "render_png", "write_report"]
Block = tuple[str, Any]


@dataclass(frozen=True)
class ReportOptions:
    """How the report analyses: baseline, flag thresholds, the model's terms and reach."""

    baseline: Baseline = "smallest"
    thresholds: Thresholds = field(default_factory=Thresholds)
    latency: str = "log"
    bandwidth: str = "fit"
    max_nodes: int = MAX_NODES


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


def _definitions(scaling: str, options: ReportOptions) -> str:
    fixed = ("per-GPU batch fixed, global batch grows with the GPUs" if scaling == "weak"
             else "global batch fixed, per-GPU batch shrinks with the GPUs")
    return (f"{scaling.capitalize()} scaling ({fixed}). Throughput is images/s over all "
            "GPUs, median over repeats, [min–max] over repeats. Speedup = throughput(P) / "
            "throughput(P0); efficiency = (throughput(P) / P) / (throughput(P0) / P0), P0 = "
            f"the baseline (asked for: {options.baseline}). "
            + options.thresholds.describe())


MODEL_TEXT = ("Step time t(P) = a·b(P) + 2(P−1)/P·S/B + α·L(P): compute (b = per-GPU batch), "
              "ring allreduce of S gradient bytes at bus bandwidth B, latency α per {lat}. "
              "Measured step time = global batch / throughput. Fitted by non-negative least "
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


def _blocks(name: str, description: str, scaling: str, date: str, runs: pd.DataFrame,
            table: pd.DataFrame, options: ReportOptions, parts: dict[str, Any]) -> list[Block]:
    b: list[Block] = [("h1", f"Scaling study: {name}"),
                      ("note", f"Generated {date}. {run_counts(runs)}.")]
    b += [("p", p.strip()) for p in description.split("\n\n") if p.strip()]
    b.append(("note", _definitions(scaling, options)))
    b += [("h2", "Findings"), ("ul", parts["findings"] or ["No completed runs yet."])]
    if table.empty:
        b.append(("p", "No completed runs yet: nothing to analyse."))
    for group, note, tab in group_tables(table):
        b += [("h2", group), ("note", note), ("table", tab)]
    checks = parts["checks"]
    if len(checks):
        failed = int((checks["result"] == "fail").sum())
        b += [("h2", "References"),
              ("p", f"{len(checks) - failed} passed, {failed} failed."),
              ("table", reference_table(checks))]
    if not table.empty:
        b += [("h2", "Communication model"),
              ("note", MODEL_TEXT.format(lat="log2 P" if options.latency == "log"
                                         else "extra rank (P − 1)")),
              ("table", fit_table(parts["fits"]))]
        if len(parts["points"]):
            b += [("h3", "Residuals"), ("table", residual_table(parts["points"]))]
        if len(parts["bounds"]):
            b += [("h3", "Ring allreduce bound"), ("note", BOUND_TEXT),
                  ("table", bound_table(parts["bounds"]))]
        if len(parts["preds"]):
            b += [("h3", f"Predictions (up to {options.max_nodes:,} nodes)"),
                  ("table", prediction_table(parts["preds"]))]
    b.append(("h2", "Plots"))
    b += [("img", (fname, title)) for fname, title, *_ in parts["plots"]]
    flagged = parts["flagged"]
    b += [("h2", "Quality flags"),
          ("table", flags_table(flagged)) if len(flagged) else ("p", "None.")]
    failed_tab = failure_table(runs)
    b += [("h2", "Failed runs"), ("table", failed_tab) if failed_tab[1] else ("p", "None.")]
    b += [("h2", "Data"), ("ul", [f"[{f}]({f}): {what}" for f, what in DATA_FILES
                                  if f in parts["files"]] + ["[../runs.csv](../runs.csv): "
                                                            "one row per run"])]
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
    ("summary.json", "the summary `scalestudy report --json` prints"),
)


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").strip()


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(_md_cell(h) for h in headers) + " |",
             "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def markdown(blocks: list[Block]) -> str:
    """The blocks as Markdown (images as links to the PNG files next to it)."""
    out = []
    for kind, value in blocks:
        if kind in ("h1", "h2", "h3"):
            out.append("#" * int(kind[1]) + " " + value)
        elif kind == "note":
            out.append(f"_{value}_" if value.startswith("Generated") else value)
        elif kind == "p":
            out.append(value)
        elif kind == "ul":
            out.append("\n".join(f"- {item}" for item in value))
        elif kind == "table":
            out.append(_md_table(*value))
        elif kind == "img":
            out.append(f"![{value[1]}]({value[0]})")
        out.append("")
    return "\n".join(out)


CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;
color:#222}table{border-collapse:collapse;margin:.5em 0 1.5em}th,td{border:1px solid #ccc;
padding:.25em .6em;text-align:right}th{background:#f3f3f3}td:first-child{text-align:left}
img{max-width:100%}.note{color:#555}figure{margin:1em 0}.fail{color:#b00;font-weight:bold}
.pass{color:#070}"""


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in headers)

    def cell(c: str) -> str:
        cls = {"FAIL": ' class="fail"', "PASS": ' class="pass"'}.get(c, "")
        return f"<td{cls}>{e(c)}</td>"

    body = "".join("<tr>" + "".join(cell(c) for c in row) + "</tr>\n" for row in rows)
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody>\n</table>"


def _html_link(item: str) -> str:
    """`[a](b): text` -> an escaped anchor (the Data list)."""
    if item.startswith("[") and "](" in item:
        label, rest = item[1:].split("](", 1)
        target, text = rest.split(")", 1)
        return f'<a href="{html.escape(target)}">{html.escape(label)}</a>{html.escape(text)}'
    return html.escape(item)


def html_page(blocks: list[Block], title: str, caption: str, images: dict[str, bytes]) -> str:
    """The blocks as one self-contained HTML page (PNG images inlined as data URIs)."""
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{e(title)}</title><style>{CSS}</style></head><body>"]
    for kind, value in blocks:
        if kind in ("h1", "h2", "h3"):
            out.append(f"<{kind}>{e(value)}</{kind}>")
        elif kind in ("note", "p"):
            out.append(f'<p class="note">{e(value)}</p>' if kind == "note"
                       else f"<p>{e(value)}</p>")
        elif kind == "ul":
            out.append("<ul>" + "".join(f"<li>{_html_link(i)}</li>" for i in value) + "</ul>")
        elif kind == "table":
            out.append(_html_table(*value))
        elif kind == "img":
            data = base64.b64encode(images[value[0]]).decode("ascii")
            out.append(f'<figure><img alt="{e(value[1])}" src="data:image/png;base64,{data}">'
                       f"<figcaption>{e(value[1])}: {e(caption)}</figcaption></figure>")
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
                 system: str = "") -> Report:
    """Analyse, check references and write `report/` atomically."""
    from scalestudy.summary import summary_dict

    options = options or ReportOptions()
    study_dir = Path(study_dir)
    study_dir.mkdir(parents=True, exist_ok=True)
    date = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z").strip()
    fits, points, preds = model_study(table, scaling, options.latency, options.bandwidth,
                                      options.max_nodes)
    model_frame = pd.concat([points.assign(kind="measured"), preds.assign(
        kind="predicted", step_time_fitted=preds["global_batch"] / preds[
            "throughput_predicted"])], ignore_index=True)
    checks = _check_all(references, table, system)  # with no runs, every reference fails
    bounds = ring_bounds(table, fits)
    parts: dict[str, Any] = {
        "fits": fits, "points": points, "preds": preds, "checks": checks, "bounds": bounds,
        "flagged": flagged_runs(completed_runs(runs), options.thresholds),
        "findings": findings(table, runs, scaling, fits, points, preds, bounds),
        "plots": _plots(table, model_frame, fits)}
    csvs: dict[str, pd.DataFrame] = {
        "scaling.csv": table, "failures.csv": failures(runs), "model_fit.csv": fits,
        "model_points.csv": model_frame, "model_predictions.csv": preds,
        "flags.csv": parts["flagged"], "ring_bound.csv": parts["bounds"]}
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
        for fname, data in images.items():
            (tmp / fname).write_bytes(data)
        for fname, frame in csvs.items():
            frame.to_csv(tmp / fname, index=False)
        from scalestudy.summary import dump

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


def report_study(plan: Any, options: ReportOptions | None = None,
                 references_file: Path | None = None) -> Report:
    """Collect a planned study, analyse it and write its report; the references are
    the study's own `references:` plus those of `references_file`."""
    from scalestudy.analyze import scaling_table
    from scalestudy.references import load_references
    from scalestudy.runner import collect

    options = options or ReportOptions()
    study = plan.study
    refs: list[RefSet] = [(study.references, study.line_of)]
    if references_file is not None:
        refs.append(load_references(references_file))
    runs = collect(plan)
    table = scaling_table(runs, study.scaling, options.baseline, options.thresholds)
    return build_report(plan.directory, study.name, study.description, study.scaling, runs,
                        table, options=options, references=refs, system=study.system)


def options_from(baseline: str, straggler: float, max_cv: float, min_iters: int,
                 latency: str, bandwidth: str, max_nodes: int) -> ReportOptions:
    """Report options from command-line values, or a ScalestudyError saying which is wrong."""
    from scalestudy.analyze import parse_baseline
    from scalestudy.commmodel import BANDWIDTHS, LATENCY_TERMS
    from scalestudy.errors import ScalestudyError

    problems = []
    try:
        chosen = parse_baseline(baseline)
    except ValueError as exc:
        problems.append(f"--baseline: {exc}")
    if not 0 < straggler < 1:
        problems.append(f"--straggler: a fraction between 0 and 1, e.g. 0.1; got {straggler}")
    if not max_cv > 0:
        problems.append(f"--max-cv: a positive fraction, e.g. 0.05; got {max_cv}")
    if min_iters < 1:
        problems.append(f"--min-iters: at least 1; got {min_iters}")
    if latency not in LATENCY_TERMS:
        problems.append(f"--latency: one of {', '.join(LATENCY_TERMS)}; got {latency!r}")
    if bandwidth not in BANDWIDTHS:
        problems.append(f"--bandwidth: one of {', '.join(BANDWIDTHS)}; got {bandwidth!r}")
    if max_nodes < 1:
        problems.append(f"--max-nodes: at least 1; got {max_nodes}")
    if problems:
        raise ScalestudyError("\n".join(problems))
    return ReportOptions(baseline=chosen, thresholds=Thresholds(straggler, max_cv, min_iters),
                         latency=latency, bandwidth=bandwidth, max_nodes=max_nodes)
