"""The CLI's own words: one line per failed run, progress bars over local and queued
runs, what a `run` leaves as it is, what it submitted, the batch-size probe's answer.
Typed with the use cases' values (study.Selection, study.Queued, site.plan.Plan)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from scalestudy.core.grid import Run, describe_run
from scalestudy.core.spec import Study
from scalestudy.core.states import RunState
from scalestudy.execute.status import RunStatus, read_status
from scalestudy.execute.tracking import RunView
from scalestudy.site.plan import Plan
from scalestudy.study import Queued, Selection


def failure_lines(plan: Plan, states_only_failed: bool = True) -> list[str]:
    """One line per failed run: its id, class and decisive line, and its stderr.log."""
    lines = []
    for run in plan.runs:
        found = read_status(plan.run_dir(run), diagnose=True)
        if found.state.value != "failed":
            continue
        decisive = found.failure_line or found.reason or "no reason recorded"
        lines.append(f"failed {run.run_id} ({found.failure or 'unknown'}): {decisive}  "
                     f"[{plan.run_dir(run) / 'stderr.log'}]")
    return lines


@contextlib.contextmanager
def local_progress(console: Console, plan: Plan, total: int
                   ) -> Iterator[Callable[[Run, RunStatus | None], None] | None]:
    """A progress bar for runs executed here; yields the executor's progress callback."""
    if not total:
        yield None
        return
    with Progress("[progress.description]{task.description}", BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("runs", total=total)

        def progress(r: Run, status: RunStatus | None) -> None:
            if status is None:
                bar.update(task, description=f"{r.run_id} {describe_run(plan.study, r, True)}"
                           f" rep {r.repeat}")
                return
            bar.advance(task)
            if status.state is not RunState.COMPLETED:
                line = status.failure_line or status.reason
                bar.console.print(f"failed {r.run_id} ({status.failure or 'unknown'}):"
                                  f" {line}  [{plan.run_dir(r) / 'stderr.log'}]",
                                  markup=False, highlight=False, soft_wrap=True)

        yield progress


@contextlib.contextmanager
def queue_progress(console: Console, run_ids: list[str]
                   ) -> Iterator[Callable[[dict[str, RunView]], None]]:
    """A progress bar over the states of submitted runs; yields the follower's callback."""
    ids = set(run_ids)
    with Progress("[progress.description]{task.description}", BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("jobs", total=len(ids))

        def progress(views: dict[str, RunView]) -> None:
            counts: dict[str, int] = {}
            for i in ids:
                counts[str(views[i].state)] = counts.get(str(views[i].state), 0) + 1
            ended = counts.get("completed", 0) + counts.get("failed", 0)
            bar.update(task, completed=ended, description=", ".join(
                f"{n} {s}" for s, n in sorted(counts.items())))

        yield progress


def selection_notes(selection: Selection) -> list[str]:
    """Which runs a `run` leaves as they are (completed, in the queue, failed), and how
    to run them again."""
    def some(runs: list[Run]) -> str:
        return ", ".join(r.run_id for r in runs[:5]) + (", ..." if len(runs) > 5 else "")

    notes = []
    if selection.done:  # a resume: say what it skips, so that M/M is not all there was
        notes.append(f"{len(selection.done)} run(s) completed already, skipped "
                     f"({some(selection.done)}); --rerun all runs them again")
    if selection.active:
        notes.append(f"{len(selection.active)} run(s) queued or running already, not "
                     f"submitted again ({some(selection.active)})")
    if selection.failed_kept:
        notes.append(f"{len(selection.failed_kept)} failed run(s) left as they are "
                     f"({some(selection.failed_kept)}): run again with --rerun failed to "
                     "retry them")
    if selection.exhausted:
        notes.append(f"{len(selection.exhausted)} run(s) failed every allowed attempt and are "
                     f"left ({some(selection.exhausted)}): see `scalestudy status`; raise "
                     "--max-attempts to try again")
    return notes


def probe_lines(record: dict[str, Any], suggested: list[int], scaling: str = "weak"
                ) -> list[str]:
    """The batch-size probe's answer for people (it measures the per-GPU batch)."""
    lines = []
    for point in record["points"]:
        shown = (f"{point['throughput']:.1f} img/s on 1 GPU" if point["fits"]
                 else "does not fit")
        lines.append(f"  per-GPU batch {point['batch_size']:>6}: {shown}")
    best = record["largest_batch_that_fits"]
    lines.append(f"largest per-GPU batch that fits: {best if best else 'none'} "
                 f"({record['model']}, {record['image_size']}px, {record['precision']}, "
                 f"{record['device']})")
    if suggested and scaling == "weak":
        lines.append("for the grid (weak scaling, per-GPU batch): batch_size: "
                     f"[{', '.join(map(str, suggested))}]")
    elif suggested:
        lines.append(f"for the grid (strong scaling): a global_batch G runs on P GPUs when "
                     f"G / P <= {best}, e.g. global_batch: [{best * 8}] up to 8 GPUs")
    return lines


def queued_lines(queued: Queued, study: Study) -> list[str]:
    """What `run` did on a scheduler: adopted and submitted jobs."""
    lines = [f"found job {job_id} of {run_id}, queued by an interrupted run: recorded"
             for run_id, job_id in queued.adopted]
    lines += [f"submitted {r.run_id} as job {job_id}: {describe_run(study, r)}"
              for r, job_id in queued.submitted]
    return lines


def adaptive_lines(study: str, got: dict[str, Any]) -> list[str]:
    """`plan --adaptive`'s lines: the grid, the rule, what was dropped or left out, and
    the next round (or why nothing is left)."""
    lines = [f"adaptive study {study}: {got['alternatives']} alternative(s), {got['points']} "
             f"point(s), {got['node_hours_grid']:,.2f} node-hours for the whole grid (nodes x "
             "walltime)", f"rule: {got['rule']}"]
    lines += [f"compared by: {got['objective']}"] if got.get("objective") else []
    lines += [f"note: {note}" for note in got.get("notes", [])]
    lines += [f"dropped {d['alternative']}: {d['evidence']}" for d in got["dropped"]]
    lines += [f"not measured: {d['alternative']} on {d['nodes']} node(s): {d['evidence']}"
              for d in got["skipped"]]
    lines += [f"repeats stopped: {d['alternative']} on {d['nodes']} node(s): {d['evidence']}"
              for d in got.get("halved", [])]
    if got.get("tally", {}).get("node_hours"):
        t = got["tally"]
        lines.append(f"so far: {t['measured_fully']} point(s) measured fully, "
                     f"{t['measured_partly']} partly, {t['not_measured']} not at all; "
                     f"{t['node_hours']:,.2f} node-hours ({t['share']:.1%} of the grid's)")
    if not got["next"]:
        return [*lines, f"nothing left to run: {got['stop']}"]
    lines.append(f"round {got['round']}: {len(got['next'])} point(s), "
                 f"{got['node_hours_round']:,.2f} node-hours at most:")
    return lines + [f"  {p['alternative']} on {p['nodes']} node(s): {len(p['runs'])} run(s)"
                    for p in got["next"]]
