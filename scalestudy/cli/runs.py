"""Commands that plan, run and follow a study: validate, plan, run, status, cancel, probe."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from scalestudy import study as uc
from scalestudy.cli.app import JsonOpt, ResultsOpt, StudyArg, app, err, out, print_json
from scalestudy.core.choices import Rerun
from scalestudy.core.errors import RunFailed
from scalestudy.core.grid import describe_run
from scalestudy.results.analysis import columns as col
from scalestudy.site.queues import hms
from scalestudy.study.planning import expected_waits, read_exclude_list, with_excluded

if TYPE_CHECKING:
    import contextlib
    from collections.abc import Callable

    from scalestudy.execute.tracking import RunView
    from scalestudy.site.plan import Plan
    from scalestudy.site.preflight import Preflight
    from scalestudy.study import Queued, RunOutcome, Selection
    from scalestudy.study.running import Progress

PreflightOpt = Annotated[bool, typer.Option(
    "--preflight", help="also ask the scheduler and this host whether the jobs can run "
    "(account, queue limits, the jobs' Python); exit 2 on a problem that stops them")]


def _say(line: str) -> None:
    err.print(line, highlight=False, markup=False, soft_wrap=True)


def _warn(plan: Plan) -> list[str]:
    """Print the plan's warnings (GPUs left idle) on stderr; return them."""
    warnings = uc.plan_warnings(plan)
    for line in warnings:
        _say(f"warning: {line}")
    return warnings


def _show_preflight(found: Preflight, ok_line: bool = True) -> None:
    """One line per problem the preflight found, and the ok line of a clean pass."""
    for problem in found.problems:
        _say(problem.line())
    if ok_line and not found.errors:
        _say(found.ok_line())


class _Screen:
    """How `run` shows what it does: notes and progress on stderr, counts on stdout."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def note(self, line: str) -> None:
        err.print(line, highlight=False, markup=False, soft_wrap=True)

    def preflight(self, found: Preflight, ok_line: bool) -> None:
        _show_preflight(found, ok_line)

    def chosen(self, selection: Selection) -> None:
        from scalestudy.cli.messages import selection_notes

        for line in selection_notes(selection):
            self.note(line)

    def queued(self, queued: Queued) -> None:
        from scalestudy.cli.messages import queued_lines

        for line in queued_lines(queued, self.plan.study):
            self.note(line)
        if queued.allocations:

            for q in queued.allocations:
                a = q.allocation
                out.print(f"allocation {q.name}: job {q.job_id}, {a.nodes} node(s) for "
                          f"{hms(a.walltime_s)}, {len(a.steps)} run(s) as its steps",
                          highlight=False)
            out.print(f"{len(queued.submitted)} run(s) packed into "
                      f"{len(queued.allocations)} job(s), {queued.active} run(s) queued or "
                      "running", highlight=False)
            return
        out.print(f"{len(queued.submitted)} job(s) submitted, {queued.active} in the queue"
                  + (f", {len(queued.waiting)} held back by --max-jobs" if queued.waiting
                     else ""))

    def running_here(self, plan: Plan, count: int
                     ) -> contextlib.AbstractContextManager[Progress | None]:
        from scalestudy.cli.messages import local_progress

        return local_progress(err, plan, count)

    def following(self, run_ids: list[str]
                  ) -> contextlib.AbstractContextManager[Callable[[dict[str, RunView]], None]]:
        from scalestudy.cli.messages import queue_progress

        return queue_progress(err, run_ids)


def _data_gate(plan: Plan) -> None:
    """The study's datasets checked where visible from here (exit 2 on a problem)."""
    from scalestudy.study.datasets import data_gate

    data_gate(plan, _say)


PackOpt = Annotated[bool, typer.Option(
    "--pack", help="scheduler systems: the runs as steps of one allocation (or a few, split "
    "by the queue's limits): one queue wait (the spec's job.pack asks it too)")]


@app.command()
def validate(study: StudyArg, as_json: JsonOpt = False, preflight: PreflightOpt = False,
             results: ResultsOpt = Path("results")) -> None:
    """Check a study spec: print what is wrong (file, line, key), or `ok`."""
    plan = uc.make_plan(study, results)
    _data_gate(plan)
    points = len(plan.runs) // plan.study.repeats
    warnings = _warn(plan)
    if not preflight and not plan.study.job.pack:  # the preflight holds the limits too
        uc.limits_gate(plan, _say)
    found = uc.preflight_gate(plan, True, _show_preflight) if preflight else None
    if as_json:
        print_json({"study": str(study), "ok": True, "runs": len(plan.runs), "points": points,
               "repeats": plan.study.repeats, "system": plan.system.name,
               "warnings": warnings,
               **({"preflight": {"problems": [p.line() for p in found.problems],
                                 "checked": found.checked}} if found else {})})
        return
    out.print(f"{study}: ok: {len(plan.runs)} runs ({points} grid points x "
              f"{plan.study.repeats} repeats) on system {plan.system.name}", highlight=False)


AdaptiveOpt = Annotated[bool, typer.Option(
    "--adaptive", help="measure round by round: every alternative's smallest scales first, "
    "then only the points that could still change the front of time against node-hours "
    "(the rule: `plan --adaptive`); journalled, so a killed run resumes; follows each "
    "round to its end")]


@app.command()
def plan(study: StudyArg, as_json: JsonOpt = False, results: ResultsOpt = Path("results"),
         pack: PackOpt = False, adaptive: AdaptiveOpt = False,
         budget: Annotated[float | None, typer.Option(
             "--budget", min=0.0, help="--adaptive: the node-hours the study may use")] = None,
         ) -> None:
    """Show the runs a study expands into, with run count and node-hours.

    With --pack: the allocations the runs not done would be packed into. With
    --adaptive: the rule and the round `run --adaptive` would run next."""
    the_plan = uc.make_plan(study, results)
    _data_gate(the_plan)
    if adaptive:
        _plan_adaptive(the_plan, as_json, budget)
        return
    _warn(the_plan)
    limits = None
    if not (pack or the_plan.study.job.pack):  # packed: the allocations fit the queues
        limits = uc.limits_gate(the_plan, _say)
    summary = uc.plan_summary(the_plan)
    if limits is not None:
        summary["limits"] = [p.line("limits") for p in limits.problems]

    waits = expected_waits(the_plan)
    if waits:
        summary["expected_wait"] = [w.as_dict() for w in waits]
    if pack or the_plan.study.job.pack:
        from scalestudy.study.packing import pack_summary

        summary["pack"] = pack_summary(the_plan)
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
    for line in summary.get("pack", {}).get("lines", []):
        out.print(line, highlight=False, markup=False)
    for w in summary.get("expected_wait", []):
        said = f"~{w['seconds'] / 60:,.1f} min" if w["seconds"] is not None else "not known"
        start = f", expected start {w['start'].replace('T', ' ')}" if w.get("start") else ""
        out.print(f"expected queue wait, {w['nodes']} node(s): {said}{start} ({w['source']})",
                  highlight=False, markup=False, soft_wrap=True)
    if "pack" not in summary:
        by_queue: dict[str, set[int]] = {}
        for r in summary["runs"]:
            if r.get("queue"):
                by_queue.setdefault(r["queue"], set()).add(int(r[col.NODES]))
        if len(by_queue) > 1:  # the runs go to several queues: say which to which
            out.print("queues: " + "; ".join(
                f"{q}: {', '.join(map(str, sorted(n)))} node(s)" for q, n in by_queue.items()),
                highlight=False, markup=False)


def _plan_adaptive(the_plan: Plan, as_json: bool, budget: float | None) -> None:
    """`plan --adaptive`: the rule, the next round, what was left out so far."""
    from scalestudy.cli.messages import adaptive_lines
    _warn(the_plan)
    if not the_plan.study.job.pack:
        uc.limits_gate(the_plan, _say)
    got = uc.plan_adaptive(the_plan, None, budget)
    if as_json:
        print_json(got)
        return
    for line in adaptive_lines(the_plan.study.name, got):
        out.print(line, highlight=False, markup=False, soft_wrap=True)


OnlyOpt = Annotated[str | None, typer.Option(
    "--only", help="run a subset, e.g. 'nodes<=2,tuning=default'")]
MaxJobsOpt = Annotated[int | None, typer.Option(
    "--max-jobs", min=1, help="scheduler systems: at most this many jobs queued")]
WaitOpt = Annotated[bool, typer.Option(
    "--wait", help="scheduler systems: follow the jobs to their end, then report")]
RerunOpt = Annotated[Rerun | None, typer.Option(
    "--rerun", help="also run again the failed (and lost) runs, or all selected runs",
    case_sensitive=False)]
AttemptsOpt = Annotated[int, typer.Option(
    "--max-attempts", min=1, help="leave a run that has failed this many attempts")]
BudgetOpt = Annotated[float | None, typer.Option(
    "--budget", min=0.0, help="refuse when the runs to start may use more node-hours than "
    "this (nodes x walltime, the worst case)")]
NoPreflightOpt = Annotated[bool, typer.Option(
    "--no-preflight", help="scheduler systems: submit without asking the scheduler and the "
    "jobs' Python first (see `validate --preflight`)")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="render the scripts only")]
TagOpt = Annotated[list[str] | None, typer.Option(
    "--tag", help="a tag the results store keeps with every run this starts (repeatable; "
    "added to the spec's `tags:`), e.g. --tag nccl-2.23")]


@app.command()
def run(study: StudyArg, dry_run: DryRunOpt = False, only: OnlyOpt = None,
        max_jobs: MaxJobsOpt = None, wait: WaitOpt = False, rerun: RerunOpt = None,
        max_attempts: AttemptsOpt = 3, budget: BudgetOpt = None,
        no_preflight: NoPreflightOpt = False, tag: TagOpt = None,
        results: ResultsOpt = Path("results"), pack: PackOpt = False,
        adaptive: AdaptiveOpt = False,
        exclude_nodes: Annotated[Path | None, typer.Option(
            "--exclude-nodes", help="scheduler systems: keep the jobs off the hosts in this "
            "file (one per line, e.g. from `history nodes --write-exclude`)")] = None,
        ) -> None:
    """Run (here) or submit (Slurm, PBS, Flux) the runs not done yet, then report.

    Failed runs run again only with --rerun; earlier attempts are kept in
    runs/<id>/attempts/<n>/. Interrupted runs (Ctrl-C) run again without it."""
    plan = uc.make_plan(study, results)
    if exclude_nodes is not None:

        plan = with_excluded(plan, read_exclude_list(exclude_nodes))
    _data_gate(plan)
    request = uc.RunRequest(only=only, rerun=rerun, max_attempts=max_attempts,
                            max_jobs=max_jobs, wait=wait, budget=budget,
                            preflight=not no_preflight, dry_run=dry_run,
                            tags=tuple(tag or ()), pack=pack)
    got = (uc.run_adaptive if adaptive else uc.run)(plan, request, _Screen(plan))
    if dry_run:

        for r in got.prepared:
            out.print(f"would run {r.run_id}: {describe_run(plan.study, r)}, repeat "
                      f"{r.repeat}: {plan.run_dir(r) / 'job.sh'}", highlight=False)
        out.print(f"{len(got.prepared)} of {len(plan.runs)} runs to do (dry run: nothing "
                  "executed)")
    elif _ran_nothing(got):  # a nightly job must not pass silently
        raise RunFailed(f"nothing was run: {len(got.selection.exhausted)} run(s) failed "
                        "every allowed attempt (--max-attempts counts a run's failures since "
                        "it last completed); `scalestudy status` says why; raise "
                        "--max-attempts, or fix the cause and run with --rerun failed")
    elif got.report is None:
        if got.queued is not None and got.queued.waiting:
            out.print("run again (or with --wait) to submit the rest")
        out.print(f"follow with: scalestudy status {plan.study.source}", highlight=False)
    else:
        _report_and_exit(plan, got, failures_shown=not plan.scheduler.queued)


def _ran_nothing(got: RunOutcome) -> bool:
    """Nothing was started, and runs were left because they failed every attempt."""
    started = got.states or (got.queued is not None and (got.queued.submitted
                                                         or got.queued.allocations))
    return bool(got.selection.exhausted) and not started and not got.selection.todo


def _report_and_exit(plan: Plan, got: RunOutcome, failures_shown: bool) -> None:
    """The report's table; how the runs just done ended (each failure's line unless the
    progress already printed it); exit 1 when any failed or is held."""
    from scalestudy.cli.messages import failure_lines
    from scalestudy.report.terminal import scaling_rich_table

    report = got.report
    if report is None:  # nothing was followed to its end
        return
    out.print(scaling_rich_table(report.analysis.table, plan.study.name, out.width))
    failed, held = got.failed, got.held
    if got.states:
        err.print(f"{len(got.states) - failed - held} run(s) completed, {failed} failed"
                  + (f", {held} held" if held else ""))
    for line in [] if failures_shown else failure_lines(plan, states_only_failed=True):
        err.print(line, markup=False, highlight=False, soft_wrap=True)
    out.print(f"report: {report.html}", highlight=False)
    if report.stored:
        err.print(report.stored, highlight=False, markup=False)
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
    from scalestudy.report.terminal import status_table

    plan = uc.make_plan(study, results)
    rows = uc.status(plan)
    if as_json:
        print_json(rows)
        return
    out.print(status_table(plan.study.name, rows, out.width))
    for line in uc.allocation_lines(plan, rows):
        out.print(line, highlight=False, markup=False)


@app.command()
def cancel(study: StudyArg, as_json: JsonOpt = False,
           results: ResultsOpt = Path("results")) -> None:
    """Cancel every queued or running job of the study (scheduler systems)."""
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
        from scalestudy.cli.messages import probe_lines

        for line in probe_lines(record, got.suggested, plan.study.scaling):
            out.print(line, highlight=False)
    if not record["largest_batch_that_fits"]:
        raise RunFailed(f"no batch from {min_batch} fits one GPU of {plan.system.name}")


