"""`history import`: results measured by other tools go into the store beside scalestudy's
runs, all files or none, and a copy of each file with how it was imported is kept under
results/imports/, so `history ingest results/` brings the imports back with the studies."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TypedDict

from scalestudy.core.errors import ScalestudyError
from scalestudy.results.analysis import columns as col
from scalestudy.results.history.imports import parse
from scalestudy.results.history.imports.common import Imported
from scalestudy.results.history.rows import AttemptRow

#: Where a results directory keeps its imports (one folder per file, by its hash).
IMPORTS = "imports"
#: The version of import.json this release writes and reads.
RECORD_VERSION = 1
#: Formats whose files grow (a perflog appended to each night): a measurement another
#: import holds is not stored again.
GROWING = frozenset({"reframe"})
#: The stored state of a measurement the log says is not a result.
NOT_A_RESULT = {"aborted": "aborted", "warmup_only": "warm-up only",
               "wrong_results": "wrong results"}


@dataclass(frozen=True)
class ImportedFile:
    """What `history import` did with one file."""

    path: Path
    format: str
    measurements: int
    not_results: dict[str, int]  # status -> count (aborted, warmup_only, wrong_results)
    dated_by: str  # the log, --date, or the file's modification time
    ended: datetime | None
    already: int = 0  # measurements another import of the store holds (not stored again)


class _Read(TypedDict):
    """One file read (`_read`): its rows for the store, and what keeping it needs."""

    path: Path
    sha256: str
    rows: list[AttemptRow]
    when: datetime
    system: str | None
    summary: ImportedFile


@dataclass(frozen=True)
class Options:
    """How a file is imported (what it does not say itself)."""

    fmt: str
    system: str | None = None
    name: str | None = None
    tags: tuple[str, ...] = ()
    gpus: int | None = None
    nodes: int | None = None
    date: datetime | None = None
    #: a kept import's date (`history ingest`), for a file whose log names none: when
    #: it was dated at its import (the copy's modification time is not when it ran)
    dated: datetime | None = None

    def record(self) -> dict[str, object]:
        """As import.json keeps them."""
        return {"format": self.fmt, "system": self.system, "name": self.name,
                "tags": list(self.tags), "gpus": self.gpus, "nodes": self.nodes,
                "date": self.date.isoformat() if self.date else None}


def import_results(files: list[Path], options: Options, url: str | None = None,
                   results: Path | None = Path("results")) -> list[ImportedFile]:
    """Read every file, then store them all in one transaction (a file that cannot be
    read stores none), then keep each under `results`/imports/ (None: keep none)."""
    from scalestudy.results.history.store import Store

    read = [_read(Path(p), options) for p in files]
    store = Store(url)
    staged: list[tuple[Path, Path]] = []
    try:
        if options.fmt in GROWING:
            _skip_held(read, store.rows())
        staged = _stage(read, options, results) if results is not None else []
        store.put_imported([(f"import:{r['sha256']}", options.name or Path(r["path"]).stem,
                             r["system"], options.fmt, r["rows"]) for r in read])
    except BaseException:
        for tmp, _ in staged:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        store.dispose()
    for tmp, final in staged:
        shutil.rmtree(final, ignore_errors=True)
        tmp.replace(final)
    return [r["summary"] for r in read]


def _skip_held(read: list[_Read], stored: list[AttemptRow]) -> None:
    """Leave out each file's measurements that another import already holds (a perflog
    that grew since it was imported: only its new lines are stored)."""
    held: dict[tuple[object, ...], set[str]] = {}
    for r in stored:
        if str(r.get(col.DIRECTORY, "")).startswith("import:"):
            held.setdefault(_same_measurement(r), set()).add(str(r[col.DIRECTORY]))
    for item in read:
        key = f"import:{item['sha256']}"
        new = [r for r in item["rows"] if not held.get(_same_measurement(r), set()) - {key}]
        item["summary"] = replace(item["summary"], already=len(item["rows"]) - len(new))
        item["rows"] = new
        for r in new:  # a second file of the same import: the first one's count too
            held.setdefault(_same_measurement(r), set()).add(key)


def _same_measurement(row: AttemptRow) -> tuple[object, ...]:
    """What makes two stored rows one measurement: the same test case, variable, job,
    end, state and value."""
    from scalestudy.results.history.store import as_utc

    params, metrics = row.get(col.PARAMS) or {}, row.get(col.METRICS) or {}
    ended = row.get(col.ENDED)
    return (row.get(col.MODEL), row.get(col.STATE), params.get("partition"),
            params.get("environ"), params.get("perf_var"), metrics.get("jobid"),
            metrics.get("value"), as_utc(ended).isoformat() if ended else None)


def kept(results: Path) -> list[Path]:
    """The import folders a results directory keeps (results/imports/<hash>/)."""
    return sorted(p.parent for p in (Path(results) / IMPORTS).glob("*/import.json"))


def reimport(folder: Path, url: str | None = None) -> ImportedFile:
    """Store a kept import again (`history ingest`: a rebuilt store gets it back)."""
    try:
        record = json.loads((folder / "import.json").read_text(encoding="utf-8"))
        version = int(record.get("version", 0))
        opts = record["options"]
        source = folder / record["copy"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ScalestudyError(f"{folder}/import.json: unreadable ({exc}); import the file "
                              "again with `scalestudy history import`") from None
    if version > RECORD_VERSION:
        raise ScalestudyError(f"{folder}/import.json: version {version} is newer than this "
                              f"scalestudy reads ({RECORD_VERSION}): upgrade scalestudy")
    date, dated = opts.get("date"), record.get("dated")
    options = Options(opts["format"], opts.get(col.SYSTEM), opts.get("name") or
                      Path(record.get("file", source.name)).stem, tuple(opts.get(col.TAGS, ())),
                      opts.get(col.GPUS), opts.get(col.NODES),
                      datetime.fromisoformat(date) if date else None,
                      datetime.fromisoformat(dated) if dated else None)
    [done] = import_results([source], options, url, results=None)
    return done


def _read(path: Path, options: Options) -> _Read:
    """One file parsed into stored rows, with its hash, its system (--system, else the
    one the file names itself, as ReFrame's do) and its summary."""

    found = parse(path, options.fmt, options.gpus)
    own = sorted({str(i.details[col.SYSTEM]) for i in found if i.details.get(col.SYSTEM)})
    if options.system is None and len(own) > 1:
        raise ScalestudyError(f"{path}: results of {len(own)} systems ({', '.join(own)}): "
                              "import each system's file on its own, or give --system NAME "
                              "to store them under one name")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    ended = next((i.ended for i in reversed(found) if i.ended is not None), None)
    if options.date is not None:
        when, dated_by = options.date, "--date"
    elif ended is not None:
        when, dated_by = ended, "the log"
    elif options.dated is not None:
        when, dated_by = options.dated, "its first import"
    else:
        when = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)
        dated_by = "the file's modification time (the log has no date: --date sets one)"
    source = {"format": options.fmt, "file": str(path.resolve()), "sha256": digest,
              "dated_by": dated_by.split(" (")[0]}
    rows = [_row(i, item, source, options, when) for i, item in enumerate(found)]
    bad: dict[str, int] = {}
    for item in found:
        if item.status != "completed":
            bad[item.status] = bad.get(item.status, 0) + 1
    return {"path": path, "sha256": digest, "rows": rows, "when": when,
            "system": options.system or (own[0] if own else None),
            "summary": ImportedFile(path, options.fmt, len(found), bad, dated_by, when)}


def _stage(read: list[_Read], options: Options,
           results: Path) -> list[tuple[Path, Path]]:
    """A copy of each file and its import.json in a folder beside its final place
    (results/imports/<hash>), to be moved there once the store has them."""
    base = Path(results) / IMPORTS
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ScalestudyError(f"{base}: cannot create it ({exc.strerror}); give --results "
                              "a directory you can write, where the studies are") from None
    staged = []
    for r in read:
        tmp = Path(tempfile.mkdtemp(prefix=".import-", dir=base))
        copy = f"source{''.join(Path(r['path']).suffixes[-1:])}"
        shutil.copyfile(r["path"], tmp / copy)
        record = {"version": RECORD_VERSION, "file": str(Path(r["path"]).resolve()),
                  "copy": copy, "sha256": r["sha256"], "options": options.record(),
                  "dated": r["when"].isoformat(),
                  "imported": datetime.now(timezone.utc).isoformat()}
        (tmp / "import.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        staged.append((tmp, base / r["sha256"][:16]))
    return staged


def _row(index: int, item: Imported, source: dict[str, str], options: Options,
         when: datetime) -> AttemptRow:
    """One imported measurement as a stored attempt: a throughput where it is one
    (img/s, tokens/s), else its value and unit in the metrics; what the log says is not
    a result (aborted, warm-up only) is a failed attempt with no value. `--nodes`: what
    the file does not say (the ranks per node follow, where they divide evenly). It ended
    when the log says it did (a ReFrame test case: its job), else when the file did."""
    nodes = options.nodes
    point = item.point.copy()
    if nodes:
        point["nodes"] = nodes
    world = point.get(col.WORLD_SIZE)
    if nodes and world and world % nodes:
        raise ScalestudyError(f"--nodes {nodes}: the {world} GPUs of the results do not "
                              "divide evenly over them")
    result = item.status == "completed" and item.value is not None
    rate = result and item.unit.endswith("/s") and not item.unit.startswith("GB/s")
    value = item.value if rate else None
    metrics: dict[str, object] = {"value": item.value if result else None,
                                  "unit": item.unit, **item.details}
    if not result:
        metrics["failure"] = item.status
    session = item.details.get("session")
    versions = {k: item.details[k] for k in ("nccl", "reframe") if item.details.get(k)}
    return {
        "run_id": f"{index:05d}", "attempt": 1,
        "state": "completed" if result else "failed",
        "nodes": point.get(col.NODES), "world_size": world,
        "ranks_per_node": world // per if world and (per := point.get(col.NODES)) else None,
        "batch_size": point.get(col.BATCH_SIZE), "global_batch": point.get(col.GLOBAL_BATCH),
        "backend": None, "tuning": None, "model": point.get(col.MODEL), "repeat": 0,
        "throughput": value,
        "throughput_per_gpu": value / world if value is not None and world else None,
        "unit": item.unit, "started": None,
        "ended": item.ended if item.ended and options.date is None else when,
        "params": {k: v for k, v in point.items() if v is not None},
        "metrics": metrics,
        "provenance": {"source": source, "versions": versions,
                       "hardware": ({"gpu_model": item.details["gpu_model"]}
                                    if item.details.get("gpu_model") else {})},
        "tags": list(options.tags),
        # one campaign per session of the tool, where it names one (ReFrame)
        "campaign": None if session is None else str(session),
    }
