"""Commands that plan, run and follow a study: validate, plan, run, status, cancel, probe."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from scalestudy.cli.app import JsonOpt, ResultsOpt, StudyArg, app, err, out, print_json
from scalestudy.core.choices import Rerun
from scalestudy.core.errors import RunFailed

PreflightOpt = Annotated[bool, typer.Option(
    "--preflight", help="also ask the scheduler and this host whether the jobs can run "
    "(account, queue limits, the jobs' Python); exit 2 on a problem that stops them")]


def _say(line: str) -> None:
    err.print(line, highlight=False, markup=False, soft_wrap=True)


def _warn(plan: Any) -> list[str]:
    """Print the plan's warnings (GPUs left idle) on stderr; return them."""
    from scalestudy.study import plan_warnings

    warnings = plan_warnings(plan)
    for line in warnings:
        _say(f"warning: {line}")
    return warnings


def _preflight(plan: Any, python: bool = True, ok_line: bool = True,
               hint: str = "") -> Any:
    """Run the preflight, print one line per problem (and the ok line of a clean pass);
    raise when a problem would make jobs fail or wait for ever."""
    from scalestudy.core.errors import ScalestudyError
    from scalestudy.study import preflight

    found = preflight(plan, python)
    for problem in found.problems:
        _say(problem.line())
    if found.errors:
        raise ScalestudyError(
            f"preflight: {len(found.errors)} problem(s) above would make jobs of study "
            f"{plan.study.name} fail or wait for ever: fix them{hint}")
    if ok_line:
        _say(found.ok_line())
    return found


@app.command()
def validate(study: StudyArg, as_json: JsonOpt = False, preflight: PreflightOpt = False,
             results: ResultsOpt = Path("results")) -> None:
    """Check a study spec: print what is wrong (file, line, key), or `ok`."""
    from scalestudy.study import make_plan

    plan = make_plan(study, results)
    points = len(plan.runs) // plan.study.repeats
    warnings = _warn(plan)
    found = _preflight(plan) if preflight else None
    if as_json:
        print_json({"study": str(study), "ok": True, "runs": len(plan.runs), "points": points,
               "repeats": plan.study.repeats, "system": plan.system.name,
               "warnings": warnings,
               **({"preflight": {"problems": [p.line() for p in found.problems],
                                 "checked": found.checked}} if found else {})})
        return
    out.print(f"{study}: ok: {len(plan.runs)} runs ({points} grid points x "
              f"{plan.study.repeats} repeats) on system {plan.system.name}", highlight=False)


@app.command()
def plan(study: StudyArg, as_json: JsonOpt = False, results: ResultsOpt = Path("results")) -> None:
    """Show the runs a study expands into, with run count and node-hours."""
    from scalestudy.study import make_plan, plan_summary

    the_plan = make_plan(study, results)
    _warn(the_plan)
    summary = plan_summary(the_plan)
    if as_json:
        print_json(summary)
        return
    from scalestudy.report.terminal import plan_table

    out.print(plan_table(summary, out.width))
    out.print("where the values come from:", highlight=False)
    for key, value in summary["values"].items():
        shown = value["value"]
        text = ", ".join(map(str, shown)) if isinstance(shown, list) else (
            "-" if shown is None else str(shown))
        out.print(f"  {key} {text}: {value['where']}", highlight=False, markup=False)


@app.command()
def run(
    study: StudyArg,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="render the scripts only")] = False,
    only: Annotated[str | None, typer.Option(
        "--only", help="run a subset, e.g. 'nodes<=2,tuning=default'")] = None,
    max_jobs: Annotated[int | None, typer.Option(
        "--max-jobs", min=1, help="scheduler systems: at most this many jobs queued")] = None,
    wait: Annotated[bool, typer.Option(
        "--wait", help="scheduler systems: follow the jobs to their end, then report")] = False,
    rerun: Annotated[Rerun | None, typer.Option(
        "--rerun", help="also run again the failed (and lost) runs, or all selected runs",
        case_sensitive=False)] = None,
    max_attempts: Annotated[int, typer.Option(
        "--max-attempts", min=1, help="leave a run that has failed this many attempts")] = 3,
    budget: Annotated[float | None, typer.Option(
        "--budget", min=0.0, help="refuse when the runs to start may use more node-hours "
        "than this (nodes x walltime, the worst case)")] = None,
    no_preflight: Annotated[bool, typer.Option(
        "--no-preflight", help="scheduler systems: submit without asking the scheduler "
        "and the jobs' Python first (see `validate --preflight`)")] = False,
    results: ResultsOpt = Path("results"),
) -> None:
    """Run (here) or submit (Slurm, PBS) the runs not done yet, then report.

    Failed runs run again only with --rerun; earlier attempts are kept in
    runs/<id>/attempts/<n>/. Interrupted runs (Ctrl-C) run again without it."""
    from scalestudy import study as uc

    plan = uc.make_plan(study, results)
    uc.check_selection(plan, only)
    force = rerun is Rerun.ALL
    if dry_run:
        selection = _chosen(uc.choose_runs(plan, only, rerun, max_attempts))
        uc.check_budget(plan, selection.todo, budget)  # as the real run would refuse
        if plan.scheduler.queued:
            _max_jobs(plan, max_jobs, None)  # what the real run would keep to
        todo = uc.dry_run(plan, selection, force)
        from scalestudy.core.grid import describe_run

        for r in todo:
            out.print(f"would run {r.run_id}: {describe_run(plan.study, r)}, repeat "
                      f"{r.repeat}: {plan.run_dir(r) / 'job.sh'}", highlight=False)
        out.print(f"{len(todo)} of {len(plan.runs)} runs to do (dry run: nothing executed)")
        return
    with uc.lock(plan):
        if plan.scheduler.queued:
            found = None if no_preflight else _preflight(
                plan, hint=", or run again with --no-preflight to submit anyway")
            _run_queued(plan, only, rerun, max_attempts, _max_jobs(plan, max_jobs, found),
                        wait, budget)
            return
        if not no_preflight:  # on this host: the cores against the ranks
            _preflight(plan, python=False, ok_line=False)
        if max_jobs is not None or wait:
            err.print(f"note: system {plan.system.name} runs jobs here, one after the other, "
                      "and `run` waits for them: --max-jobs and --wait change nothing",
                      highlight=False)
        selection = _chosen(uc.choose_runs(plan, only, rerun, max_attempts))
        if not selection.todo:
            err.print(f"nothing to run: the {len(uc.selected(plan, only))} selected runs are "
                      "complete or left as they are", highlight=False)
        from scalestudy.cli.words import local_progress

        with local_progress(err, plan, len(selection.todo)) as progress:
            states = uc.run_here(plan, selection, force, progress, budget)
        _report_and_exit(plan, states, failures_shown=True)


def _max_jobs(plan: Any, given: int | None, found: Any) -> int | None:
    """--max-jobs, or the study's queue's per-user job limit (as the scheduler said in
    the preflight, else as the profile documents it), said when it applies."""
    if given is not None:
        return given
    from scalestudy.site.preflight import profile_job_limit

    limit = found.job_limit if found is not None and found.job_limit else \
        profile_job_limit(plan)
    if limit is None:
        return None
    err.print(f"note: --max-jobs {limit[0]}: {limit[1]}; jobs beyond it are submitted as "
              "earlier ones end (with --wait) or by the next `run`", highlight=False)
    return limit[0]


def _chosen(selection: Any) -> Any:
    """Say which failed runs a `run` leaves, and why."""
    from scalestudy.cli.words import selection_notes

    for line in selection_notes(selection):
        err.print(line, highlight=False, markup=False)
    return selection


def _run_queued(plan: Any, only: str | None, rerun: Rerun | None, max_attempts: int,
                max_jobs: int | None, wait: bool, budget: float | None) -> None:
    from scalestudy import study as uc

    queued = uc.submit(plan, only, rerun, max_attempts, max_jobs, budget)
    from scalestudy.cli.words import queued_lines

    _chosen(queued.selection)
    for line in queued_lines(queued, plan.study):
        err.print(line, highlight=False, markup=False)
    out.print(f"{len(queued.submitted)} job(s) submitted, {queued.active} in the queue"
              + (f", {len(queued.waiting)} held back by --max-jobs" if queued.waiting else ""))
    if not wait:
        if queued.waiting:
            out.print("run again (or with --wait) to submit the rest")
        out.print(f"follow with: scalestudy status {plan.study.source}", highlight=False)
        return
    from scalestudy.cli.words import queue_progress

    chosen = uc.selected(plan, only)
    with queue_progress(err, [r.run_id for r in chosen]) as progress:
        states = uc.wait(plan, only, queued, max_jobs, rerun is Rerun.ALL, progress)
    _report_and_exit(plan, states)


def _report_and_exit(plan: Any, states: list[Any], failures_shown: bool = False) -> None:
    """Report; say how the runs just done ended (each failure's line unless the progress
    already printed it); exit 1 when any failed."""
    from scalestudy import study as uc
    from scalestudy.cli.words import failure_lines
    from scalestudy.report.terminal import scaling_rich_table

    built = uc.report(plan)
    out.print(scaling_rich_table(built.analysis.table, plan.study.name, out.width))
    held = sum(1 for s in states if s == "held")
    failed = sum(1 for s in states if s not in ("completed", "held"))
    if states:
        err.print(f"{len(states) - failed - held} run(s) completed, {failed} failed"
                  + (f", {held} held" if held else ""))
    for line in [] if failures_shown else failure_lines(plan, states_only_failed=True):
        err.print(line, markup=False, highlight=False, soft_wrap=True)
    out.print(f"report: {built.html}", highlight=False)
    if held:
        err.print(f"{held} run(s) are held by the scheduler and will not start until released: "
                  f"`scalestudy status {plan.study.source}` says which hold and how to release "
                  "it; then `scalestudy run --wait` follows them again", highlight=False)
    if failed or held:
        raise RunFailed(f"{failed} run(s) failed, {held} held: the lines above say why; "
                        f"`scalestudy status {plan.study.source}` lists them, with their logs "
                        f"in {plan.directory / 'runs'}/<id>/stderr.log")


@app.command()
def status(study: StudyArg, as_json: JsonOpt = False,
           results: ResultsOpt = Path("results")) -> None:
    """Show each run's state (one scheduler query), and why failed runs failed."""
    from scalestudy import study as uc
    from scalestudy.report.terminal import status_table

    plan = uc.make_plan(study, results)
    rows = uc.status(plan)
    if as_json:
        print_json(rows)
        return
    out.print(status_table(plan.study.name, rows, out.width))


@app.command()
def cancel(study: StudyArg, as_json: JsonOpt = False,
           results: ResultsOpt = Path("results")) -> None:
    """Cancel every queued or running job of the study (scheduler systems)."""
    from scalestudy import study as uc

    job_ids = uc.cancel(uc.make_plan(study, results))
    if as_json:
        print_json({"cancelled": job_ids})
        return
    out.print(f"cancelled {len(job_ids)} job(s)" + (f": {' '.join(job_ids)}" if job_ids else ""))


@app.command()
def probe(
    study: StudyArg,
    min_batch: Annotated[int, typer.Option("--min-batch", min=1, help="first batch tried")] = 1,
    max_batch: Annotated[int, typer.Option("--max-batch", min=1, help="last batch tried")] = 4096,
    memory_limit_gb: Annotated[float | None, typer.Option(
        "--memory-limit-gb", min=0.001,
        help="CPU only: memory (GiB) the probe may add before a batch counts as not fitting",
    )] = None,
    wait: Annotated[bool, typer.Option(
        "--wait/--no-wait", help="scheduler systems: follow the probe's job to its end")] = True,
    timeout: Annotated[float | None, typer.Option(
        "--timeout", min=1, help="scheduler systems: stop waiting after this many seconds "
        "[default: the walltime plus an hour]")] = None,
    as_json: JsonOpt = False,
    results: ResultsOpt = Path("results"),
) -> None:
    """Find the largest per-GPU batch that fits one GPU, and its throughput.

    Exits 1 when no batch fits."""
    from scalestudy import study as uc

    plan = uc.make_plan(study, results)
    got = uc.probe(plan, min_batch, max_batch, memory_limit_gb, wait, timeout,
                   say=lambda line: err.print(line, highlight=False))
    if got.record is None:
        out.print(f"when job {got.job_id} ends, its answer is in {got.directory}/stdout.log "
                  "and metrics.jsonl", highlight=False)
        return
    record = got.record
    if as_json:
        print_json({**record, "suggested_batch_sizes": got.suggested})
    else:
        from scalestudy.cli.words import probe_lines

        for line in probe_lines(record, got.suggested, plan.study.scaling):
            out.print(line, highlight=False)
    if not record["largest_batch_that_fits"]:
        raise RunFailed(f"no batch from {min_batch} fits one GPU of {plan.system.name}")


