"""Stored history written out for the tools teams track regressions with: Bencher's
metric format (BMF JSON), an Apache Otava CSV with the YAML config that reads it, and a
plain CSV of every stored attempt. Pure: rows in (Store.rows), text or dicts out.

Every point is named the same way in both trackers (`point_name`): its system, model,
nodes x ranks per node (world size), per-GPU and global batch, backend/tuning and the
rest of its work, e.g. `lab resnet50 2x4 (8 GPUs) batch 32/GPU (256 global) ddp/default
image_size=224`. A point's measurements are grouped into campaigns as `history changes`
groups them (results.history.changes.series: completed attempts with a throughput).

- **Bencher** (BMF, https://bencher.dev/docs/reference/bencher-metric-format):
  `{benchmark: {measure: {value, lower_value?, upper_value?}}}`, one report per
  `bencher run`: one campaign of each point, its latest. Measures: `throughput` (the
  median of the campaign's repeats of the whole job's throughput, in the point's unit,
  img/s or tokens/s; lower/upper: the slowest and the fastest repeat), `throughput-per-gpu`
  (the same per GPU), `step-time` (seconds, where the runs recorded `step_time_s`), and
  `scaling-efficiency` (per-GPU throughput over that of the curve's smallest world size
  measured in the same campaign; only where the campaign measured two scales or more of
  the curve). Bounds are given where there are two repeats or more.
- **Otava** (CSV data source): one study's campaigns, one row per campaign, oldest
  first: `time` (when its last run ended, ISO 8601 UTC), attributes (`campaign`,
  `study`, each recorded version as `<name>_version`, `program_commit`, `not_measured`)
  and one column per point, `<point name> [<unit> per GPU]`: the median per-GPU
  throughput of its repeats. Otava reads no empty cell, so a point a campaign did not
  measure carries the campaign before's value (the one after for the first campaigns:
  Otava's own rule for missing data, analysis.fill_missing), and `not_measured` names it.
- **CSV**: every stored attempt, in the store's order, with ATTEMPT_COLUMNS; tags,
  parameters, metrics and provenance are JSON cells (sorted keys), times ISO 8601 UTC.
"""

from __future__ import annotations

import csv
import io
import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import yaml

from scalestudy.core.errors import ScalestudyError
from scalestudy.core.values import member
from scalestudy.results.analysis import columns as col
from scalestudy.results.history import rows as stored
from scalestudy.results.history.changes import series
from scalestudy.results.history.regression import Point, work_of
from scalestudy.results.history.rows import AttemptRow
from scalestudy.results.history.store import OWN, as_utc, campaign_of

#: The formats `history export` writes.
FORMATS: tuple[str, ...] = ("bencher", "otava", "csv")
#: BMF measure slugs (`throughput` is Bencher's built-in Throughput measure).
THROUGHPUT = "throughput"
THROUGHPUT_PER_GPU = "throughput-per-gpu"
SCALING_EFFICIENCY = "scaling-efficiency"
STEP_TIME = "step-time"
#: The metrics record's step time (seconds) and the run parameter of its repeat.
STEP_TIME_S = "step_time_s"
REPEAT = "repeat"
#: The plain CSV's columns: each throughput beside its per-GPU and global batch.
ATTEMPT_COLUMNS: tuple[str, ...] = (
    col.STUDY, col.DIRECTORY, col.SYSTEM, col.SOURCE, col.RUN_ID, col.ATTEMPT, col.STATE,
    col.CAMPAIGN, col.MODEL, col.BACKEND, col.TUNING, col.NODES, col.RANKS_PER_NODE,
    col.WORLD_SIZE, REPEAT, col.BATCH_SIZE, col.GLOBAL_BATCH, col.THROUGHPUT,
    col.THROUGHPUT_PER_GPU, col.UNIT, col.STARTED, col.ENDED, col.TAGS, col.PARAMS,
    col.METRICS, col.PROVENANCE)
#: The plain CSV's cells written as JSON.
JSON_CELLS = frozenset({col.TAGS, col.PARAMS, col.METRICS, col.PROVENANCE})
#: Otava's CSV: the time column, and the attribute naming unmeasured points.
TIME = "time"
NOT_MEASURED = "not_measured"
#: What separates several values in one attribute cell.
JOIN = " "

Bmf = dict[str, dict[str, dict[str, float]]]


def point_name(row: AttemptRow) -> str:
    """`lab resnet50 2x4 (8 GPUs) batch 32/GPU (256 global) ddp/default image_size=224`:
    a stored point's stable, readable name (no comma: Otava's --metrics splits on it)."""
    work = " ".join(f"{k}={v}" for k, v in sorted(work_of(row).items()) if k != col.SYSTEM)
    model = row.get(col.MODEL) or (row.get(col.PARAMS) or {}).get("workload") or "program"
    source = row.get(col.SOURCE) or OWN
    text = (f"{row.get(col.SYSTEM) or '?'} {model} {row.get(col.NODES)}x"
            f"{row.get(col.RANKS_PER_NODE)} ({row.get(col.WORLD_SIZE)} GPUs) batch "
            f"{row.get(col.BATCH_SIZE)}/GPU ({row.get(col.GLOBAL_BATCH)} global) "
            f"{row.get(col.BACKEND)}/{row.get(col.TUNING)}" + (f" {work}" if work else "")
            + ("" if source == OWN else f" [{source}]"))
    return text.replace(",", ";")


def _names(keys: Sequence[tuple[str, Point]], first: Mapping[tuple[str, Point], AttemptRow]
           ) -> dict[tuple[str, Point], str]:
    """Each point's name, made unique (` #2`) where two keys would read the same."""
    out: dict[tuple[str, Point], str] = {}
    taken: set[str] = set()
    for key in keys:
        name, n = point_name(first[key]), 1
        while (name if n == 1 else f"{name} #{n}") in taken:
            n += 1
        out[key] = name if n == 1 else f"{name} #{n}"
        taken.add(out[key])
    return out


@dataclass(frozen=True)
class BencherExport:
    """One BMF report, and the campaigns its values come from."""

    bmf: Bmf
    campaigns: tuple[str, ...]

    def text(self) -> str:
        return json.dumps(self.bmf, indent=1) + "\n"


def bencher(rows: Sequence[AttemptRow]) -> BencherExport:
    """The latest campaign of each point as one BMF report (see the module's docstring);
    empty when no completed attempt has a throughput."""
    all_series = series(rows)
    keys = sorted(all_series, key=lambda k: point_name(all_series[k][-1].rows[0]))
    names = _names(keys, {k: all_series[k][-1].rows[0] for k in keys})
    per_gpu: dict[tuple[tuple[str, Point], Point], float] = {}
    curves: dict[tuple[object, ...], list[tuple[int, int, float]]] = {}
    for k, found in all_series.items():
        for c in found:
            per_gpu[(k, c.key)] = value = statistics.median(c.values)
            first = c.rows[0]
            if first.get(col.WORLD_SIZE):  # an import may not know its scale
                curves.setdefault((_curve(first), c.key), []).append(
                    (stored.world_size(first), int(first.get(col.NODES) or 0), value))
    out: Bmf = {}
    used: list[str] = []
    for k in keys:
        latest = all_series[k][-1]
        whole = [t for r in latest.rows if (t := _throughput(r)) is not None]
        measures = {**({THROUGHPUT: _band(whole)} if whole else {}),
                    THROUGHPUT_PER_GPU: _band(list(latest.values))}
        steps = [float(v) for r in latest.rows
                 if isinstance(v := member(r, col.METRICS).get(STEP_TIME_S), (int, float))]
        if steps:
            measures[STEP_TIME] = _band(steps)
        curve = curves.get((_curve(latest.rows[0]), latest.key), [])
        if len(curve) > 1 and latest.rows[0].get(col.WORLD_SIZE):
            base = min(curve)[2]
            measures[SCALING_EFFICIENCY] = {"value": per_gpu[(k, latest.key)] / base}
        out[names[k]] = measures
        if campaign_of(latest.rows[0]) not in used:
            used.append(campaign_of(latest.rows[0]))
    return BencherExport(out, tuple(used))


def _throughput(row: AttemptRow) -> float | None:
    """The whole job's throughput (per GPU times the world size where none was kept;
    None for an import that knows neither)."""
    if row.get(col.THROUGHPUT) is not None:
        return stored.throughput(row)
    world = row.get(col.WORLD_SIZE)
    return stored.per_gpu(row) * int(world) if world else None


def _band(values: Sequence[float]) -> dict[str, float]:
    """A BMF metric: the median, with the slowest and fastest where there are two or more."""
    metric = {"value": statistics.median(values)}
    if len(values) > 1:
        metric.update(lower_value=min(values), upper_value=max(values))
    return metric


def _curve(row: AttemptRow) -> tuple[object, ...]:
    """The scaling curve a point is on: its system and work, and the batch the mode keeps
    fixed (weak: the per-GPU batch; strong: the global one)."""
    strong = (row.get(col.PARAMS) or {}).get("scaling") == "strong"
    return (row.get(col.SYSTEM), row.get(col.MODEL), row.get(col.BACKEND), row.get(col.TUNING),
            strong, row.get(col.GLOBAL_BATCH if strong else col.BATCH_SIZE),
            tuple(sorted(work_of(row).items())))


@dataclass(frozen=True)
class OtavaExport:
    """One study's campaigns as Otava's CSV, and what its config needs."""

    csv: str
    test: str  # Otava's test: the study
    metrics: tuple[str, ...]  # the point columns
    attributes: tuple[str, ...]
    campaigns: int
    carried: int  # cells a campaign did not measure, carried from a neighbour
    first: datetime | None  # when the first campaign ended

    def config(self, csv_file: str) -> str:
        """Otava's YAML config reading the CSV at `csv_file` (its `tests:`, type csv)."""
        doc = {"tests": {self.test: {
            "type": "csv", "file": csv_file, "time_column": TIME,
            "attributes": list(self.attributes),
            "csv_options": {"delimiter": ",", "quote_char": '"'},
            "metrics": {m: {"column": m, "direction": 1, "scale": 1} for m in self.metrics}}}}
        head = (f"# Apache Otava: scalestudy's history of study {self.test} (per-GPU "
                "throughput; higher is better)\n"
                f"# otava analyze --config-file THIS_FILE {self.test}\n")
        return head + str(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=4096))


def otava(rows: Sequence[AttemptRow]) -> OtavaExport:
    """One study's campaigns as Otava's CSV (see the module's docstring); a
    ScalestudyError where the rows hold several studies (Otava would read one's
    unmeasured cells as measured in the other's campaigns)."""
    all_series = series(rows)
    places = sorted({(str(c.rows[0].get(col.STUDY)), str(c.rows[0].get(col.DIRECTORY)))
                     for campaigns in all_series.values() for c in campaigns})
    if len(places) > 1:
        raise ScalestudyError(
            f"an Otava export holds one study's campaigns; {len(places)} match: "
            + ", ".join(f"{n} ({d})" for n, d in places[:6]) + (", ..." if len(places) > 6
                                                                 else "")
            + ": pick one with --study NAME (and --system where one name has several)")
    keys = sorted(all_series, key=lambda k: point_name(all_series[k][-1].rows[0]))
    names = _names(keys, {k: all_series[k][-1].rows[0] for k in keys})
    columns = {k: f"{names[k]} [{all_series[k][-1].rows[0].get(col.UNIT) or 'img/s'} per GPU]"
               for k in keys}
    cells: dict[Point, dict[tuple[str, Point], float]] = {}
    members: dict[Point, list[AttemptRow]] = {}
    for k, campaigns in all_series.items():
        for c in campaigns:
            cells.setdefault(c.key, {})[k] = statistics.median(c.values)
            members.setdefault(c.key, []).extend(c.rows)
    ended = {ck: max(as_utc(r[col.ENDED]) for r in rs) for ck, rs in members.items()}
    order = sorted(cells, key=lambda ck: (ended[ck], str(ck)))
    filled, carried = _filled(order, cells, keys)
    versions = sorted({str(v) for rs in members.values() for r in rs
                       for v in _provenance(r, "versions")})
    commits = any(_provenance(r, "configuration").get("program_commit")
                  for rs in members.values() for r in rs)
    attributes = (col.CAMPAIGN, col.STUDY, *(f"{v}_version" for v in versions),
                  *(["program_commit"] if commits else []), NOT_MEASURED)
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow([TIME, *attributes, *(columns[k] for k in keys)])
    for ck in order:
        rs = members[ck]
        writer.writerow([
            ended[ck].isoformat(), _joined(campaign_of(r) for r in rs),
            _joined(r.get(col.STUDY) for r in rs),
            *(_joined(_provenance(r, "versions").get(v) for r in rs) for v in versions),
            *([_joined(_provenance(r, "configuration").get("program_commit") for r in rs)]
              if commits else []),
            "; ".join(names[k] for k in keys if k not in cells[ck]),
            *(repr(filled[ck][k]) for k in keys)])
    return OtavaExport(text.getvalue(), places[0][0] if places else "",
                       tuple(columns[k] for k in keys), attributes, len(order), carried,
                       ended[order[0]] if order else None)


def _filled(order: Sequence[Point], cells: Mapping[Point, Mapping[tuple[str, Point], float]],
            keys: Sequence[tuple[str, Point]]
            ) -> tuple[dict[Point, dict[tuple[str, Point], float]], int]:
    """Every campaign's value of every point: measured, else the campaign before's, else
    (the first campaigns) the first measured; and how many were carried."""
    out: dict[Point, dict[tuple[str, Point], float]] = {ck: dict(cells[ck]) for ck in order}
    carried = 0
    for k in keys:
        first = next(cells[ck][k] for ck in order if k in cells[ck])
        last = first
        for ck in order:
            if k in out[ck]:
                last = out[ck][k]
            else:
                out[ck][k] = last
                carried += 1
    return out, carried


def _provenance(row: AttemptRow, part: str) -> dict[str, Any]:
    found = (row.get(col.PROVENANCE) or {}).get(part)
    return found if isinstance(found, dict) else {}


def _joined(values: Any) -> str:
    """The distinct values of an attribute within a campaign, in their order."""
    return JOIN.join(dict.fromkeys(str(v) for v in values if v not in (None, "")))


def attempts_csv(rows: Sequence[AttemptRow]) -> str:
    """Every stored attempt, one row each (ATTEMPT_COLUMNS; see the module's docstring)."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(ATTEMPT_COLUMNS)
    for r in rows:
        writer.writerow([_cell(name, r) for name in ATTEMPT_COLUMNS])
    return text.getvalue()


def _cell(name: str, row: AttemptRow) -> str:
    if name == col.CAMPAIGN:
        return campaign_of(row)
    if name == col.SOURCE:
        return str(row.get(col.SOURCE) or OWN)
    value = row.get(name)
    if name in JSON_CELLS:
        return "" if value is None else json.dumps(value, sort_keys=True, default=str)
    if value is None:
        return ""
    if isinstance(value, datetime):
        return as_utc(value).isoformat()
    return repr(value) if isinstance(value, float) else str(value)
