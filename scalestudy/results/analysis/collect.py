"""Gather the run directories of a study into one tidy table (`runs.csv`).

One row per planned run, in plan order: the run's parameters (the keys of run.json),
then how it ended (`state`, `reason`, `exit_code`, `elapsed_s`, and for a failed run the
`failure` class and its `failure_line`, see execute.diagnose), then the flattened
metric record (the last valid line of metrics.jsonl). See docs/results-layout.md.

Nothing a job leaves behind (a missing, empty, truncated or garbled file, a NaN
throughput) makes `collect` crash: such a run is reported as `failed` with a reason.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path

import pandas as pd

from scalestudy.core.states import RunState
from scalestudy.core.values import JSON, JSONMapping
from scalestudy.execute.status import read_status
from scalestudy.execute.workspace import write_atomic
from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis import fork_pool

#: Columns that follow the parameter columns in runs.csv; `state` marks the boundary.
STATUS_COLUMNS: tuple[str, ...] = ("state", "reason", "exit_code", "elapsed_s", "failure",
                                   "failure_line", "job_power_w")
#: Run states in the order summaries list them (core.states defines them).
STATES: tuple[str, ...] = tuple(s.value for s in (
    RunState.COMPLETED, RunState.FAILED, RunState.RUNNING, RunState.HELD, RunState.QUEUED,
    RunState.INTERRUPTED, RunState.PENDING))
#: Prefix given to a metric key that has the name of a parameter or status column.
METRIC_PREFIX = "metric_"



#: Types a cell holds as they are (str() of each is its text in a joined list).
_SCALARS = frozenset({str, int, float, bool})


#: What one cell of the run table holds.
Cell = str | int | float | bool | None


def _cell(value: object) -> Cell:
    """A value fit for one table cell: scalars as they are, anything else as JSON."""
    if value is None or isinstance(value, (str, int, float)):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def _joined(values: Sequence[JSON]) -> str:
    """A list as one cell: its items joined with "," (None as empty, objects as JSON).
    A list of plain scalars, the common case (hosts, per-rank times), is joined at C
    speed."""
    if _SCALARS.issuperset(map(type, values)):
        return ",".join(map(str, values))
    return ",".join("" if v is None else str(_cell(v)) for v in values)


def flatten_record(record: JSONMapping, prefix: str = "") -> dict[str, Cell]:
    """Scalars as they are, nested objects as `a.b`, lists joined with "," (e.g. hosts)."""
    out: dict[str, Cell] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten_record(value, prefix=f"{name}."))
        elif isinstance(value, (list, tuple)):
            out[name] = _joined(value)
        else:
            out[name] = _cell(value)
    return out


def _missing_ranks(params: JSONMapping, record: JSONMapping | None) -> str | None:
    """Why a record does not cover every rank of its run (None when it does or cannot say):
    a throughput summed over fewer ranks than the run had is not the run's throughput."""
    if record is None:
        return None
    planned, reported = params.get(col.WORLD_SIZE), record.get(col.WORLD_SIZE)
    if isinstance(planned, bool) or isinstance(reported, bool):
        return None
    if isinstance(planned, int) and isinstance(reported, int) and reported != planned:
        return (f"metrics record covers {reported} rank(s) of the run's {planned} "
                "(missing ranks)")
    return None


#: Runs worth a forked process of their own when collect reads many run directories.
MIN_RUNS_PER_PROCESS = 1000


def _read_runs(study_dir: Path, planned: Sequence[JSONMapping]
               ) -> list[tuple[dict[str, object], dict[str, Cell] | None]]:
    """How each run ended (status columns) and its flattened record (None: none)."""
    out = []
    for params in planned:
        found = read_status(study_dir / "runs" / str(params[col.RUN_ID]), diagnose=True)
        status = found.columns()
        missing = (_missing_ranks(params, found.record)
                   if found.state is RunState.COMPLETED else None)
        if missing:
            status.update(state=RunState.FAILED.value, reason=missing, failure="unknown",
                          failure_line=missing)
        out.append((status, None if found.record is None else flatten_record(found.record)))
    return out


def collect(study_dir: Path, planned: Sequence[JSONMapping]) -> pd.DataFrame:
    """One row per planned run (plan order); also written atomically to `runs.csv`."""
    study_dir = Path(study_dir)
    param_cols: list[str] = []
    for params in planned:
        param_cols.extend(k for k in params if k not in param_cols)
    reserved = set(param_cols) | set(STATUS_COLUMNS)

    rows: list[dict[str, object]] = []
    metric_cols: list[str] = []
    pieces = fork_pool.chunks(planned, fork_pool.workers(len(planned) // MIN_RUNS_PER_PROCESS))
    read = fork_pool.mapped(partial(_read_runs, study_dir), pieces)
    for params, (status, metrics) in zip(planned, (r for part in read for r in part),
                                         strict=True):
        row: dict[str, object] = {k: _cell(params.get(k)) for k in param_cols}
        row.update(status)
        for key, value in (metrics or {}).items():
            column = f"{METRIC_PREFIX}{key}" if key in reserved else key
            if column not in metric_cols:
                metric_cols.append(column)
            row[column] = value
        rows.append(row)
    if "throughput" not in metric_cols:
        metric_cols.insert(0, "throughput")

    columns = [*param_cols, *STATUS_COLUMNS, *metric_cols]
    runs = pd.DataFrame(rows, columns=columns)
    runs[col.THROUGHPUT] = pd.to_numeric(runs[col.THROUGHPUT], errors="coerce").astype(float)
    runs["exit_code"] = runs["exit_code"].astype("Int64")
    runs["elapsed_s"] = pd.to_numeric(runs["elapsed_s"], errors="coerce").astype(float)
    write_csv_atomic(runs, study_dir / "runs.csv")
    return runs


def write_csv_atomic(frame: pd.DataFrame, path: Path) -> None:
    """A frame as CSV, through the one atomic writer."""
    buffer = io.StringIO()
    frame.to_csv(buffer, index=False)
    write_atomic(Path(path), buffer.getvalue())


def read_runs(path: Path) -> pd.DataFrame:
    """Load a runs.csv written by `collect` (run ids stay strings)."""
    return pd.read_csv(path, dtype={"run_id": str, "reason": str, "state": str,
                                    "failure": str, "failure_line": str})
