"""The published site's pages as data, from the results store's rows and the ledger's
forecasts: an index of systems and models, a page per system and model (its history per
scale with repeat bands, the change points and provenance changes, the best-known front,
the forecasts with how they scored, the slow nodes found) and a page per study. Each
system page is computed from its own system's and model's runs alone (its change points
are those of `history changes --system S --model M`), so a new study changes only its
own pages and the index. Pure: report.publish draws them; every href is relative to the
site's root."""

from __future__ import annotations

import hashlib
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial

import pandas as pd

from scalestudy.core.values import number
from scalestudy.results.analysis import columns as col
from scalestudy.results.history import rows as stored
from scalestudy.results.history import site_schema as s
from scalestudy.results.history.best import best_known
from scalestudy.results.history.changes import ChangePoint, changes
from scalestudy.results.history.ledger import POINT_COLUMNS, POINT_PARAMS, Score, score, summary
from scalestudy.results.history.nodes import SlowNode, slow_nodes
from scalestudy.results.history.rows import AttemptRow, ForecastRow
from scalestudy.results.history.store import OWN, as_utc, campaign_of, latest_attempts
from scalestudy.results.history.timeline import Change, series_label, timeline

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
#: The parameter of a sweep's imported rows (nccl-tests' message size): drawn per run,
#: against it, and over time only at its largest value.
SWEPT = "message_bytes"
#: How many of each sweep's latest runs a page draws.
CURVES_KEPT = 8
#: A system's "last night": the attempts that ended this long before its last one.
NIGHT = timedelta(hours=24)


@dataclass
class Site:
    """Every page of a site: the index, the system pages and the study pages (by their
    path without suffix, relative to the site's root), and each study's directory."""

    index: s.IndexPage
    systems: dict[str, s.SystemPage] = field(default_factory=dict)
    studies: dict[str, s.StudyPage] = field(default_factory=dict)
    directories: dict[str, str] = field(default_factory=dict)  # study page -> directory


def slug(text: str) -> str:
    """A file name for a system, model or study: its safe characters, and a short hash
    when it had others (so two names never share a file)."""
    safe = _UNSAFE.sub("-", text).strip("-.") or "x"
    return safe if safe == text else f"{safe}-{hashlib.sha256(text.encode()).hexdigest()[:6]}"


def system_path(system: str, model: str) -> str:
    return f"systems/{slug(system)}/{slug(model)}"


def study_path(name: str, directory: str) -> str:
    return f"studies/{slug(name)}-{hashlib.sha256(directory.encode()).hexdigest()[:8]}"


def build(rows: Sequence[AttemptRow], forecasts: Sequence[ForecastRow],
          title: str = "Scaling results") -> Site:
    """The site's pages from stored attempts (oldest first) and the ledger's forecasts."""
    by_page: dict[tuple[str, str], list[AttemptRow]] = {}
    for r in rows:
        by_page.setdefault((_system(r), str(r.get(col.MODEL) or r.get(col.SOURCE) or "?")),
                           []).append(r)
    scores = score(forecasts, rows) if forecasts else []
    study_links = _study_links(rows)
    site = Site(s.IndexPage(schema=s.SCHEMA, kind="index", title=title,
                            updated=_latest(rows), last_night=[], systems=[],
                            studies=[]))
    still_open: dict[str, int] = {}
    page_of_study: dict[str, list[s.Link]] = {}
    for (system, model), mine in sorted(by_page.items()):
        path = system_path(system, model)
        points, provenance = timeline(mine)
        # what `history changes --system S --model M` finds, and the slow nodes these runs
        # show: a page depends on its own runs only, so a study rewrites only its pages
        marks = changes(mine)
        slow = slow_nodes(mine).slow
        here = [sc for sc in scores if sc.forecast[col.SYSTEM] == system
                and (sc.forecast.get("point") or {}).get(col.MODEL) == model]
        dirs = dict.fromkeys(str(r[col.DIRECTORY]) for r in mine)
        page = s.SystemPage(
            schema=s.SCHEMA, kind="system", title=f"{system}: {model}", system=system,
            model=model, updated=_latest(mine), attempts=len(mine),
            series=_series(points, {series_label(r): _point(r) for r in mine}),
            measures=_measures(mine), curves=_curves(mine),
            changes=[_change(c) for c in marks],
            provenance=[_provenance(p) for p in provenance],
            front=_front(mine), forecasts=[_forecast(sc) for sc in here],
            forecast_score=_score_of(here), slow_nodes=[_slow(n) for n in slow],
            studies=[study_links[d] for d in dirs], fallback=None)
        site.systems[path] = page
        for d in dirs:
            page_of_study.setdefault(d, []).append(s.Link(title=page["title"],
                                                          href=f"{path}.html"))
        unresolved = open_alarms(marks)
        still_open[system] = still_open.get(system, 0) + len(unresolved)
        site.index["systems"].append(s.IndexEntry(
            system=system, model=model, href=f"{path}.html", updated=page["updated"],
            attempts=len(mine), changes=len(marks),
            alarms=sum(c.confirmed and c.high < 0 for c in marks),
            open_alarms=len(unresolved), slow_nodes=len(slow)))
    site.index["last_night"] = _last_nights(rows, still_open)
    by_dir: dict[str, list[AttemptRow]] = {}
    for r in rows:
        by_dir.setdefault(str(r[col.DIRECTORY]), []).append(r)
    for directory, mine in by_dir.items():
        link = study_links[directory]
        path = link["href"].removesuffix(".html")
        site.studies[path] = _study(mine, directory, page_of_study.get(directory, []))
        site.directories[path] = directory
    site.index["studies"] = sorted(study_links.values(), key=lambda k: k["title"])
    return site


def open_alarms(marks: Sequence[ChangePoint]) -> list[ChangePoint]:
    """The confirmed drops not since recovered: no later rise of the same series at the
    same scale (a drop fixed weeks ago is history, not an alarm)."""
    return [c for c in marks if c.alarm and not any(
        later.series == c.series and later.world_size == c.world_size
        and as_utc(later.when) > as_utc(c.when) and later.low > 0 for later in marks)]


def _last_nights(rows: Sequence[AttemptRow], alarms: Mapping[str, int]
                 ) -> list[s.LastNight]:
    """Each system's last night: the attempts that ended in the 24 hours up to its last."""
    by_system: dict[str, list[AttemptRow]] = {}
    for r in rows:
        if r.get(col.ENDED) is not None:
            by_system.setdefault(_system(r), []).append(r)
    out = []
    for system, mine in sorted(by_system.items()):
        until = max(as_utc(r[col.ENDED]) for r in mine)
        since = until - NIGHT
        night = latest_attempts([r for r in mine if as_utc(r[col.ENDED]) > since])
        failed = sum(r.get(col.STATE) != "completed" for r in night)
        flags = [w for w, on in (("failed runs", failed), ("slower", alarms.get(system)))
                 if on]
        out.append(s.LastNight(
            system=system, since=_when(since) or "", until=_when(until) or "",
            studies=len({r[col.DIRECTORY] for r in night}), completed=len(night) - failed,
            failed=failed, open_alarms=alarms.get(system, 0),
            status=", ".join(flags) or "ok"))  # type: ignore[typeddict-item]
    return out


def _system(row: AttemptRow) -> str:
    return str(row.get(col.SYSTEM) or "?")


def _when(value: object) -> str | None:
    """A stored time as ISO 8601 in UTC (SQLite gives them back without a zone)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    moment = pd.Timestamp(value)
    moment = moment.tz_localize("UTC") if moment.tzinfo is None else moment.tz_convert("UTC")
    return str(moment.isoformat())


def _latest(rows: Sequence[AttemptRow]) -> str | None:
    ends = [r[col.ENDED] for r in rows if r.get(col.ENDED) is not None]
    return _when(max(ends, key=as_utc)) if ends else None


#: A cell as a finite float, else None (numeric text and booleans read as numbers).
_number = partial(number, text=True, booleans=True)


def _integer(value: object) -> int | None:
    found = _number(value)
    return None if found is None else int(found)


def _point(row: AttemptRow) -> dict[str, object]:
    """A series' point as the ledger's forecasts name it (results.history.ledger)."""
    params = row.get(col.PARAMS) or {}
    return {**{k: row.get(k) for k in POINT_COLUMNS if row.get(k) is not None},
            **{k: params[k] for k in POINT_PARAMS if params.get(k) is not None}}


def _series(points: pd.DataFrame, named: Mapping[str, dict[str, object]]) -> list[s.Series]:
    out: list[s.Series] = []
    for label, group in points.groupby(col.GROUP, sort=True):
        scales: list[s.Scale] = []
        for world, line in group.groupby(col.WORLD_SIZE, sort=True):
            scales.append(s.Scale(world_size=int(world), points=[
                s.Point(when=_when(p.when) or "", campaign=str(p.campaign),
                        per_gpu=float(p.per_gpu), low=float(p.per_gpu_min),
                        high=float(p.per_gpu_max), efficiency=_number(p.efficiency),
                        repeats=int(p.repeats))
                for p in line.sort_values("when").itertuples()]))
        out.append(s.Series(label=str(label), unit=str(group[col.UNIT].iloc[0]),
                            point=named.get(str(label), {}), scales=scales))
    return out


def _imported(rows: Sequence[AttemptRow]
              ) -> list[tuple[AttemptRow, str, str, float]]:
    """The imported results that are no throughput, each with its label (its parameters
    but the model and the swept one), unit and value."""
    out = []
    for r in rows:
        metrics = r.get(col.METRICS) or {}
        value = metrics.get("value")
        if r.get(col.STATE) != "completed" or r.get(col.THROUGHPUT_PER_GPU) is not None or \
                r.get(col.ENDED) is None or not isinstance(value, (int, float)) or \
                not math.isfinite(value):
            continue
        params = r.get(col.PARAMS) or {}
        label = " ".join(f"{k} {v}" for k, v in sorted(params.items())
                         if k not in (col.MODEL, SWEPT))
        unit = str(metrics.get(col.UNIT) or r.get(col.UNIT) or "")
        out.append((r, label or str(r.get(col.SOURCE)), unit, float(value)))
    return out


def _measures(rows: Sequence[AttemptRow]) -> list[s.Measure]:
    """The imported results that are no throughput: each (its parameters but the model,
    and its unit) over time; of a sweep, each run's value at its largest message."""
    lines: dict[tuple[str, str], list[s.Reading]] = {}
    largest: dict[tuple[str, str, str], tuple[int, AttemptRow, float]] = {}
    for r, label, unit, value in _imported(rows):
        size = _size(r)
        if size is None:
            lines.setdefault((label, unit), []).append(
                s.Reading(when=_when(r[col.ENDED]) or "", value=value))
        elif (key := (label, unit, str(r[col.DIRECTORY]))) not in largest or \
                size > largest[key][0]:
            largest[key] = (size, r, value)
    for (label, unit, _), (size, r, value) in largest.items():
        lines.setdefault((f"{label} at {_bytes(size)}", unit), []).append(
            s.Reading(when=_when(r[col.ENDED]) or "", value=value))
    return [s.Measure(label=label, unit=unit, readings=sorted(got, key=lambda g: g["when"]))
            for (label, unit), got in sorted(lines.items())]


def _size(row: AttemptRow) -> int | None:
    """An imported sweep's message size (None: not a sweep)."""
    return _integer((row.get(col.PARAMS) or {}).get(SWEPT))


def _curves(rows: Sequence[AttemptRow]) -> list[s.Curve]:
    """Each imported sweep run (one file of nccl-tests) as its value per message size,
    the latest CURVES_KEPT runs of each label."""
    runs: dict[tuple[str, str, str], list[tuple[AttemptRow, float]]] = {}
    for r, label, unit, value in _imported(rows):
        if _size(r) is not None:
            runs.setdefault((label, unit, str(r[col.DIRECTORY])), []).append((r, value))
    curves = []
    for (label, unit, _), got in runs.items():
        sizes = {_size(r) or 0: v for r, v in got}
        curves.append(s.Curve(
            label=label, unit=unit, when=_latest([r for r, _ in got]) or "",
            study=str(got[0][0].get(col.STUDY) or "?"),
            points=[s.SizePoint(message_bytes=b, value=v) for b, v in sorted(sizes.items())]))
    curves.sort(key=lambda c: (c["label"], c["when"]))
    kept: dict[str, int] = {}
    out = []
    for c in reversed(curves):  # the newest of each label
        kept[c["label"]] = kept.get(c["label"], 0) + 1
        if kept[c["label"]] <= CURVES_KEPT:
            out.append(c)
    return out[::-1]


def _bytes(size: int) -> str:
    """A message size as nccl-tests' users say it (8 B, 1 MiB, 8 GiB)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def _change(c: ChangePoint) -> s.ChangeMark:
    return s.ChangeMark(series=c.series, world_size=c.world_size, when=_when(c.when) or "",
                        campaign=c.campaign, size=c.size, low=c.low, high=c.high,
                        confirmed=c.confirmed, cause=c.cause, changed=list(c.changed))


def _provenance(change: Change) -> s.ProvenanceMark:
    return s.ProvenanceMark(when=_when(change.when) or "", what=list(change.what))


def _front(rows: Sequence[AttemptRow]) -> list[s.FrontPoint]:
    table = best_known(rows)
    out = []
    for r in table[table["front"]].to_dict("records"):
        out.append(s.FrontPoint(
            configuration=str(r["configuration"]), study=str(r[col.STUDY]),
            ended=_when(r[col.ENDED]), nodes=_integer(r[col.NODES]),
            world_size=stored.world_size(r), batch_size=_integer(r[col.BATCH_SIZE]),
            global_batch=_integer(r[col.GLOBAL_BATCH]), backend=_text(r[col.BACKEND]),
            tuning=_text(r[col.TUNING]), repeats=int(r["repeats"]),
            throughput=stored.throughput(r), unit=str(r[col.UNIT]),
            time_s=float(r["time_s"]), node_hours=_number(r[col.NODE_HOURS])))
    return out


def _text(value: object) -> str | None:
    return None if value is None or value != value else str(value)


def _forecast(sc: Score) -> s.Forecast:
    f = sc.forecast
    return s.Forecast(made=_when(f["made"]) or "", source=str(f[col.SOURCE]),
                      point=dict(f.get("point") or {}), gpus=int(f[col.GPUS]),
                      throughput=float(f[col.THROUGHPUT]), low=float(f["low"]),
                      high=float(f["high"]), level=float(f["level"]), unit=str(f[col.UNIT]),
                      measured=sc.measured, runs=sc.runs, inside=sc.inside, error=sc.error)


def _score_of(scores: Sequence[Score]) -> s.ForecastScore | None:
    if not scores:
        return None
    [total] = summary(scores)
    return s.ForecastScore(forecasts=int(total["forecasts"]),  # type: ignore[call-overload]
                           scored=int(total["scored"]),  # type: ignore[call-overload]
                           coverage=_number(total["coverage"]),
                           median_abs_error=_number(total["median_abs_error"]))


def _slow(n: SlowNode) -> s.SlowHost:
    return s.SlowHost(host=n.host, slower=n.slower, low=n.low, high=n.high, z=n.z,
                      runs=n.runs, studies=list(n.studies), where=n.where)


def _study_links(rows: Sequence[AttemptRow]) -> dict[str, s.Link]:
    out: dict[str, s.Link] = {}
    for r in rows:
        directory = str(r[col.DIRECTORY])
        if directory not in out:
            name = str(r.get(col.STUDY) or "?")
            out[directory] = s.Link(title=name, href=f"{study_path(name, directory)}.html")
    return out


def shown_directory(directory: str) -> str:
    """A study's directory as a page shows it: its name (`results/<name>` on the machine
    that ran it), never the absolute path of the machine that published; an import's key
    (`import:<sha256>`) as it is."""
    if directory.startswith("import:"):
        return directory
    return directory.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] or directory


def _study(rows: Sequence[AttemptRow], directory: str,
           pages: list[s.Link]) -> s.StudyPage:
    """One study: its points over its latest attempts, and where it appears."""
    latest = latest_attempts(rows)
    points: dict[tuple[object, ...], list[AttemptRow]] = {}
    for r in latest:
        key = tuple(r.get(k) for k in (col.MODEL, col.NODES, col.WORLD_SIZE, col.BATCH_SIZE,
                                       col.GLOBAL_BATCH, col.BACKEND, col.TUNING))
        points.setdefault(key, []).append(r)
    table = []
    for key, mine in sorted(points.items(), key=lambda kv: tuple(str(k) for k in kv[0])):
        done = [r for r in mine if r.get(col.STATE) == "completed"
                and r.get(col.THROUGHPUT) is not None]
        per_gpu = [stored.per_gpu(r) for r in done
                   if r.get(col.THROUGHPUT_PER_GPU) is not None]
        model, nodes, world, batch, global_batch, backend, tuning = key
        table.append(s.StudyRow(
            model=str(model or "?"), nodes=_integer(nodes), world_size=_integer(world),
            batch_size=_integer(batch), global_batch=_integer(global_batch),
            backend=_text(backend), tuning=_text(tuning), completed=len(done),
            failed=len(mine) - len(done),
            throughput=statistics.median(stored.throughput(r) for r in done)
            if done else None,
            per_gpu=statistics.median(per_gpu) if per_gpu else None,
            unit=str(mine[0].get(col.UNIT) or "")))
    first = rows[0]
    starts = [r[col.STARTED] for r in rows if r.get(col.STARTED) is not None]
    completed = sum(r.get(col.STATE) == "completed" for r in latest)
    return s.StudyPage(
        schema=s.SCHEMA, kind="study", title=str(first.get(col.STUDY) or "?"),
        study=str(first.get(col.STUDY) or "?"), system=_text(first.get(col.SYSTEM)),
        source=str(first.get(col.SOURCE) or OWN), directory=shown_directory(directory),
        campaigns=len({campaign_of(r) for r in rows}),
        started=_when(min(starts, key=as_utc)) if starts else None, ended=_latest(rows),
        completed=completed, failed=len(latest) - completed, rows=table, report=None,
        pages=pages)
