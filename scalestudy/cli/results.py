"""Commands that read what a study measured: collect, report, compare; and the spec's
schema and the site profiles."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from scalestudy import study as uc
from scalestudy.cli.app import JsonOpt, ResultsOpt, StudyArg, app, err, out, print_json
from scalestudy.cli.predict_target import to_target_command, wall_ask
from scalestudy.core.choices import Bandwidth, Latency, parse_baseline
from scalestudy.core.errors import ReferenceFailed, ScalestudyError
from scalestudy.core.load import study_schema
from scalestudy.results.analysis import columns as col
from scalestudy.site.profiles import available, load_system

if TYPE_CHECKING:
    from scalestudy.results.analysis.forecast_records import ScaleCost


@app.command()
def collect(study: StudyArg, as_json: JsonOpt = False,
            results: ResultsOpt = Path("results")) -> None:
    """Gather every run's record into results/<study>/runs.csv."""
    plan = uc.make_plan(study, results)
    runs = uc.collect(plan)
    counts = {str(k): int(v) for k, v in runs[col.STATE].value_counts().items()}
    if as_json:
        print_json({"runs_csv": str(plan.directory / "runs.csv"), "runs": len(runs), **counts})
        return
    out.print(f"{plan.directory / 'runs.csv'}: {len(runs)} runs ("
              + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + ")",
              highlight=False)


def _fraction(value: float) -> float:
    if not 0 < value < 1:
        raise typer.BadParameter(f"a fraction between 0 and 1 (e.g. 0.1), got {value}")
    return value


def _positive(value: float) -> float:
    if not value > 0:
        raise typer.BadParameter(f"a positive fraction (e.g. 0.05), got {value}")
    return value


def _duration(value: str | None) -> str | None:
    """Check a --deadline before anything runs."""
    if value is not None:
        _seconds(value)
    return value


def _seconds(value: str | None) -> float | None:
    from scalestudy.results.analysis.cost import parse_duration

    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _baseline(text: str) -> str | int:

    try:
        return parse_baseline(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


@app.command()
def report(
    study: StudyArg,
    results: ResultsOpt = Path("results"),
    as_json: JsonOpt = False,
    baseline: Annotated[str, typer.Option(
        "--baseline", parser=_baseline, metavar="smallest|node|N",
        help="efficiency baseline: the smallest world size, one full node, or a world "
        "size N")] = "smallest",
    references: Annotated[Path | None, typer.Option(
        "--references", help="YAML file of reference values, checked with the study's own")
    ] = None,
    check: Annotated[bool, typer.Option(
        "--check", help="exit 1 when a reference check fails (for CI)")] = False,
    straggler: Annotated[float, typer.Option(
        callback=_fraction, help="flag a run whose slowest rank is this fraction (0-1) "
        "below the mean rank")] = 0.10,
    max_cv: Annotated[float, typer.Option(
        callback=_positive, help="flag a coefficient of variation (iteration times, "
        "repeats) above this")] = 0.05,
    min_iters: Annotated[int, typer.Option(
        min=1, help="flag a run with fewer timed iterations")] = 10,
    latency: Annotated[Latency, typer.Option(
        help="the model's latency term: log2 P (tree) or P - 1 (ring)")] = Latency.LOG,
    bandwidth: Annotated[Bandwidth, typer.Option(
        help="the model's bandwidth: fitted, or the allreduce probe's busbw")] = Bandwidth.FIT,
    max_nodes: Annotated[int, typer.Option(min=1, help="predict up to this many nodes")] = 1024,
    deadline: Annotated[str | None, typer.Option(
        "--deadline", callback=_duration, help="name the cheapest point (node-hours) that "
        "trains within this time, e.g. 6h, 90min, 2d; with a target, the time to the "
        "target, among measured and forecast points, its interval's long end included")
    ] = None,
    budget: Annotated[float | None, typer.Option(
        "--budget", min=0.0, help="name the fastest point within this many node-hours; "
        "with a target, node-hours to the target, among measured and forecast points")
    ] = None,
) -> None:
    """Analyse the runs and write the report (tables, plots, model, references).

    Collects first; --check exits 1 when a reference check fails."""
    from scalestudy.report.terminal import scaling_rich_table
    from scalestudy.results.analysis.quality import Thresholds
    from scalestudy.results.analysis.references import failed_lines
    from scalestudy.results.analysis.study import AnalysisOptions
    from scalestudy.results.analysis.summary import dump
    from scalestudy.results.analysis.totarget import sentence as to_target_sentence

    options = AnalysisOptions(baseline=baseline, thresholds=Thresholds(straggler, max_cv,
                                                                      min_iters),
                            latency=latency, bandwidth=bandwidth, max_nodes=max_nodes,
                            deadline_s=_seconds(deadline), budget_node_hours=budget)
    plan = uc.make_plan(study, results)
    rep = uc.report(plan, options, references)
    got = rep.analysis
    if as_json:
        sys.stdout.write(dump(got.summary))
    else:
        out.print(scaling_rich_table(got.table, plan.study.name, out.width))
        if len(got.checks):
            out.print(f"references: {len(got.checks) - got.failed_checks} passed, "
                      f"{got.failed_checks} failed")
        for line in got.picks:
            out.print(line, highlight=False)
        if len(got.to_target):
            out.print(to_target_sentence(got.to_target), highlight=False)
        out.print(f"report: {rep.html}", highlight=False)
    if rep.stored:
        err.print(rep.stored, highlight=False, markup=False)
    if check and got.failed_checks:
        raise ReferenceFailed(f"{got.failed_checks} reference check(s) failed:\n"
                              + "\n".join(failed_lines(got.checks)))
    if check and not len(got.checks):
        err.print("note: --check: the study declares no references and none were given "
                  "(--references FILE); nothing was checked", markup=False)


@app.command()
def compare(
    a: Annotated[Path, typer.Argument(
        help="study A: a spec (.yaml), a results directory, or history:NAME (a study or "
        "imported results in the results store)", show_default=False)],
    b: Annotated[Path, typer.Argument(help="study B: the same kinds as A",
                                      show_default=False)],
    out_dir: Annotated[Path | None, typer.Option(
        "--out", help="where compare.md/.csv/.png go [default: results/compare-A-vs-B]")
    ] = None,
    as_json: JsonOpt = False,
    results: ResultsOpt = Path("results"),
) -> None:
    """Compare two studies of the same scaling mode point by point (B / A ratios)."""
    from scalestudy.report.tables import compare_table
    from scalestudy.report.terminal import text_table
    from scalestudy.results.analysis.summary import records

    got = uc.compare(a, b, out_dir, results)
    if as_json:
        print_json({"a": got.names[0], "b": got.names[1], "differs": got.differs,
               "out": str(got.out), "points": records(got.frame)})
        return
    caption = "; ".join(f"{k}: A {va}, B {vb}" for k, (va, vb) in got.differs.items())
    from scalestudy.results.analysis.efficiency import unit_of

    out.print(text_table(f"{a} vs {b}: throughput ({unit_of(got.frame)}, all GPUs, [band] "
                         "(repeats)) and efficiency",
                         *compare_table(got.frame), caption, out.width))
    out.print(f"comparison: {got.out / 'compare.md'}", highlight=False)


def _scales(value: str | None) -> list[int] | None:
    """`--gpus 64,128` as whole numbers (a usage error otherwise)."""
    if value is None:
        return None
    try:
        numbers = [int(v) for v in value.replace(" ", "").split(",") if v]
    except ValueError:
        raise typer.BadParameter(f"{value!r}: give whole numbers joined by commas, e.g. "
                                 "64,128,256") from None
    if not numbers or min(numbers) < 1:
        raise typer.BadParameter(f"{value!r}: give whole numbers above 0, e.g. 64,128")
    return numbers


@app.command()
def predict(
    source: Annotated[str, typer.Argument(
        help="measured points: a CSV table (gpus,throughput[,nodes,gpus_per_node,"
        "per_gpu_batch,global_batch,unit,per_gpu,tp,pp,microbatches]), a study (spec or "
        "results directory) "
        "or history:NAME", show_default=False)],
    gpus: Annotated[str | None, typer.Option(
        "--gpus", help="the GPU counts to forecast, e.g. 64,128,256", show_default=False)
    ] = None,
    nodes: Annotated[str | None, typer.Option(
        "--nodes", help="the node counts to forecast (with the points' GPUs per node)",
        show_default=False)] = None,
    group: Annotated[str | None, typer.Option(
        help="the study's group to forecast, where it has several")] = None,
    level: Annotated[float, typer.Option(
        callback=_fraction, help="the intervals' level")] = 0.9,
    system: Annotated[str | None, typer.Option(
        help="a table's system, to keep its forecasts in the ledger (a study's is known)")
    ] = None,
    model: Annotated[str | None, typer.Option(
        help="a table's model, to score its forecasts against that model's runs")] = None,
    store: Annotated[str | None, typer.Option(
        "--store", help="the results store that keeps the ledger [default: "
        "$SCALESTUDY_STORE, else ~/.local/state/scalestudy/history.sqlite]",
        show_default=False)] = None,
    beyond: Annotated[bool, typer.Option(
        "--beyond", help="forecast past 8× the largest measured scale (or global batch, "
        "with --to-target) or the system's max_nodes, flagged as a rough guide (and not "
        "kept), instead of refusing")] = False,
    to_target: Annotated[bool, typer.Option(
        "--to-target", help="forecast the samples (or epochs) to the target instead, from "
        "a CSV of runs: global_batch,samples_to_target (or epochs_to_target)")] = False,
    batches: Annotated[str | None, typer.Option(
        "--batches", help="with --to-target: the global batches to forecast, e.g. "
        "1024,4096", show_default=False)] = None,
    save_s: Annotated[float | None, typer.Option(
        "--checkpoint-save-s", min=0, help="with --to-target: the seconds a checkpoint "
        "blocks training; adds the wall clock with checkpoints and failures (needs "
        "--nodes and --throughput, one per batch)", show_default=False)] = None,
    throughput: Annotated[str | None, typer.Option(
        "--throughput", help="with --checkpoint-save-s: samples/s at each batch, e.g. "
        "5000,18000", show_default=False)] = None,
    per_node_hour: Annotated[float | None, typer.Option(
        "--failures-per-node-hour", min=0, help="with --checkpoint-save-s: the failure "
        "rate [default: --system's, from the results store]", show_default=False)] = None,
    startup_s: Annotated[float | None, typer.Option(
        "--startup-s", min=0, help="with --checkpoint-save-s: a job's start-up seconds "
        "[default: 0, said]", show_default=False)] = None,
    queue_wait_s: Annotated[float | None, typer.Option(
        "--queue-wait-s", min=0, help="with --checkpoint-save-s: a restart's queue wait "
        "[default: --system's median from the store, else 0, said]", show_default=False)
    ] = None,
    as_json: JsonOpt = False,
    results: ResultsOpt = Path("results"),
) -> None:
    """Forecast the throughput at scales not measured, each with its interval.

    Each forecast names the model and the points it came from (docs/forecast.md)."""
    from scalestudy.report.tables import num
    from scalestudy.report.terminal import text_table
    from scalestudy.study.predict import predict as forecast

    if to_target or batches is not None:
        wall = wall_ask(save_s, nodes, throughput, per_node_hour, startup_s, queue_wait_s,
                        system, store)
        to_target_command(source, batches, level, as_json, to_target,
                          gpus or (nodes if wall is None else None), beyond, wall)
        return
    if save_s is not None or throughput is not None:
        raise ScalestudyError("--checkpoint-save-s and --throughput go with --to-target")
    got = forecast(source, gpus=_scales(gpus), nodes=_scales(nodes), group=group,
                   level=level, results=results, system=system, model=model, store=store,
                   beyond=beyond)
    if as_json:
        print_json({"predictions": [p.as_dict() for p in got.predictions],
                    "model": got.model, "fitted_on": got.fitted_on, "costs": got.costs})
        return
    unit = got.predictions[0].unit if got.predictions else ""
    costs = {c[col.GPUS]: c for c in got.costs}
    rows = [[f"{p.gpus:,}", f"{p.nodes:,}" if p.nodes else "?",
             f"{num(p.throughput)} [{num(p.low)}–{num(p.high)}]", f"{p.efficiency:.1%}",
             (f"{p.step_s * 1e3:,.4g} ms = {p.compute_s * 1e3:,.4g} + {p.comm_s * 1e3:,.4g}"
              if p.split else f"{p.step_s * 1e3:,.4g} ms (split n/a)"),
             f"{p.extrapolation:.3g}×" + (" (beyond: rough guide)" if p.limit else ""),
             *([_cost_cell(costs.get(p.gpus))] if costs else [])]
            for p in got.predictions]
    level_pct = f"{got.predictions[0].level:.0%}" if got.predictions else ""
    of = f" ({got.costs[0]['of']})" if got.costs else ""
    out.print(text_table(
        f"forecast from {got.model['source']}",
        ["GPUs", "nodes", f"{unit} [{level_pct} interval]", "efficiency",
         "step = compute + comm", "beyond measured",
         *([f"time, node-hours{of}"] if costs else [])], rows,
        f"model: {got.model['form']} ({got.model['terms']}); chosen: "
        f"{got.model['chosen_by']}; read as {got.model['reading']}; interval: "
        f"{got.model['interval']}; {got.model['split']}; fitted on "
        + ", ".join(str(p[col.GPUS]) for p in got.fitted_on) + " GPUs"
        + "".join(f"; {p.limit}" for p in got.predictions if p.limit), out.width))
    err.print(f"ledger: {got.model['ledger']}", highlight=False)


def _cost_cell(cost: ScaleCost | None) -> str:
    """`2.1 h [1.9–2.4], 34 node-h [31–38]` for one forecast scale."""
    if cost is None:
        return "n/a"
    hours = [cost[k] / 3600 for k in ("time_s", "time_s_low", "time_s_high")]
    nh = [cost[k] for k in ("node_hours", "node_hours_low", "node_hours_high")]
    return (f"{hours[0]:,.3g} h [{hours[1]:,.3g}–{hours[2]:,.3g}], "
            f"{nh[0]:,.3g} node-h [{nh[1]:,.3g}–{nh[2]:,.3g}]")


@app.command()
def schema() -> None:
    """Print the JSON Schema of a study spec (for editors and validators)."""

    print_json(study_schema())


@app.command()
def systems(
    name: Annotated[str | None, typer.Argument(
        help="a profile to show whole (a shipped name or a .yaml path)", show_default=False)
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """List the site profiles shipped with scalestudy, or show one."""

    if name is not None:
        profile = load_system(name).model_dump(mode="json")
        if as_json:
            print_json(profile)
        else:
            import yaml

            print(yaml.safe_dump(profile, sort_keys=False), end="")
        return
    profiles = [load_system(n) for n in available()]
    if as_json:
        print_json([{"name": p.name, "scheduler": p.scheduler, "launcher": p.launcher,
                "gpus_per_node": p.gpus_per_node, "description": p.description}
               for p in profiles])
        return
    for p in profiles:
        print(f"{p.name:16} {p.scheduler:6} {p.launcher:9} {p.description}")


