"""The published site's page data (`scalestudy publish`): what each page's JSON file holds,
as typed dicts whose JSON Schema the site ships beside them (schema/page.schema.json).

The schema is versioned by `SCHEMA`: a field added keeps the version (readers ignore
what they do not know); a field renamed, retyped or removed bumps it. Times are ISO 8601
in UTC; throughputs are the store's (work done over time taken, over all ranks), each
with its per-GPU and global batch size where the page lists configurations.
"""

from __future__ import annotations

from typing import Literal

# pydantic reads these TypedDicts' JSON Schema, which needs typing_extensions' below 3.12
from typing_extensions import TypedDict

#: The schema of every page this release writes.
SCHEMA = "scalestudy.site/1"


class Link(TypedDict):
    """Another page of the site, by its path relative to the site's root."""

    title: str
    href: str


class Point(TypedDict):
    """One campaign's measurement of one scale: the median of its repeats per GPU, the
    band of the repeats, and the efficiency against the campaign's smallest scale."""

    when: str
    campaign: str
    per_gpu: float
    low: float
    high: float
    efficiency: float | None
    repeats: int


class Scale(TypedDict):
    world_size: int
    points: list[Point]


class Series(TypedDict):
    """One configuration's history (system, model, per-GPU batch, backend, tuning, the
    rest of its work), one line per scale."""

    label: str
    unit: str
    point: dict[str, object]  # what a forecast of it names (model, batch_size, backend, ...)
    scales: list[Scale]


class Reading(TypedDict):
    when: str
    value: float


class Measure(TypedDict):
    """An imported measurement that is not a throughput (a ReFrame check's bandwidth or
    time, an nccl-tests bus bandwidth, a time to train) over time, one line each."""

    label: str
    unit: str
    readings: list[Reading]


class SizePoint(TypedDict):
    message_bytes: int
    value: float


class Curve(TypedDict):
    """One imported run of a message-size sweep (nccl-tests): its value per message size,
    drawn as bus bandwidth against message size; `label`: what it measured (collective,
    type, ranks, nodes), the same for the runs that compare."""

    label: str
    unit: str
    when: str
    study: str
    points: list[SizePoint]


class ChangeMark(TypedDict):
    """A change point (`history changes`) on a series."""

    series: str
    world_size: int
    when: str
    campaign: str
    size: float
    low: float
    high: float
    confirmed: bool
    cause: str
    changed: list[str]


class ProvenanceMark(TypedDict):
    """Provenance that changed between two consecutive campaigns of the system."""

    when: str
    what: list[str]


class FrontPoint(TypedDict):
    """A configuration on the best-known front (time and node-hours per million units;
    nodes and node-hours None: an import that did not say its nodes)."""

    configuration: str
    study: str
    ended: str | None
    nodes: int | None
    world_size: int
    batch_size: int | None
    global_batch: int | None
    backend: str | None
    tuning: str | None
    repeats: int
    throughput: float
    unit: str
    time_s: float
    node_hours: float | None


class Forecast(TypedDict):
    """A forecast from the ledger, and how it scored once a later study measured it."""

    made: str
    source: str
    point: dict[str, object]
    gpus: int
    throughput: float
    low: float
    high: float
    level: float
    unit: str
    measured: float | None
    runs: int
    inside: bool | None
    error: float | None


class ForecastScore(TypedDict):
    forecasts: int
    scored: int
    coverage: float | None
    median_abs_error: float | None


class SlowHost(TypedDict):
    host: str
    slower: float
    low: float
    high: float
    z: float
    runs: int
    studies: list[str]
    where: str


class SystemPage(TypedDict):
    """One system and model: its history, front, forecasts and slow nodes."""

    schema: str
    kind: Literal["system"]
    title: str
    system: str
    model: str
    updated: str | None
    attempts: int
    series: list[Series]
    measures: list[Measure]
    curves: list[Curve]  # the latest runs of each sweep (CURVES_KEPT of each label)
    changes: list[ChangeMark]
    provenance: list[ProvenanceMark]
    front: list[FrontPoint]
    forecasts: list[Forecast]
    forecast_score: ForecastScore | None
    slow_nodes: list[SlowHost]
    studies: list[Link]
    fallback: str | None  # the static PNG of the charts, relative to the page


class StudyRow(TypedDict):
    """One point of a study: the median over its completed repeats (latest attempts)."""

    model: str
    nodes: int | None
    world_size: int | None
    batch_size: int | None
    global_batch: int | None
    backend: str | None
    tuning: str | None
    completed: int
    failed: int
    throughput: float | None
    per_gpu: float | None
    unit: str


class StudyPage(TypedDict):
    schema: str
    kind: Literal["study"]
    title: str
    study: str
    system: str | None
    source: str
    directory: str  # its name (results/<name>), or an import's `import:<sha256>`
    campaigns: int
    started: str | None
    ended: str | None
    completed: int
    failed: int
    rows: list[StudyRow]
    report: str | None  # the study's report, copied into the site (relative to the page)
    pages: list[Link]  # the system pages it appears on


class IndexEntry(TypedDict):
    system: str
    model: str
    href: str
    updated: str | None
    attempts: int
    changes: int
    alarms: int  # confirmed drops, ever
    open_alarms: int  # those not since recovered (no later rise at the same series, scale)
    slow_nodes: int


class LastNight(TypedDict):
    """A system's last night: its attempts that ended in the 24 hours up to its last one
    (`since` to `until`), and what they show."""

    system: str
    since: str
    until: str
    studies: int
    completed: int
    failed: int
    open_alarms: int  # confirmed drops of its models not since recovered
    status: Literal["ok", "failed runs", "slower", "failed runs, slower"]


class IndexPage(TypedDict):
    schema: str
    kind: Literal["index"]
    title: str
    updated: str | None
    last_night: list[LastNight]  # one per system
    systems: list[IndexEntry]
    studies: list[Link]
