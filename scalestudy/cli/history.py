"""`scalestudy history`: what the results store holds over time, and `history ingest`."""

from __future__ import annotations

import statistics
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated

import typer

from scalestudy.cli.app import JsonOpt, app, err, out, print_json
from scalestudy.core.errors import RegressionFound, ScalestudyError
from scalestudy.core.values import member
from scalestudy.execute.workspace import write_text_atomic
from scalestudy.results.analysis import columns as col
from scalestudy.results.history.regression import work_of
from scalestudy.results.history.rows import AttemptRow
from scalestudy.study import imports as imported

history_app = typer.Typer(help="The results store: every study's runs over time "
                          "(SQLite by default; a team's PostgreSQL with --store)",
                          no_args_is_help=False, invoke_without_command=True)
app.add_typer(history_app, name="history")

StoreOpt = Annotated[str | None, typer.Option(
    "--store", help="the results store: a SQLAlchemy URL (postgresql+psycopg://...) or a "
    "SQLite file [default: $SCALESTUDY_STORE, else ~/.local/state/scalestudy/history.sqlite]",
    show_default=False)]


@history_app.callback()
def history(
    ctx: typer.Context,
    system: Annotated[str | None, typer.Option(help="only this system")] = None,
    model: Annotated[str | None, typer.Option(help="only this model")] = None,
    since: Annotated[str | None, typer.Option(help="only runs ended since, e.g. 30d, 12h")
                     ] = None,
    tag: Annotated[str | None, typer.Option(help="only runs with this tag")] = None,
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """List the studies and points the store holds, oldest first."""
    if ctx.invoked_subcommand is not None:
        return
    from scalestudy.study import history as uc

    rows = uc.history(store, system=system, model=model, since_text=since, tag=tag)
    if as_json:
        print_json(rows)
        return
    if not rows:
        err.print("the store holds no runs that match; `scalestudy history ingest results/` "
                  "adds the studies there", highlight=False)
        return
    from scalestudy.report.terminal import text_table

    out.print(text_table("studies", ["study", "source", "system", "tags", "campaigns",
                                     "ended", "completed", "failed"], _studies(rows),
                         width=out.width))
    out.print(text_table("points over time (median of each campaign's repeats)",
                         ["point", "study", "campaign", "ended", "repeats", "value", "unit"],
                         _points(rows), width=out.width))
    boxes = _containers(rows)
    if boxes:
        out.print(text_table("containers the ranks ran in", ["study", "campaign", "image",
                                                             "runtime", "digest", "runs"],
                             boxes, width=out.width))


@history_app.command("ingest")
def ingest(directories: Annotated[list[Path], typer.Argument(
        help="results/<study> directories, or results directories")],
        store: StoreOpt = None) -> None:
    """Add studies' runs to the store (again: the same rows; a lost store comes back)."""
    from scalestudy.study import history as uc

    done = uc.ingest(directories, store)
    studies = [d for d in done if d.directory.parent.name != imported.IMPORTS]
    for item in done:
        what = "run attempt(s)" if item in studies else "imported measurement(s)"
        out.print(f"{item.directory}: {item.attempts} {what}", highlight=False)
    out.print(f"ingested {sum(d.attempts for d in studies)} run attempt(s) of {len(studies)} "
              f"study(ies) and {len(done) - len(studies)} kept import(s)")


def _studies(rows: list[AttemptRow]) -> list[list[str]]:
    from scalestudy.results.history.store import campaign_of

    by: dict[str, list[AttemptRow]] = {}
    for r in rows:
        by.setdefault(str(r[col.DIRECTORY]), []).append(r)
    table = []
    for items in by.values():
        tags = sorted({t for r in items for t in r[col.TAGS] or []})
        ended = [e for r in items if (e := r[col.ENDED]) is not None]
        table.append([str(items[0][col.STUDY]), str(items[0].get(col.SOURCE) or "scalestudy"),
                      str(items[0][col.SYSTEM] or "?"), ",".join(tags) or "-",
                      str(len({campaign_of(r) for r in items})),
                      _when(max(ended)) if ended else "?",
                      str(sum(r[col.STATE] == "completed" for r in items)),
                      str(sum(r[col.STATE] == "failed" for r in items))])
    return table


def _points(rows: list[AttemptRow]) -> list[list[str]]:
    from scalestudy.results.history.store import campaign_of

    by: dict[tuple[str, str, str, str], list[AttemptRow]] = {}
    for r in rows:
        if _value(r) is None:
            continue
        key = (_point_name(r), str(r[col.DIRECTORY]), campaign_of(r), ",".join(r[col.TAGS] or []))
        by.setdefault(key, []).append(r)
    table = []
    for (point, _, campaign, tags), items in by.items():
        ends = [e for r in items if (e := r[col.ENDED]) is not None]
        ended = max(ends) if ends else "?"
        value = statistics.median(v for v in map(_value, items) if v is not None)
        unit = str(items[0][col.UNIT]) + ("" if items[0][col.THROUGHPUT_PER_GPU] is None
                                        else " per GPU")
        table.append([point, str(items[0][col.STUDY]) + (f" [{tags}]" if tags else ""),
                      campaign, _when(ended), str(len(items)), f"{value:,.4g}", unit])
    return table


def _containers(rows: list[AttemptRow]) -> list[list[str]]:
    """Per study, campaign and image: the runtime (and its version) and the digest."""
    from scalestudy.results.history.store import campaign_of

    seen: dict[tuple[str, str, str, str, str], int] = {}
    for r in rows:
        prov = member(r, col.PROVENANCE)
        conf, versions = member(prov, "configuration"), member(prov, "versions")
        if not conf.get("container"):
            continue
        runtime = " ".join(str(x) for x in (conf.get("container_runtime"),
                                            versions.get("container_runtime")) if x)
        key = (str(r[col.STUDY]), campaign_of(r), str(conf["container"]), runtime or "?",
               str(conf.get("container_digest") or "not read"))
        seen[key] = seen.get(key, 0) + 1
    return [[*key, str(n)] for key, n in seen.items()]


def _value(row: AttemptRow) -> float | None:
    """Per-GPU throughput; for an imported measurement that is not one, its value."""
    per_gpu = row[col.THROUGHPUT_PER_GPU]
    if per_gpu is not None:
        return float(per_gpu)
    value = member(row, col.METRICS).get("value")
    return float(value) if row.get(col.SOURCE, "scalestudy") != "scalestudy" \
        and isinstance(value, (int, float)) else None


def _point_name(row: AttemptRow) -> str:
    if row.get(col.SOURCE, "scalestudy") == "scalestudy":

        work = " ".join(f"{k}={v}" for k, v in sorted(work_of(row).items())
                        if k not in ("system", "workload"))
        model = row[col.MODEL] or (row.get(col.PARAMS) or {}).get("workload") or "program"
        return (f"{model} {row['nodes']}x{row['ranks_per_node']} "
                f"b{row['batch_size']} {row['backend']}/{row['tuning']}"
                + (f" {work}" if work else ""))
    params = row.get(col.PARAMS) or {}
    return " ".join(f"{k} {v}" for k, v in params.items()) or str(row[col.RUN_ID])


def _when(moment: object) -> str:
    return moment.strftime("%Y-%m-%d %H:%M") if isinstance(moment, datetime) else str(moment)


@history_app.command("check")
def check(
    target: Annotated[str, typer.Argument(
        help="the study: its spec, its results directory, or its name in the store")],
    baseline_tag: Annotated[str | None, typer.Option(
        "--baseline-tag", help="compare with the runs of this tag")] = None,
    baseline_study: Annotated[str | None, typer.Option(
        "--baseline-study", help="compare with this earlier study (its name)")] = None,
    since: Annotated[str | None, typer.Option(
        help="compare with the study's own attempts of this window, e.g. 30d")] = None,
    alpha: Annotated[float, typer.Option(
        min=1e-9, max=0.5, help="significance level of the one-sided Welch test")] = 0.01,
    min_drop: Annotated[float, typer.Option(
        "--min-drop", min=0.0, max=1.0, help="smallest per-GPU throughput drop that counts "
        "(0.03: 3 %), whatever the test says")] = 0.03,
    junit: Annotated[Path | None, typer.Option(
        "--junit", help="also write the verdicts as JUnit XML (for CI systems)")] = None,
    as_json: JsonOpt = False,
    store: StoreOpt = None,
    results: Annotated[Path, typer.Option("--results", help="the results directory")
                       ] = Path("results"),
) -> None:
    """Compare the newest runs of each point with a baseline; exit 1 on a significant
    regression, named compute or communication, with what changed in the provenance."""
    from scalestudy.study import history as uc

    if sum(x is not None for x in (baseline_tag, baseline_study, since)) > 1:
        raise ScalestudyError("give one baseline: --baseline-tag, --baseline-study or --since")
    got = uc.check(target, store, baseline_tag=baseline_tag, baseline_study=baseline_study,
                   since_text=since, alpha=alpha, min_drop=min_drop, results=results)
    if junit is not None:

        write_text_atomic(junit, uc.junit(got))
    if as_json:
        print_json({"study": got.study, "against": got.against, "newest": got.newest,
                    "baseline": got.baseline,
                    "verdicts": [{**v.__dict__, "line": v.line()} for v in got.verdicts],
                    "changes": [{**c.as_dict(), "line": c.line()} for c in got.changes],
                    "notes": got.notes})
    else:
        out.print(f"{got.study}: {got.newest} newest completed run(s) against "
                  f"{got.against} ({got.baseline} completed)", highlight=False)
        for v in got.verdicts:
            out.print(v.line(), highlight=False, markup=False, soft_wrap=True)
    for note in got.notes:
        err.print(f"note: {note}", highlight=False, markup=False)
    if not any(v.status not in ("new", "unlike") for v in got.verdicts):
        err.print("note: no point was measured on both sides: nothing was compared",
                  highlight=False)
    undecided = [v for v in got.verdicts if v.status in ("not tested", "undecided")]
    unlike = [v for v in got.verdicts if v.status == "unlike"]
    if undecided:
        needed = max((v.needed or 2 for v in undecided), default=2)
        err.print(f"note: the gate cannot alarm at {len(undecided)} point(s) with these "
                  f"repeats (not tested or undecided): about {needed} repeats a side would "
                  "decide them (`repeats:` in the spec)", highlight=False)
    if unlike:
        err.print(f"note: {len(unlike)} point(s) left out: the baseline did other work "
                  "there (see `not compared`)", highlight=False)
    for c in got.changes:
        out.print(f"change point: {c.line()}", highlight=False, markup=False, soft_wrap=True)
    if got.regressions or got.alarms:
        raise RegressionFound(
            f"{len(got.regressions)} point(s) regressed, {len(got.alarms)} confirmed drop(s) "
            "in the series: " + "; ".join(
                [v.point + f" ({v.cause})" for v in got.regressions]
                + [f"{c.point} since {c.when:%Y-%m-%d} ({c.cause})" for c in got.alarms]))


@history_app.command("plot")
def plot(
    system: Annotated[str | None, typer.Option(help="only this system")] = None,
    model: Annotated[str | None, typer.Option(help="only this model")] = None,
    since: Annotated[str | None, typer.Option(help="only runs ended since, e.g. 90d")] = None,
    tag: Annotated[str | None, typer.Option(help="only runs with this tag")] = None,
    output: Annotated[Path, typer.Option("-o", "--output", help="the PNG to write")
                      ] = Path("history.png"),
    store: StoreOpt = None,
) -> None:
    """Draw per-GPU throughput and efficiency at each scale over time, with repeat bands,
    the provenance changes and the change points (`history changes`) marked."""
    from scalestudy.report.timeline_plot import draw_timeline
    from scalestudy.results.history.timeline import timeline
    from scalestudy.study import history as uc

    rows = uc.history(store, system=system, model=model, since_text=since, tag=tag)
    points, changes = timeline(rows)
    if points.empty:
        raise ScalestudyError("the store holds no completed runs that match: nothing to draw")
    title = "History" + "".join(f", {k} {v}" for k, v in (("system", system), ("model", model),
                                                          ("tag", tag), ("since", since)) if v)
    from scalestudy.results.history.changes import changes as change_points

    found = change_points(rows)
    left = draw_timeline(points, changes, title, output, found)
    for c in found:
        err.print(f"change point: {c.line()}", highlight=False, markup=False)
    for change in changes:
        err.print(f"provenance changed at {change.when:%Y-%m-%d %H:%M}: "
                  + ", ".join(change.what), highlight=False, markup=False)
    if left:
        err.print(f"note: {len(left)} group(s) not drawn (narrow with --model or --system): "
                  + ", ".join(left), highlight=False)
    out.print(f"plot: {output}", highlight=False)


@history_app.command("best")
def best(
    model: Annotated[str, typer.Option(help="the model (every study of it is searched)")],
    system: Annotated[str | None, typer.Option(help="only this system")] = None,
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """The fastest and the cheapest known configurations of a model: one time-versus-
    node-hours front over every alternative measured, in any study, with study and date."""
    from scalestudy.results.history.best import best_known
    from scalestudy.study import history as uc

    frame = best_known(uc.history(store, system=system, model=model))
    if frame.empty:
        raise ScalestudyError(f"the store holds no completed runs of model {model}"
                              + (f" on system {system}" if system else ""))
    if as_json:
        print_json(frame.to_dict(orient="records"))
        return
    from scalestudy.report.terminal import text_table
    from scalestudy.results.analysis.cost import hours

    for work, part in frame.groupby("work", sort=False):
        front = part[part["front"]]
        unit = str(part[col.UNIT].iloc[0]).removesuffix("/s")
        rows = [[f"{_count(r.nodes)} nodes ({_count(r.world_size)} GPUs), batch "
                 f"{_count(r.batch_size)}, {r.backend}/{r.tuning}", str(r.study),
                 _when(r.ended), str(r.repeats), hours(r.time_s),
                 "?" if r.node_hours is None else f"{r.node_hours:,.3g}"]
                for r in front.itertuples()]
        out.print(text_table(f"{work}: the front per million {unit} ({len(front)} of "
                             f"{len(part)} configurations; the rest are dominated)",
                             ["configuration", "study", "ended", "repeats", "time",
                              "node-hours"], rows, width=out.width))
        fastest, cheapest = front.iloc[0], front.iloc[-1]
        out.print(f"fastest: {fastest['study']} ({_when(fastest['ended'])}): "
                  f"{fastest['configuration']}; cheapest: {cheapest['study']} "
                  f"({_when(cheapest['ended'])}): {cheapest['configuration']}",
                  highlight=False, markup=False, soft_wrap=True)


def _count(value: object) -> str:
    """A count from a frame ("?" where unknown: an import made without --nodes)."""
    return "?" if value is None or value != value else str(int(value))  # type: ignore[call-overload]


@history_app.command("predictions")
def predictions(
    system: Annotated[str | None, typer.Option(help="only this system")] = None,
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """The prediction ledger: every forecast `predict` kept, scored where a later study
    measured its scale, and per system how often the intervals held."""
    from scalestudy.study import history as uc

    scores, totals = uc.predictions(store, system=system)
    if as_json:
        print_json({"systems": totals, "forecasts": [
            {**{k: v for k, v in s.forecast.items() if k != "model"},
             "measured": s.measured, "runs": s.runs, "inside": s.inside, "error": s.error}
            for s in scores]})
        return
    if not scores:
        err.print("the ledger holds no forecasts; `scalestudy predict` keeps them",
                  highlight=False)
        return
    for s in scores:
        out.print(s.line(), highlight=False, markup=False, soft_wrap=True)
    for t in totals:
        held = "n/a" if t["coverage"] is None else f"{t['coverage']:.0%}"
        error = "n/a" if t["median_abs_error"] is None else f"{t['median_abs_error']:.1%}"
        never = (f" ({t['unscorable']} never: they name no model)"
                 if t.get("unscorable") else "")
        out.print(f"{t['system']}: {t['forecasts']} forecast(s), {t['scored']} scored{never}; "
                  f"intervals held {held}; median |error| {error}", highlight=False)


@history_app.command("import")
def import_(
    files: Annotated[list[Path], typer.Argument(help="the tools' output files")],
    fmt: Annotated[str, typer.Option(
        "--format", help="nccl-tests (text or -J JSON), horovod (synthetic benchmark log), "
        "torchtitan (training log), mlperf (:::MLLOG result log), reframe (JSON run report "
        "or perflog; stored under the system it names unless --system is given)")],
    system: Annotated[str | None, typer.Option(help="the system it ran on")] = None,
    name: Annotated[str | None, typer.Option(
        help="the name it is listed under [default: the file's name]")] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", help="a tag (repeatable)")] = None,
    gpus: Annotated[int | None, typer.Option(
        min=1, help="GPUs of the run, where the file does not say (torchtitan, MLPerf)")
    ] = None,
    nodes: Annotated[int | None, typer.Option(
        min=1, help="nodes of the run, where the file does not say (so that `compare "
        "history:NAME` can align it with a study)")] = None,
    date: Annotated[str | None, typer.Option(
        help="when it ran (YYYY-MM-DD[THH:MM], UTC), for a log that has no date "
        "[default: the log's own, else the file's modification time]")] = None,
    results: Annotated[Path, typer.Option(
        help="the results directory that keeps a copy (results/imports/), so `history "
        "ingest` brings it back")] = Path("results"),
    store: StoreOpt = None,
) -> None:
    """Put results measured by other tools beside scalestudy's own, with their source
    (all files or none)."""
    options = imported.Options(fmt, system, name, tuple(tag or ()), gpus, nodes, _date(date))
    done = imported.import_results(files, options, store, results)
    for item in done:
        note = "".join(f", {n} {imported.NOT_A_RESULT.get(s, s)} (not a result)"
                       for s, n in item.not_results.items())
        if item.already:
            note += (f"; {item.already} of them held by an earlier import (not stored "
                     "again)")
        out.print(f"{item.path}: {item.measurements} measurement(s) ({fmt}){note}",
                  highlight=False)
        when = item.ended.strftime("%Y-%m-%d %H:%M UTC") if item.ended else "?"
        err.print(f"  dated {when} by {item.dated_by}", highlight=False)
    err.print(f"kept under {results / imported.IMPORTS}/ (`history ingest {results}` restores "
              "them)", highlight=False)


def _date(text: str | None) -> datetime | None:
    """--date as an aware datetime (UTC where it names no zone)."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ScalestudyError(f"--date {text!r}: give YYYY-MM-DD or YYYY-MM-DDTHH:MM") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
