"""The `scalestudy` command: typer wiring and the one error boundary.

Commands stay a few lines: parse options, call one library function, print. Known
errors become `error: ...` on stderr with a non-zero exit; set SCALESTUDY_DEBUG=1 to
see the traceback. Nothing here imports torch, pandas or matplotlib at start-up.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from scalestudy.errors import RunFailed, ScalestudyError

app = typer.Typer(
    help="Scaling studies of distributed deep-learning training: "
    "spec -> grid -> jobs -> img/sec -> efficiency report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Piped output gets a wide console so tables keep whole run ids; a terminal keeps its width.
out = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 160)

StudyArg = Annotated[Path, typer.Argument(help="the study spec (YAML)", show_default=False)]
ResultsOpt = Annotated[
    Path, typer.Option("--results", help="directory holding results/<study>/")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON for machines")]


@app.command()
def validate(study: StudyArg, results: ResultsOpt = Path("results")) -> None:
    """Load and check a study spec; print what is wrong."""
    from scalestudy.runner import make_plan

    plan = make_plan(study, results)
    points = len(plan.runs) // plan.study.repeats
    out.print(f"{study}: ok: {len(plan.runs)} runs ({points} grid points x "
              f"{plan.study.repeats} repeats) on system {plan.system.name}")


@app.command()
def plan(study: StudyArg, as_json: JsonOpt = False, results: ResultsOpt = Path("results")) -> None:
    """Show the runs a study expands into, with run count and node-hours."""
    from scalestudy.runner import make_plan, plan_summary

    summary = plan_summary(make_plan(study, results))
    if as_json:
        print(json.dumps(summary, indent=1))
        return
    from scalestudy.tables import plan_table

    out.print(plan_table(summary))


@app.command()
def run(
    study: StudyArg,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="render the scripts only")] = False,
    only: Annotated[
        str | None, typer.Option("--only", help="run a subset, e.g. 'nodes<=2,tuning=default'")
    ] = None,
    max_jobs: Annotated[
        int | None, typer.Option("--max-jobs", min=1, help="at most this many jobs queued")
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="follow the jobs to their end, then report")
    ] = False,
    rerun: Annotated[
        str | None, typer.Option("--rerun", help="also run again the failed (and lost) runs: "
                                 "'failed', or every selected run: 'all'")
    ] = None,
    max_attempts: Annotated[
        int, typer.Option("--max-attempts", min=1, help="leave a run that has failed this "
                          "many attempts")
    ] = 3,
    results: ResultsOpt = Path("results"),
) -> None:
    """Run (or submit) the runs not started yet; on this machine, then report.

    Failed runs are run again only with --rerun; earlier attempts are kept in
    runs/<id>/attempts/<n>/."""
    from scalestudy.runner import make_plan, prepare
    from scalestudy.state import study_lock

    plan = make_plan(study, results)
    if dry_run:
        todo = prepare(plan, _choose(plan, only, rerun, max_attempts, None),
                       force=rerun == "all")
        for r in todo:
            out.print(f"would run {r.run_id}: {r.nodes}x{r.ranks_per_node} ranks, batch "
                      f"{r.batch_size}/GPU ({r.global_batch} global), {r.backend}, {r.tuning}, "
                      f"repeat {r.repeat}: {plan.run_dir(r) / 'job.sh'}")
        out.print(f"{len(todo)} of {len(plan.runs)} runs to do (dry run: nothing executed)")
        return
    with study_lock(plan.directory):
        if plan.system.scheduler != "local":
            _submit(plan, only, rerun, max_attempts, max_jobs, wait)
            return
        chosen = _choose(plan, only, rerun, max_attempts, None)
        todo = prepare(plan, chosen, force=rerun == "all")
        if not todo:
            out.print(f"nothing to run: the {len(plan.runs)} selected runs are complete"
                      " or left as they are")
        states = [s["state"] for s in _execute_with_progress(plan, todo)]
        _report_and_exit(plan, states)


def _choose(plan: Any, only: str | None, rerun: str | None, max_attempts: int,
            states: dict[str, str] | None) -> list[Any]:
    """The runs to start now; says which failed runs are left and why."""
    from scalestudy.runner import choose_runs

    picked = choose_runs(plan, only, rerun, max_attempts, states)
    if picked.failed_kept:
        out.print(f"{len(picked.failed_kept)} failed run(s) left as they are "
                  f"({', '.join(r.run_id for r in picked.failed_kept[:5])}"
                  f"{', ...' if len(picked.failed_kept) > 5 else ''}): "
                  "run again with --rerun failed to retry them")
    if picked.exhausted:
        out.print(f"{len(picked.exhausted)} run(s) failed {max_attempts} attempt(s) and are "
                  f"left ({', '.join(r.run_id for r in picked.exhausted[:5])}): see "
                  "`scalestudy status`; raise --max-attempts to try again")
    return picked.todo


def _submit(plan: Any, only: str | None, rerun: str | None, max_attempts: int,
            max_jobs: int | None, wait: bool) -> None:
    from scalestudy.tracking import follow, recover, refresh, submit_runs

    for run_id, job_id in recover(plan):
        out.print(f"found job {job_id} of {run_id}, queued by an interrupted run: recorded")
    views = refresh(plan)
    chosen = _choose(plan, only, rerun, max_attempts,
                     {k: v.state for k, v in views.items()})
    done = submit_runs(plan, chosen, max_jobs, views=views, force=rerun == "all")
    for r, job_id in done.submitted:
        out.print(f"submitted {r.run_id} as job {job_id}: {r.nodes}x{r.ranks_per_node} ranks, "
                  f"batch {r.batch_size}/GPU ({r.global_batch} global)")
    out.print(f"{len(done.submitted)} job(s) submitted, {done.active} in the queue"
              + (f", {len(done.waiting)} held back by --max-jobs" if done.waiting else ""))
    if not wait:
        if done.waiting:
            out.print("run again (or with --wait) to submit the rest")
        out.print(f"follow with: scalestudy status {plan.study.source}")
        return
    from scalestudy.grid import select

    waited = select(plan.runs, only)
    views = _follow_with_progress(plan, waited, done.waiting, max_jobs, follow, rerun == "all")
    _report_and_exit(plan, [views[r.run_id].state for r in waited])


def _follow_with_progress(plan: Any, chosen: list[Any], waiting: list[Any],
                          max_jobs: int | None, follow: Any, force: bool = False) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    ids = {r.run_id for r in chosen}
    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=out) as bar:
        task = bar.add_task("jobs", total=len(ids))

        def progress(views: dict[str, Any]) -> None:
            counts: dict[str, int] = {}
            for i in ids:
                counts[views[i].state] = counts.get(views[i].state, 0) + 1
            ended = counts.get("completed", 0) + counts.get("failed", 0)
            bar.update(task, completed=ended, description=", ".join(
                f"{n} {s}" for s, n in sorted(counts.items())))

        return follow(plan, chosen, waiting, max_jobs, progress=progress, force=force)


@app.command()
def status(study: StudyArg, as_json: JsonOpt = False,
           results: ResultsOpt = Path("results")) -> None:
    """Each run's state, from one batched scheduler query."""
    from scalestudy.runner import make_plan
    from scalestudy.tables import status_table

    plan = make_plan(study, results)
    if plan.system.scheduler == "local":
        from scalestudy import state
        from scalestudy.tracking import RunView

        views = {r.run_id: RunView(r, state.run_state(plan.run_dir(r))) for r in plan.runs}
    else:
        from scalestudy.tracking import refresh

        views = refresh(plan)
    rows = [{**v.run.params(), "state": v.state, "job_id": v.job_id, "reason": v.reason,
             **_failure(plan, v)} for v in views.values()]
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    from rich.markup import escape

    # Log lines such as "[rank0]: ..." are text, not rich markup.
    shown = [{**r, "reason": escape(f"{r['failure']}: {r['reason'] or ''}" + (
        f" | {r['failure_line']}" if r["failure_line"] not in (None, r["reason"]) else ""))}
        if r["failure"] else r for r in rows]
    out.print(status_table(plan.study.name, shown))


def _failure(plan: Any, view: Any) -> dict[str, Any]:
    """A failed run's failure class and decisive log line (None for the others)."""
    from scalestudy import state

    if view.state != "failed":
        return {"failure": None, "failure_line": None}
    found = state.run_status(plan.run_dir(view.run))
    return {"failure": found["failure"] or "unknown", "failure_line": found["failure_line"],
            **({"reason": found["reason"]} if view.reason is None else {})}


@app.command()
def cancel(study: StudyArg, results: ResultsOpt = Path("results")) -> None:
    """Cancel every queued or running job of the study."""
    from scalestudy.runner import make_plan
    from scalestudy.tracking import cancel_runs, require_scheduler

    plan = make_plan(study, results)
    require_scheduler(plan)
    job_ids = cancel_runs(plan)
    out.print(f"cancelled {len(job_ids)} job(s)" + (f": {' '.join(job_ids)}" if job_ids else ""))


def _execute_with_progress(plan: Any, todo: list[Any]) -> list[dict[str, Any]]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from scalestudy.runner import execute_runs

    if not todo:
        return []
    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=out, transient=False) as bar:
        task = bar.add_task("runs", total=len(todo))

        def progress(r: Any, status: dict[str, Any] | None) -> None:
            if status is None:
                bar.update(task, description=f"{r.run_id} {r.nodes}x{r.ranks_per_node} "
                           f"b{r.batch_size} rep {r.repeat}")
                return
            bar.advance(task)
            if status["state"] != "completed":
                bar.console.print(f"[red]failed[/] {r.run_id}: {status['reason']} "
                                  f"({plan.run_dir(r) / 'stderr.log'})")

        return execute_runs(plan, todo, progress)


def _report_and_exit(plan: Any, states: list[str]) -> None:
    """Collect and report, print how the runs just done ended; exit 1 when any failed."""
    from scalestudy.runner import report as write_report
    from scalestudy.tables import scaling_rich_table

    html, table = write_report(plan)
    out.print(scaling_rich_table(table, plan.study.name))
    failed = sum(1 for s in states if s != "completed")
    if states:
        out.print(f"{len(states) - failed} run(s) completed, {failed} failed")
    out.print(f"report: {html}")
    if failed:
        raise RunFailed(f"{failed} run(s) failed; their reasons and log tails are in "
                        f"{plan.directory / 'runs.csv'} and the report")


@app.command()
def probe(
    study: StudyArg,
    min_batch: Annotated[int, typer.Option("--min-batch", min=1, help="first batch tried")] = 1,
    max_batch: Annotated[int, typer.Option("--max-batch", min=1, help="last batch tried")] = 4096,
    memory_limit_gb: Annotated[float | None, typer.Option(
        "--memory-limit-gb", min=0.001,
        help="CPU only: memory the probe may add (GiB) before a batch counts as not fitting",
    )] = None,
    wait: Annotated[bool, typer.Option(
        "--wait/--no-wait", help="scheduler systems: follow the probe's job to its end")] = True,
    as_json: JsonOpt = False,
    results: ResultsOpt = Path("results"),
) -> None:
    """The largest per-GPU batch that fits one GPU and the throughput up to it."""
    from scalestudy import probe as batch_probe
    from scalestudy.runner import make_plan
    from scalestudy.state import study_lock

    if min_batch > max_batch:
        raise ScalestudyError(f"--min-batch {min_batch} is larger than --max-batch {max_batch}")
    plan = make_plan(study, results)
    with study_lock(plan.directory):
        run_, directory = batch_probe.prepare(plan, min_batch, max_batch, memory_limit_gb)
        if plan.system.scheduler == "local":
            status = batch_probe.run_here(plan, run_, directory)
            final = status["state"]
        else:
            job_id = batch_probe.submit(plan, directory)
            out.print(f"submitted the probe as job {job_id}: {directory / 'job.sh'}")
            if not wait:
                out.print(f"when job {job_id} ends, its answer is in {directory}/stdout.log "
                          "and metrics.jsonl")
                return
            final = batch_probe.wait(plan, directory)
    record = batch_probe.result(directory)
    if record is None:
        raise ScalestudyError(
            f"the probe ended ({final}) without an answer; see {directory / 'stderr.log'}")
    suggested = batch_probe.suggested_batches(record)
    if as_json:
        print(json.dumps({**record, "suggested_batch_sizes": suggested}, indent=2))
        return
    for point in record["points"]:
        shown = (f"{point['throughput']:.1f} img/s on 1 GPU" if point["fits"]
                 else "does not fit")
        out.print(f"  per-GPU batch {point['batch_size']:>6}: {shown}")
    best = record["largest_batch_that_fits"]
    out.print(f"largest per-GPU batch that fits: {best if best else 'none'} "
              f"({record['model']}, {record['image_size']}px, {record['precision']}, "
              f"{record['device']})")
    if suggested:
        out.print(f"for the grid: batch_size: [{', '.join(map(str, suggested))}]")
    if not best:
        raise typer.Exit(1)


@app.command()
def collect(study: StudyArg, results: ResultsOpt = Path("results")) -> None:
    """Gather every run's record into results/<study>/runs.csv."""
    from scalestudy.runner import collect as collect_runs
    from scalestudy.runner import make_plan

    plan = make_plan(study, results)
    runs = collect_runs(plan)
    counts = runs["state"].value_counts().to_dict()
    out.print(f"{plan.directory / 'runs.csv'}: {len(runs)} runs ("
              + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + ")")


@app.command()
def report(
    study: StudyArg,
    results: ResultsOpt = Path("results"),
    as_json: JsonOpt = False,
    baseline: Annotated[str, typer.Option(
        "--baseline", help="efficiency baseline: smallest (world size), node (one full "
        "node) or a world size, e.g. 8")] = "smallest",
    references: Annotated[Path | None, typer.Option(
        "--references", help="YAML file of reference values, checked with the study's own")
    ] = None,
    check: Annotated[bool, typer.Option(
        "--check", help="exit 1 when a reference check fails (for CI)")] = False,
    straggler: Annotated[float, typer.Option(
        help="flag a run whose slowest rank is this fraction below the mean rank")] = 0.10,
    max_cv: Annotated[float, typer.Option(
        help="flag a coefficient of variation (iteration times, repeats) above this")] = 0.05,
    min_iters: Annotated[int, typer.Option(
        help="flag a run with fewer timed iterations")] = 10,
    latency: Annotated[str, typer.Option(
        help="model latency term: log (log2 P, tree) or ring (P - 1)")] = "log",
    bandwidth: Annotated[str, typer.Option(
        help="model bandwidth: fit, or probe (the allreduce probe's busbw)")] = "fit",
    max_nodes: Annotated[int, typer.Option(
        help="predict up to this many nodes")] = 1024,
) -> None:
    """Collect, analyse (efficiency, flags, communication model, references), write the
    report; --check exits 1 when a reference fails."""
    from scalestudy.references import ReferenceFailed, failed_lines
    from scalestudy.report import options_from, report_study
    from scalestudy.runner import make_plan
    from scalestudy.summary import dump
    from scalestudy.tables import scaling_rich_table

    options = options_from(baseline, straggler, max_cv, min_iters, latency, bandwidth,
                           max_nodes)
    plan = make_plan(study, results)
    rep = report_study(plan, options, references)
    if as_json:
        sys.stdout.write(dump(rep.summary))
    else:
        out.print(scaling_rich_table(rep.table, plan.study.name))
        if len(rep.checks):
            out.print(f"references: {len(rep.checks) - rep.failed_checks} passed, "
                      f"{rep.failed_checks} failed")
        out.print(f"report: {rep.html}")
    if check and rep.failed_checks:
        raise ReferenceFailed(f"{rep.failed_checks} reference check(s) failed:\n"
                              + "\n".join(failed_lines(rep.checks)))
    if check and not len(rep.checks):
        err.print("note: --check: the study declares no references and none were given "
                  "(--references FILE); nothing was checked", markup=False)


@app.command()
def compare(
    a: Annotated[Path, typer.Argument(help="study A: a spec (.yaml) or a results directory",
                                      show_default=False)],
    b: Annotated[Path, typer.Argument(help="study B: a spec (.yaml) or a results directory",
                                      show_default=False)],
    out_dir: Annotated[Path | None, typer.Option(
        "--out", help="where compare.md/.csv/.png go [default: results/compare-A-vs-B]")
    ] = None,
    results: ResultsOpt = Path("results"),
) -> None:
    """Throughput and efficiency of two studies side by side, with B / A ratios."""
    from scalestudy.compare import compare as compare_studies
    from scalestudy.compare import rows_text
    from scalestudy.tables import text_table

    frame, differs, where = compare_studies(a, b, out_dir, results)
    caption = "; ".join(f"{k}: A {va}, B {vb}" for k, (va, vb) in differs.items())
    out.print(text_table(f"{a} vs {b}: throughput (img/s, all GPUs) and efficiency",
                         *rows_text(frame), caption))
    out.print(f"comparison: {where / 'compare.md'}")


@app.command()
def schema() -> None:
    """Print the JSON Schema of a study spec (for editors and validators)."""
    from scalestudy.spec import study_schema

    print(json.dumps(study_schema(), indent=1))


@app.command()
def systems() -> None:
    """List the site profiles shipped with scalestudy."""
    from scalestudy.systems import available, load_system

    for name in available():
        profile = load_system(name)
        out.print(f"{name:16} {profile.scheduler:6} {profile.launcher:9} {profile.description}")


def main() -> None:
    """Entry point: run the app inside the one error boundary."""
    try:
        app(standalone_mode=False)
    except ScalestudyError as exc:
        if os.environ.get("SCALESTUDY_DEBUG"):
            raise
        for line in str(exc).splitlines() or ["(no message)"]:
            err.print(f"error: {line}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err.print("interrupted: a local run that did not finish is recorded as failed; "
                  "submitted jobs stay in the queue (scalestudy status / cancel); "
                  "run the same command again to resume", markup=False)
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(1)
    except Exception as exc:  # a click usage error
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        raise
