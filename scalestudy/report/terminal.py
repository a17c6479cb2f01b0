"""What people see in a terminal: rich tables that fit its width and progress bars (the
`--json` forms are for machines).

A table never cuts a number: when its columns do not fit, the least important ones
are left out and the caption says which (runs.csv and `--json` have them all); text
columns (groups, reasons) wrap instead.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

#: Width a wrapping text column keeps at least.
MIN_TEXT = 12


@dataclass(frozen=True)
class Column:
    """One column: its header, its cells, how important it is (0 = always shown) and
    whether its text may wrap."""

    name: str
    cells: list[str]
    priority: int = 0
    wrap: bool = False
    right: bool = True


def _width(col: Column) -> int:
    longest = max([len(col.name), *(len(c) for c in col.cells)])
    return min(longest, max(MIN_TEXT, len(col.name))) if col.wrap else longest


def fit_table(title: str, columns: Sequence[Column], width: int | None,
              caption: str = "") -> Table:
    """A table of the columns that fit `width` (each needs its widest cell plus 3 for
    borders and padding), the least important left out first and named in the caption."""
    shown = list(columns)
    left_out: list[str] = []
    limit = width or 10_000
    while sum(_width(c) + 3 for c in shown) + 1 > limit:
        droppable = [c for c in shown if c.priority > 0]
        if not droppable:
            break
        worst = max(droppable, key=lambda c: (c.priority, shown.index(c)))
        shown.remove(worst)
        left_out.append(worst.name)
    table = Table(title=title, title_justify="left", caption_justify="left")
    for col in shown:
        table.add_column(col.name, justify="right" if col.right else "left",
                         no_wrap=not col.wrap, overflow="fold",
                         min_width=None if col.wrap else _width(col))
    for i in range(len(columns[0].cells) if columns else 0):
        table.add_row(*(escape(c.cells[i]) for c in shown))
    notes = [caption] if caption else []
    if left_out:
        notes.append(f"left out at this width ({limit} columns): {', '.join(left_out)}; "
                     "widen the terminal, or see runs.csv / --json")
    table.caption = "\n".join(notes) or None
    return table


def _num(value: Any, fmt: str) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "n/a"
    return format(number, fmt) if math.isfinite(number) else "n/a"


def plan_table(summary: dict[str, Any], width: int | None = None) -> Table:
    """The expanded runs of a study, with run count and node-hours in the caption; a
    column per grid axis over a training option (precision always), "-" where the
    option does not apply to the run's backend."""
    from scalestudy.workload.options import OPTIONS

    runs = summary["runs"]
    axes = [o.name for o in OPTIONS if o.name != "precision"
            and any(o.name in r for r in runs)]

    def cells(key: str) -> list[str]:
        return ["-" if r.get(key) is None else str(r[key]) for r in runs]

    columns = [Column("run id", cells("run_id"), right=False),
               Column("nodes", cells("nodes")), Column("ranks/node", cells("ranks_per_node")),
               Column("world size", cells("world_size")),
               Column("per-GPU batch", cells("batch_size")),
               Column("global batch", cells("global_batch")),
               Column("backend", cells("backend"), 2, right=False),
               Column("tuning", cells("tuning"), 1, right=False),
               Column("precision", cells("precision"), 3, right=False),
               *(Column(a, cells(a), 3, right=False) for a in axes),
               Column("repeat", cells("repeat"), 2), Column("state", cells("state"),
                                                             right=False)]
    caption = (f"{summary['run_count']} runs, at most {summary['node_hours_max']:g} "
               f"node-hours (nodes x walltime {summary['walltime']})")
    return fit_table(f"{summary['study']}: {summary['scaling']} scaling on "
                     f"{summary['system']}", columns, width, caption)


def scaling_rich_table(table: Any, study: str, width: int | None = None) -> Table:
    """The scaling table (a DataFrame from results.analyze.scaling_table)."""
    rows = list(table.itertuples(index=False))
    comm = "comm_overhead" in table and table["comm_overhead"].notna().any()
    flags = "flags" in table and (table["flags"].fillna("") != "").any()
    unit = "img/s"
    columns = [
        Column("group", [str(r.group) for r in rows], wrap=True, right=False),
        Column("GPUs", [str(r.world_size) for r in rows]),
        Column("nodes x ranks", [f"{r.nodes} x {r.ranks_per_node}" for r in rows], 4),
        Column("batch/GPU", [str(r.batch_size) for r in rows]),
        Column("global batch", [str(r.global_batch) for r in rows]),
        Column(f"{unit} (min-max)", [
            f"{r.throughput_median:,.1f} ({r.throughput_min:,.1f}-{r.throughput_max:,.1f})"
            for r in rows]),
        Column(f"{unit} per GPU", [f"{r.throughput_per_gpu:,.1f}" for r in rows], 2),
        Column("speedup", [f"{r.speedup:.2f}" for r in rows], 3),
        Column("efficiency", [f"{r.efficiency:.1%}" for r in rows]),
        Column("repeats", [str(r.n_repeats) for r in rows], 5),
    ]
    if comm:
        columns.append(Column("comm", [_num(r.comm_overhead, ".1%") for r in rows], 4))
    if flags:
        columns.append(Column("flags", [str(r.flags or "") for r in rows], 1, wrap=True,
                              right=False))
    caption = "" if rows else "no completed runs yet"
    return fit_table(f"{study}: throughput ({unit} over all ranks, median over repeats)",
                     columns, width, caption)


def status_table(study: str, rows: list[dict[str, Any]], width: int | None = None) -> Table:
    """Each run's state, job id and, for a failed run, its class and decisive line."""
    def reason(r: dict[str, Any]) -> str:
        if not r.get("failure"):
            return r.get("reason") or ""
        line = r.get("failure_line")
        text = f"{r['failure']}: {r.get('reason') or ''}"
        return text + (f" | {line}" if line and line != r.get("reason") else "")

    columns = [Column("run id", [r["run_id"] for r in rows], right=False),
               Column("job id", [r.get("job_id") or "" for r in rows], 3, right=False),
               Column("nodes x ranks", [f"{r['nodes']} x {r['ranks_per_node']}" for r in rows]),
               Column("batch/GPU", [str(r["batch_size"]) for r in rows], 2),
               Column("global batch", [str(r["global_batch"]) for r in rows], 4),
               Column("tuning", [r["tuning"] for r in rows], 3, right=False),
               Column("repeat", [str(r["repeat"]) for r in rows], 4),
               Column("state", [r["state"] for r in rows], right=False),
               Column("reason", [reason(r) for r in rows], wrap=True, right=False)]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    return fit_table(f"{study}: run states", columns, width,
                     ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))


def text_table(title: str, headers: list[str], rows: list[list[str]],
               caption: str = "", width: int | None = None) -> Table:
    """Any table of text cells (the first column left-aligned; later columns are left
    out first when it does not fit)."""
    columns = [Column(h, [row[i] for row in rows], priority=0 if i < 2 else i,
                      right=i > 0) for i, h in enumerate(headers)]
    return fit_table(title, columns, width, caption)


def failure_lines(plan: Any, states_only_failed: bool = True) -> list[str]:
    """One line per failed run: its id, class and decisive line, and its stderr.log."""
    from scalestudy.execute.status import read_status

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
def local_progress(console: Console, plan: Any, total: int
                   ) -> Iterator[Callable[[Any, dict[str, Any] | None], None] | None]:
    """A progress bar for runs executed here; yields the executor's progress callback."""
    if not total:
        yield None
        return
    with Progress("[progress.description]{task.description}", BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("runs", total=total)

        def progress(r: Any, status: dict[str, Any] | None) -> None:
            if status is None:
                bar.update(task, description=f"{r.run_id} {r.nodes}x{r.ranks_per_node} "
                           f"b{r.batch_size} rep {r.repeat}")
                return
            bar.advance(task)
            if status["state"] != "completed":
                line = status.get("failure_line") or status.get("reason")
                bar.console.print(f"failed {r.run_id} ({status.get('failure') or 'unknown'}):"
                                  f" {line}  [{plan.run_dir(r) / 'stderr.log'}]",
                                  markup=False, highlight=False)

        yield progress


@contextlib.contextmanager
def queue_progress(console: Console, run_ids: list[str]
                   ) -> Iterator[Callable[[dict[str, Any]], None]]:
    """A progress bar over the states of submitted runs; yields the follower's callback."""
    ids = set(run_ids)
    with Progress("[progress.description]{task.description}", BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("jobs", total=len(ids))

        def progress(views: dict[str, Any]) -> None:
            counts: dict[str, int] = {}
            for i in ids:
                counts[str(views[i].state)] = counts.get(str(views[i].state), 0) + 1
            ended = counts.get("completed", 0) + counts.get("failed", 0)
            bar.update(task, completed=ended, description=", ".join(
                f"{n} {s}" for s, n in sorted(counts.items())))

        yield progress


def selection_notes(selection: Any) -> list[str]:
    """Which failed runs a `run` leaves as they are, and how to run them again."""
    def some(runs: list[Any]) -> str:
        return ", ".join(r.run_id for r in runs[:5]) + (", ..." if len(runs) > 5 else "")

    notes = []
    if selection.failed_kept:
        notes.append(f"{len(selection.failed_kept)} failed run(s) left as they are "
                     f"({some(selection.failed_kept)}): run again with --rerun failed to "
                     "retry them")
    if selection.exhausted:
        notes.append(f"{len(selection.exhausted)} run(s) failed every allowed attempt and are "
                     f"left ({some(selection.exhausted)}): see `scalestudy status`; raise "
                     "--max-attempts to try again")
    return notes


def probe_lines(record: dict[str, Any], suggested: list[int]) -> list[str]:
    """The batch-size probe's answer for people."""
    lines = []
    for point in record["points"]:
        shown = (f"{point['throughput']:.1f} img/s on 1 GPU" if point["fits"]
                 else "does not fit")
        lines.append(f"  per-GPU batch {point['batch_size']:>6}: {shown}")
    best = record["largest_batch_that_fits"]
    lines.append(f"largest per-GPU batch that fits: {best if best else 'none'} "
                 f"({record['model']}, {record['image_size']}px, {record['precision']}, "
                 f"{record['device']})")
    if suggested:
        lines.append("for the grid (weak scaling, per-GPU batch): batch_size: "
                     f"[{', '.join(map(str, suggested))}]")
    return lines


def queued_lines(queued: Any) -> list[str]:
    """What `run` did on a scheduler: adopted and submitted jobs."""
    lines = [f"found job {job_id} of {run_id}, queued by an interrupted run: recorded"
             for run_id, job_id in queued.adopted]
    lines += [f"submitted {r.run_id} as job {job_id}: {r.nodes}x{r.ranks_per_node} ranks, "
              f"batch {r.batch_size}/GPU ({r.global_batch} global)"
              for r, job_id in queued.submitted]
    return lines
