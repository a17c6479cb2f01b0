"""What people see in a terminal: rich tables that fit its width (the `--json` forms are
for machines; the CLI's own lines and progress bars are cli/messages.py).

A table never cuts a number: when its columns do not fit, headers break between words,
then ranges of numbers between their numbers, then the least important columns are
left out and the caption says which (runs.csv and `--json` have them all); text
columns (groups, variants, reasons) wrap instead.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from rich.markup import escape
from rich.table import Table

from scalestudy.core.values import number
from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.efficiency import unit_of
from scalestudy.workload.names import is_transformer
from scalestudy.workload.options import OPTIONS

if TYPE_CHECKING:
    import pandas as pd

#: Width a wrapping text column keeps at least, and what it gets of spare room before
#: a range of numbers does (to share a line).
MIN_TEXT, TEXT_ROOM = 12, 24
#: Width the reason of a failed run keeps at least in the status table.
STATUS_REASON = 40
#: Columns of this priority or more important are worth breaking ranges at their dashes.
DASH_WORTHY = 3
#: Where a header, or a cell of numbers, may break: after a space.
_SPACE = re.compile(r"(?<= )")
#: Where a cell of numbers may break at the last: also after the dash of a range
#: ("1,234.5 (1,200.0-1,300.0)" -> "1,234.5", "(1,200.0-", "1,300.0)").
_DASH = re.compile(r"(?<= )|(?<=\d-)")
#: How narrow a table is made: whole headers and cells; headers broken at spaces;
#: cells of numbers broken at spaces too (before any column is left out); at dashes
#: too (when only the essential columns are left, and they do not fit otherwise).
_WIDE, _HEADERS, _SPACES, _DASHES = 0, 1, 2, 3


@dataclass(frozen=True, eq=False)
class Column:
    """One column: its header, its cells, how important it is (0 = always shown),
    whether its text may wrap (text: anywhere; into `room` at least) or split (numbers:
    only between them)."""

    name: str
    cells: list[str]
    priority: int = 0
    wrap: bool = False
    right: bool = True
    split: bool = False
    room: int = MIN_TEXT


def _breaks(column: Column, stage: int) -> re.Pattern[str] | None:
    """Where the column's cells may break at a stage of narrowing."""
    if not column.split or stage < _SPACES:
        return None
    return _DASH if stage >= _DASHES else _SPACE


def _pack(text: str, width: int, pattern: re.Pattern[str] | None) -> str:
    """`text` broken where `pattern` allows into lines of at most `width` (a piece
    longer than that stays whole, on a line of its own)."""
    if pattern is None:
        return text
    lines: list[str] = []
    line = ""
    for piece in pattern.split(text):
        if line and len((line + piece).rstrip()) > width:
            lines.append(line.rstrip())
            line = ""
        line += piece
    return "\n".join([*lines, line.rstrip()])


def _longest(texts: Sequence[str], pattern: re.Pattern[str] | None = None) -> int:
    """The longest text, or the longest piece of one when `pattern` breaks them."""
    return max((len(p.strip()) for t in texts for p in (pattern.split(t) if pattern else [t])),
               default=0)


def _width(column: Column, stage: int) -> int:
    """The width a column needs at a stage of narrowing (a text column: what it keeps
    at least; it wraps into whatever more the table leaves it)."""
    header = _longest([column.name], _SPACE if stage >= _HEADERS else None)
    if column.wrap:
        return min(max(header, _longest(column.cells)), max(column.room, header))
    return max(header, _longest(column.cells, _breaks(column, stage)))


def _table_width(columns: Sequence[Column], stage: int) -> int:
    """A table's width: each column's content, padding (2) and left border (1), and
    the right border (1), as rich draws its default box."""
    return sum(_width(c, stage) + 3 for c in columns) + 1


def _choose(columns: Sequence[Column], limit: int) -> tuple[list[Column], int]:
    """The columns shown and the stage of narrowing that makes them fit `limit`: the
    least narrowing, leaving out the least important columns first; ranges break at
    their dashes only to keep a column of priority up to `DASH_WORTHY`. Then what fits
    of the columns left out comes back, the most important first."""
    shown = list(columns)

    def stage_that_fits(most: int) -> int | None:
        return next((s for s in range(most + 1) if _table_width(shown, s) <= limit), None)

    stage: int | None = None
    for most, least_kept in ((_SPACES, DASH_WORTHY), (_DASHES, 0)):
        while (stage := stage_that_fits(most)) is None:
            droppable = [c for c in shown if c.priority > least_kept]
            if not droppable:
                break
            shown.remove(max(droppable, key=lambda c: (c.priority, shown.index(c))))
        if stage is not None:
            break
    stage = _DASHES if stage is None else stage  # narrower than the essential columns
    for column in sorted((c for c in columns if c not in shown), key=lambda c: c.priority):
        shown.append(column)
        if _table_width(shown, stage) > limit:
            shown.remove(column)
    shown.sort(key=list(columns).index)
    return shown, stage


def fit_table(title: str, columns: Sequence[Column], width: int | None,
              caption: str = "") -> Table:
    """A table that fits `width`: its headers, then its cells of numbers, break between
    words first; then its least important columns are left out, named in the caption.
    Numbers are never cut: each number column is as wide as its widest number (or
    piece of a range), text columns wrap into the rest."""
    limit = width or 10_000
    shown, stage = _choose(columns, limit)
    spare = max(0, limit - _table_width(shown, stage) - sum(
        max(0, min(_longest([c.name, *c.cells]), TEXT_ROOM) - _width(c, stage))
        for c in shown if c.wrap))
    table = Table(title=title, title_justify="left", caption_justify="left")
    sizes: list[int] = []
    for column in shown:
        justify: Literal["left", "right"] = "right" if column.right else "left"
        size = _width(column, stage)
        if column.wrap:
            table.add_column(escape(column.name), justify=justify, overflow="fold")
        else:
            if column.split and stage >= _SPACES:  # spare room lets numbers share a line
                grow = min(spare, _width(column, stage - 1) - size)
                size, spare = size + grow, spare - grow
            table.add_column(escape(_pack(column.name, size, _SPACE if stage else None)),
                             justify=justify, no_wrap=True, overflow="fold", width=size)
        sizes.append(size)
    for i in range(len(columns[0].cells) if columns else 0):
        table.add_row(*(escape(_pack(c.cells[i], size, _breaks(c, stage)))
                        for c, size in zip(shown, sizes, strict=True)))
    left_out = [c.name for c in columns if c not in shown]
    notes = [caption] if caption else []
    if left_out:
        notes.append(f"left out at this width ({limit} columns): {', '.join(left_out)}; "
                     "widen the terminal, or see runs.csv / --json")
    table.caption = "\n".join(notes) or None
    return table


def _num(value: object, fmt: str) -> str:
    found = number(value, text=True, booleans=True)
    return "n/a" if found is None else format(found, fmt)


def plan_table(summary: dict[str, Any], width: int | None = None) -> Table:
    """The expanded runs of a study, with run count and node-hours in the caption; a
    column per grid axis over a training option (precision always), "-" where the
    option does not apply to the run's backend, and the container where there is one."""

    runs = summary["runs"]
    axes = [o.name for o in OPTIONS if o.name != "precision"
            and any(o.name in r for r in runs)]

    def cells(key: str) -> list[str]:
        return ["-" if r.get(key) is None else str(r[key]) for r in runs]

    columns = [Column("run id", cells("run_id"), right=False),
               Column("nodes", cells("nodes")), Column("ranks/node", cells("ranks_per_node")),
               Column("world size", cells("world_size")),
               *([Column("dp x tp x pp", [f"{r['dp']} x {r.get('tp') or 1} x "
                                          f"{r.get('pp') or 1}" for r in runs], 1)]
                 if any(r.get(col.DP) not in (None, r[col.WORLD_SIZE]) for r in runs) else []),
               Column("batch/replica (seqs)" if any(is_transformer(r.get(col.MODEL))
                                                    for r in runs) else "per-GPU batch",
                      cells("batch_size")),
               Column("global batch", cells("global_batch")),
               Column("backend", cells("backend"), 2, right=False),
               Column("tuning", cells("tuning"), 1, wrap=True, right=False),
               Column("precision", cells("precision"), 3, right=False),
               *([Column("container", cells("container"), 1, wrap=True, right=False)]
                 if any("container" in r for r in runs) else []),
               *(Column(a, cells(a), 3, right=False) for a in axes),
               Column("repeat", cells("repeat"), 2), Column("state", cells("state"),
                                                             right=False)]
    caption = (f"{summary['run_count']} runs: at most {summary['node_hours_max']:g} "
               f"node-hours (every run using its walltime {summary['walltime']}); expected "
               f"{summary['node_hours_expected']:g} ({summary['runs_measured']} of "
               f"{summary['run_count']} timed from runs of the same shape, the rest at "
               "their walltime)")
    return fit_table(f"{summary['study']}: {summary['scaling']} scaling on "
                     f"{summary['system']}", columns, width, caption)


def scaling_rich_table(table: pd.DataFrame, study: str, width: int | None = None) -> Table:
    """The scaling table (a DataFrame from results.analysis.efficiency.scaling_table)."""
    rows = list(table.itertuples(index=False))
    comm = "comm_overhead" in table and table[col.COMM_OVERHEAD].notna().any()
    flags = "flags" in table and (table[col.FLAGS].fillna("") != "").any()
    unit = unit_of(table)
    columns = [
        Column("group", [str(r.group) for r in rows], wrap=True, right=False),
        Column("GPUs", [str(r.world_size) for r in rows]),
        Column("nodes x ranks", [f"{r.nodes} x {r.ranks_per_node}" for r in rows], 4),
        Column("batch/GPU", [str(r.batch_size) for r in rows]),
        Column("global batch", [str(r.global_batch) for r in rows]),
        Column(f"{unit} (min-max)", [
            f"{r.throughput_median:,.1f} ({r.throughput_min:,.1f}-{r.throughput_max:,.1f})"
            for r in rows], split=True),
        Column(f"{unit} per GPU", [f"{r.throughput_per_gpu:,.1f}" for r in rows], 2),
        Column("speedup", [f"{r.speedup:.2f}" for r in rows], 3),
        Column("efficiency", [f"{r.efficiency:.1%}" for r in rows]),
        Column("repeats", [str(r.n_repeats) for r in rows], 5),
    ]
    if comm:
        columns.append(Column("comm", [_num(r.comm_overhead, ".1%") for r in rows], 4))
    mfu = "mfu" in table and table[col.MFU].notna().any()
    if mfu:
        columns.append(Column("MFU", [_num(r.mfu, ".1%") for r in rows], 3))
    if flags:
        columns.append(Column("flags", [str(r.flags or "").replace(",", ", ") for r in rows],
                              1, wrap=True, right=False))
    caption = "" if rows else "no completed runs yet"
    if mfu:
        peak = table[col.PEAK_TFLOPS].dropna()
        seq = table[col.SEQ_LEN].dropna() if "seq_len" in table else peak[:0]
        caption = (f"MFU against {peak.max():.4g} TFLOP/s per GPU (one peak for the study)"
                   + (f", sequence length {int(seq.max())}" if len(seq) else "")
                   + "; attention counted in full")
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

    jobs = [Column("job id", [r.get(col.JOB_ID) or "" for r in rows], 3, right=False)
            ] if any(r.get(col.JOB_ID) for r in rows) else []  # none here: a local study
    columns = [Column("run id", [r[col.RUN_ID] for r in rows], right=False), *jobs,
               Column("nodes x ranks", [f"{r['nodes']} x {r['ranks_per_node']}" for r in rows]),
               Column("batch/GPU", [str(r[col.BATCH_SIZE]) for r in rows], 2),
               Column("global batch", [str(r[col.GLOBAL_BATCH]) for r in rows], 4),
               Column("tuning", [r[col.TUNING] for r in rows], 3, wrap=True, right=False),
               Column("repeat", [str(r["repeat"]) for r in rows], 4),
               Column("state", [r[col.STATE] for r in rows], right=False),
               Column("reason", [reason(r) for r in rows], wrap=True, right=False,
                      room=STATUS_REASON)]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r[col.STATE]] = counts.get(r[col.STATE], 0) + 1
    return fit_table(f"{study}: run states", columns, width,
                     ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))


def text_table(title: str, headers: list[str], rows: list[list[str]],
               caption: str = "", width: int | None = None) -> Table:
    """Any table of text cells (the first column left-aligned; later columns are left
    out first when it does not fit)."""
    columns = [Column(h, [row[i] for row in rows], priority=0 if i < 2 else i,
                      right=i > 0) for i, h in enumerate(headers)]
    return fit_table(title, columns, width, caption)
