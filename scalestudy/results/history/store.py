"""The results store: an index of every run attempt scalestudy has seen, with its
parameters, metrics and provenance, ingested from the run directories (which stay the
truth: a lost store is rebuilt from them) into SQLite, or a team's PostgreSQL.

SQLAlchemy 2 Core speaks both with one set of statements, so the embedded default and a
shared server cannot drift apart; psycopg 3 is the PostgreSQL driver (`pip install
scalestudy[postgres]`). The schema carries its version in `scalestudy_meta`; an older
store is migrated in place, a newer one is refused (upgrade scalestudy).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timezone
from functools import cached_property
from pathlib import Path
from typing import cast

import sqlalchemy as sa
from sqlalchemy.engine.interfaces import DBAPIConnection

from scalestudy.core.errors import ScalestudyError
from scalestudy.results.analysis import columns as col
from scalestudy.results.history.provenance import Attempt, attempts_of
from scalestudy.results.history.rows import AttemptRow, ForecastRow
from scalestudy.results.history.schema import (
    MIGRATIONS,
    OWN,
    SCHEMA_VERSION,
    attempts,
    forecasts,
    is_profile_file,
    meta,
    metadata,
    studies,
    system_name,
)

#: The variable that names the store (a URL, or a SQLite file's path).
URL_VARIABLE = "SCALESTUDY_STORE"

#: The schema's names, kept importable from here (store.SCHEMA_VERSION, store.studies, ...).
__all__ = ["MIGRATIONS", "OWN", "SCHEMA_VERSION", "attempts", "forecasts", "meta",
           "metadata", "studies"]


def default_path() -> Path:
    """The embedded store: in the user's state directory on this machine
    ($XDG_STATE_HOME, else ~/.local/state), not beside results/, which on a cluster sits
    on a parallel filesystem where SQLite's locks are not to be trusted."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "scalestudy" / "history.sqlite"


def store_url(given: str | None = None) -> str:
    """The store's URL: `--store`, else $SCALESTUDY_STORE, else the embedded default. A
    plain path is a SQLite file."""
    text = given or os.environ.get(URL_VARIABLE) or str(default_path())
    if "://" in text:
        return text
    return f"sqlite:///{Path(text).expanduser().resolve()}"


def shown(url: str) -> str:
    """The URL without its password, to print."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except (sa.exc.ArgumentError, ValueError):  # not a URL: mask what looks like a password
        return re.sub(r"(://[^:/@\s]*):[^@\s]*@", r"\1:***@", url)


class Store:
    """One results store, opened (created or migrated) on first use; `verify`: a SQLite
    file is checked (`quick_check`) before anything reads or writes it."""

    def __init__(self, url: str | None = None, *, verify: bool = False) -> None:
        self.url = store_url(url)
        self.verify = verify

    @cached_property
    def engine(self) -> sa.Engine:
        try:
            engine = sa.create_engine(self.url)
            if engine.dialect.name == "sqlite" and engine.url.database:
                Path(engine.url.database).parent.mkdir(parents=True, exist_ok=True)
            if engine.dialect.name == "sqlite":
                sa.event.listen(engine, "connect", _sqlite_pragmas)
            if self.verify:
                self.check_intact()
            with engine.begin() as conn:
                _open(conn)
        except ModuleNotFoundError as exc:
            raise ScalestudyError(
                f"results store {shown(self.url)}: its driver is not installed ({exc.name}); "
                "for PostgreSQL: pip install 'scalestudy[postgres]'") from None
        except sa.exc.OperationalError as exc:
            raise ScalestudyError(
                f"results store {shown(self.url)}: cannot open it ({exc.orig}); check the URL "
                f"(--store or ${URL_VARIABLE}) and that the server is up") from None
        except sa.exc.DatabaseError as exc:
            raise ScalestudyError(
                f"results store {shown(self.url)}: not a results store ({exc.orig}); point "
                f"--store or ${URL_VARIABLE} at a SQLite file scalestudy made, a new path, "
                "or a PostgreSQL URL") from None
        except (sa.exc.ArgumentError, ValueError) as exc:
            raise ScalestudyError(
                f"results store {shown(self.url)}: not a URL scalestudy can open ({exc}); "
                "give a SQLite file's path or postgresql+psycopg://user@host:port/db") from None
        except OSError as exc:
            raise ScalestudyError(
                f"results store {shown(self.url)}: cannot create its directory "
                f"({exc.strerror}); point --store or ${URL_VARIABLE} at a place you can "
                "write") from None
        return engine

    @contextlib.contextmanager
    def _failing(self, doing: str) -> Iterator[None]:
        """A database error while `doing` as one line that says what and where."""
        try:
            yield
        except sa.exc.SQLAlchemyError as exc:
            cause = str(getattr(exc, "orig", None) or exc).splitlines()[0]
            hint = ("the store is read-only here: point --store or "
                    f"${URL_VARIABLE} at one you can write" if "readonly" in cause.replace(
                        "-", "") or "read only" in cause else
                    "check the store (--store or $SCALESTUDY_STORE) and that it is reachable")
            raise ScalestudyError(f"results store {shown(self.url)}: cannot {doing} "
                                  f"({cause}); {hint}") from None

    def check_intact(self) -> None:
        """Refuse a damaged SQLite file before it is read or written (exit 2, one line;
        results.history.integrity says what is checked); nothing for PostgreSQL."""
        from scalestudy.results.history.integrity import damage

        found = damage(self.url)
        if found:
            raise ScalestudyError(
                f"results store {shown(self.url)}: the file is damaged (SQLite's quick_check: "
                f"{found}); nothing was read from or written into it; move it aside and "
                f"rebuild it from the run directories (`scalestudy history ingest results/` "
                f"with --store or ${URL_VARIABLE} naming a new file)")

    def version(self) -> int:
        """The schema version the store holds."""
        with self.engine.connect() as conn:
            return _version(conn) or 0

    def ingest(self, study_dir: Path) -> int:
        """Index the ended attempts of a study's run directories; how many it holds.
        Ingesting the same directory again gives the same rows (an attempt is keyed by
        study directory, run id and attempt number, and replaced)."""
        study_dir = Path(study_dir).resolve()
        found = attempts_of(study_dir)
        if not found:
            return 0
        first = dict(found[0].params)
        first["system_file"] = (found[0].provenance or {}).get(
            "configuration", {}).get("system_file")
        if is_profile_file(first.get(col.SYSTEM)):  # run.json of a release before 4
            first["system_file"] = first["system_file"] or first[col.SYSTEM]
            first[col.SYSTEM] = system_name(first[col.SYSTEM], found[0].provenance)
        with self._failing("store the study's runs"), self.engine.begin() as conn:
            study_id = _study_row(conn, study_dir, first)
            conn.execute(sa.delete(attempts).where(attempts.c.study_id == study_id))
            conn.execute(sa.insert(attempts), [_row(study_id, a) for a in found])
        return len(found)

    def rows(self, *, system: str | None = None, model: str | None = None,
             since: datetime | None = None, tag: str | None = None,
             study: str | None = None, directory: str | None = None
             ) -> list[AttemptRow]:
        """Ingested attempts (with their study's name, system and directory), oldest
        first, filtered by system, model, end time, tag, study name and directory."""
        query = (sa.select(attempts, studies.c.name.label("study"),
                           studies.c.directory, studies.c.system, studies.c.system_file,
                           studies.c.source)
                 .join(studies, attempts.c.study_id == studies.c.id)
                 .order_by(attempts.c.ended, attempts.c.id))
        if system:
            query = query.where(studies.c.system == system)
        if model:
            query = query.where(attempts.c.model == model)
        if since is not None:
            query = query.where(attempts.c.ended >= since)
        if study:
            query = query.where(studies.c.name == study)
        if directory:
            query = query.where(studies.c.directory == directory)
        with self._failing("read it"), self.engine.connect() as conn:
            # the query's columns are AttemptRow's keys (results.history.rows)
            found = [cast(AttemptRow, dict(r._mapping)) for r in conn.execute(query)]
        return [r for r in found if tag is None or tag in (r[col.TAGS] or [])]

    def systems(self) -> list[str]:
        """The systems the store holds runs or kept forecasts of, by name."""
        with self._failing("read it"), self.engine.connect() as conn:
            found = {s for table in (studies, forecasts)
                     for (s,) in conn.execute(sa.select(table.c.system).distinct())}
        return sorted(s for s in found if s)

    def put_imported(self, files: list[tuple[str, str, str | None, str, list[AttemptRow]]]
                     ) -> list[int]:
        """Store results measured elsewhere beside scalestudy's own, all files or none
        (one transaction): each (key naming the file, e.g. by its hash; name; system;
        format; rows). Importing a file again replaces its rows."""
        with self._failing("store the imports"), self.engine.begin() as conn:
            for key, name, system, source, rows in files:
                study_id = _study_row(conn, key, {"study": name, "system": system}, source)
                conn.execute(sa.delete(attempts).where(attempts.c.study_id == study_id))
                if rows:
                    conn.execute(sa.insert(attempts),
                                 [{**r, "study_id": study_id} for r in rows])
        return [len(rows) for *_, rows in files]

    def put_forecasts(self, rows: list[ForecastRow], *, once: bool = False) -> int:
        """Keep forecasts in the ledger (each: made, system, source, point, gpus,
        throughput, low, high, level, unit, model), once: a forecast of the same system,
        source, point and scale (forecast_key) updates the one entry, and one the ledger
        already holds with the same figures is left as it was (its time kept, so runs
        measured since still score it); how many were added or updated. `once` is
        accepted for callers of earlier releases (it is always so now)."""
        del once
        if not rows:
            return 0
        changed = 0
        with self._failing("keep the forecasts"), self.engine.begin() as conn:
            held = {forecast_key(r): r for r in conn.execute(sa.select(forecasts).where(
                forecasts.c.source.in_({r[col.SOURCE] for r in rows}))).mappings()}
            for r in {forecast_key(r): r for r in rows}.values():
                old = held.get(forecast_key(r))
                if old is None:
                    conn.execute(sa.insert(forecasts), [r])
                elif _same(old) != _same(r):
                    conn.execute(sa.update(forecasts).where(forecasts.c.id == old["id"])
                                 .values(**r))
                else:
                    continue
                changed += 1
        return changed

    def forecasts(self, system: str | None = None) -> list[ForecastRow]:
        """The ledger's forecasts, oldest first (of one system)."""
        query = sa.select(forecasts).order_by(forecasts.c.made, forecasts.c.id)
        if system:
            query = query.where(forecasts.c.system == system)
        with self._failing("read the forecasts"), self.engine.connect() as conn:
            return [cast(ForecastRow, dict(r._mapping)) for r in conn.execute(query)]

    def dispose(self) -> None:
        """Close the store's connections."""
        if "engine" in self.__dict__:
            self.engine.dispose()


def as_utc(value: object) -> datetime:
    """A stored time (a datetime, or its ISO text) as an aware UTC datetime: SQLite gives
    times back without a zone, and they are UTC."""
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None \
        else moment.astimezone(timezone.utc)


def campaign_of(row: AttemptRow) -> str:
    """A stored attempt's campaign; for one stored before campaigns, its attempt number
    (a study's runs were started together, attempt by attempt)."""
    return str(row.get(col.CAMPAIGN) or f"attempt {row.get('attempt')}")


def latest_attempts(rows: Iterable[AttemptRow]) -> list[AttemptRow]:
    """The newest attempt of each run among stored rows (one per directory and run id)."""
    latest: dict[tuple[str, str], AttemptRow] = {}
    for r in rows:
        key = (r[col.DIRECTORY], r[col.RUN_ID])
        if key not in latest or r[col.ATTEMPT] > latest[key][col.ATTEMPT]:
            latest[key] = r.copy()
    return list(latest.values())


def study_dirs(results: Path) -> list[Path]:
    """The study directories under a results directory (those with run directories)."""
    return sorted(p.parent for p in Path(results).glob("*/runs") if p.is_dir())


def _sqlite_pragmas(dbapi_connection: DBAPIConnection, _record: object) -> None:
    """Foreign keys on, and a writer waits for another (two `run`s ending at once)."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def _version(conn: sa.Connection) -> int | None:
    if not sa.inspect(conn).has_table(meta.name):
        return None
    value = conn.execute(sa.select(meta.c.value).where(meta.c.key == "schema_version")
                         ).scalar_one_or_none()
    return int(value) if value is not None else None


def _open(conn: sa.Connection) -> None:
    """Create the schema, or migrate it to SCHEMA_VERSION; refuse a newer one."""
    version = _version(conn)
    if version is None:
        metadata.create_all(conn)
        conn.execute(sa.insert(meta).values(key="schema_version", value=str(SCHEMA_VERSION)))
        return
    if version > SCHEMA_VERSION:
        raise ScalestudyError(
            f"the results store has schema version {version}, newer than this scalestudy "
            f"reads ({SCHEMA_VERSION}): upgrade scalestudy, or point --store at another store")
    for step in range(version + 1, SCHEMA_VERSION + 1):
        MIGRATIONS[step](conn)
        conn.execute(sa.update(meta).where(meta.c.key == "schema_version")
                     .values(value=str(step)))
    # a version-3 store written before the ledger's table joined that version
    forecasts.create(conn, checkfirst=True)


def _study_row(conn: sa.Connection, directory: Path | str, params: Mapping[str, object],
               source: str = OWN) -> int:
    now = datetime.now(timezone.utc)
    values = {"name": str(params.get(col.STUDY) or Path(directory).name),
              "system": _text(params.get(col.SYSTEM)), "scaling": _text(params.get("scaling")),
              "system_file": _text(params.get("system_file")), "ingested": now,
              "source": source}
    found = conn.execute(sa.select(studies.c.id).where(studies.c.directory == str(directory))
                         ).scalar_one_or_none()
    if found is not None:
        conn.execute(sa.update(studies).where(studies.c.id == found).values(**values))
        return int(found)
    # SQLAlchemy types inserted_primary_key Optional; a one-row insert() always has it.
    return int(conn.execute(sa.insert(studies).values(directory=str(directory), **values)
                            ).inserted_primary_key[0])  # type: ignore[index]


def _row(study_id: int, a: Attempt) -> AttemptRow:
    p, record = a.params, a.record or {}
    throughput = record.get(col.THROUGHPUT) if a.state == "completed" else None
    world = p.get(col.WORLD_SIZE)
    return {
        "study_id": study_id, "run_id": str(p[col.RUN_ID]), "attempt": a.number,
        "state": a.state, "nodes": p.get(col.NODES), "ranks_per_node": p.get(col.RANKS_PER_NODE),
        "world_size": world, "batch_size": p.get(col.BATCH_SIZE),
        "global_batch": p.get(col.GLOBAL_BATCH), "backend": _text(p.get(col.BACKEND)),
        "tuning": _text(p.get(col.TUNING)), "model": _text(p.get(col.MODEL)),
        "repeat": p.get("repeat"), "throughput": throughput,
        "throughput_per_gpu": (throughput / world if throughput and world else None),
        "unit": str(record.get(col.THROUGHPUT_UNIT) or "img/s"),
        "started": a.started, "ended": a.ended, "params": dict(p),
        "metrics": a.record, "provenance": a.provenance, "tags": list(a.tags),
        "campaign": a.campaign,
    }


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def forecast_key(row: ForecastRow | sa.RowMapping) -> tuple[object, ...]:
    """What makes two ledger rows the same forecast: its system, source, point and scale
    (making it again updates the one entry)."""
    return (row[col.SYSTEM], row[col.SOURCE], json.dumps(row["point"], sort_keys=True,
                                                         default=str), int(row[col.GPUS]))


def _same(row: ForecastRow | sa.RowMapping) -> tuple[object, ...]:
    """What makes two ledger rows the same forecast (the time it was made aside)."""
    return (row[col.SYSTEM], row[col.SOURCE], row[col.GPUS], round(float(row[col.THROUGHPUT]), 6),
            round(float(row["low"]), 6), round(float(row["high"]), 6))
