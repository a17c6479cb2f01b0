"""The results store's rows as typed records: an attempt (with its study's fields) and a
forecast the ledger keeps. Store.rows and Store.forecasts return them; the history pages,
exports, changes and regression gates read them; imports write attempts without the ids.

Each key is a column of results.history.schema; the JSON columns (params, metrics,
provenance, point, model) hold what their writer wrote, read with core.values.number or
narrowed with isinstance.
"""

from __future__ import annotations

from datetime import datetime
from typing import TypedDict

from scalestudy.core.values import JSONObject


class AttemptRow(TypedDict, total=False):
    """One attempt as the store holds it (`attempts` joined with its `studies` row). Not
    total: imports write rows without ids and study fields, and tests build rows by hand."""

    id: int
    study_id: int
    run_id: str
    attempt: int
    state: str
    nodes: int | None
    ranks_per_node: int | None
    world_size: int | None
    batch_size: int | None
    global_batch: int | None
    backend: str | None
    tuning: str | None
    model: str | None
    repeat: int | None
    throughput: float | None
    throughput_per_gpu: float | None
    unit: str
    started: datetime | None
    ended: datetime | None
    params: JSONObject
    metrics: JSONObject | None
    provenance: JSONObject
    tags: list[str]
    campaign: str | None
    # from the study's row
    study: str
    directory: str
    system: str | None
    system_file: str | None
    source: str


class ForecastRow(TypedDict, total=False):
    """One forecast the ledger keeps (results.history.ledger.entries writes them)."""

    id: int
    made: datetime
    system: str
    source: str
    point: JSONObject  # model, batch_size, backend, tuning
    gpus: int
    throughput: float
    low: float
    high: float
    level: float
    unit: str
    model: JSONObject  # the fitted model's parameters and what it was fitted on


def _stored(row: AttemptRow, key: str) -> float:
    """A number every kept attempt has: an error naming the attempt where it is absent."""
    value = row.get(key)
    if value is None:
        raise TypeError(f"stored attempt {row.get('run_id')!r} has no {key}")
    return float(value)  # type: ignore[arg-type]  # the row's numbers: float or int


def per_gpu(row: AttemptRow) -> float:
    """A measured attempt's throughput per GPU (callers keep those that have one)."""
    return _stored(row, "throughput_per_gpu")


def throughput(row: AttemptRow) -> float:
    """A measured attempt's throughput (callers keep those that have one)."""
    return _stored(row, "throughput")


def world_size(row: AttemptRow) -> int:
    """An attempt's GPUs (every stored measurement has them)."""
    return int(_stored(row, "world_size"))


def ended(row: AttemptRow) -> datetime:
    """When an ended attempt ended (callers keep those that say)."""
    value = row.get("ended")
    if value is None:
        raise TypeError(f"stored attempt {row.get('run_id')!r} has no end time")
    return value
