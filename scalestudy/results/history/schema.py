"""The results store's schema: its tables, its version, and the migrations that bring a
store an older release wrote up to it (each version n-1 -> n, in the transaction that
records n). store.py opens stores with it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa

#: The schema this release writes and reads; older ones are migrated on open.
SCHEMA_VERSION = 4
#: What measured a study's rows when scalestudy did not (the import's format).
OWN = "scalestudy"

metadata = sa.MetaData()
meta = sa.Table(
    "scalestudy_meta", metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False))
studies = sa.Table(
    "studies", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("directory", sa.Text, nullable=False, unique=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("system", sa.Text),
    sa.Column("scaling", sa.Text),
    sa.Column("ingested", sa.DateTime(timezone=True), nullable=False),
    # version 2: scalestudy, or the format of imported results (nccl-tests, horovod, ...)
    sa.Column("source", sa.Text, nullable=False, server_default=OWN),
    # version 4: the profile file the system was read from, where the spec gave a path
    # (`system` is always the profile's own name)
    sa.Column("system_file", sa.Text))
attempts = sa.Table(
    "attempts", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("study_id", sa.Integer, sa.ForeignKey("studies.id", ondelete="CASCADE"),
              nullable=False),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("nodes", sa.Integer),
    sa.Column("ranks_per_node", sa.Integer),
    sa.Column("world_size", sa.Integer),
    sa.Column("batch_size", sa.Integer),
    sa.Column("global_batch", sa.Integer),
    sa.Column("backend", sa.Text),
    sa.Column("tuning", sa.Text),
    sa.Column("model", sa.Text),
    sa.Column("repeat", sa.Integer),
    sa.Column("throughput", sa.Float),
    sa.Column("throughput_per_gpu", sa.Float),
    sa.Column("unit", sa.Text),
    sa.Column("started", sa.DateTime(timezone=True)),
    sa.Column("ended", sa.DateTime(timezone=True)),
    sa.Column("params", sa.JSON, nullable=False),
    sa.Column("metrics", sa.JSON),
    sa.Column("provenance", sa.JSON, nullable=False),
    sa.Column("tags", sa.JSON, nullable=False),
    # version 3: the campaign (one `scalestudy run`) that started the attempt
    sa.Column("campaign", sa.Text),
    sa.UniqueConstraint("study_id", "run_id", "attempt"))
sa.Index("attempts_by_point", attempts.c.model, attempts.c.world_size, attempts.c.ended)
# version 3: the prediction ledger, every forecast `predict` made with what it came from
forecasts = sa.Table(
    "forecasts", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("made", sa.DateTime(timezone=True), nullable=False),
    sa.Column("system", sa.Text, nullable=False),
    sa.Column("source", sa.Text, nullable=False),
    sa.Column("point", sa.JSON, nullable=False),  # model, batch_size, backend, tuning
    sa.Column("gpus", sa.Integer, nullable=False),
    sa.Column("throughput", sa.Float, nullable=False),
    sa.Column("low", sa.Float, nullable=False),
    sa.Column("high", sa.Float, nullable=False),
    sa.Column("level", sa.Float, nullable=False),
    sa.Column("unit", sa.Text, nullable=False),
    sa.Column("model", sa.JSON, nullable=False))

def _add_source(conn: sa.Connection) -> None:
    """Version 2: studies say what measured them (imports beside scalestudy's runs)."""
    conn.execute(sa.text(f"ALTER TABLE studies ADD COLUMN source TEXT NOT NULL "
                         f"DEFAULT '{OWN}'"))


def _add_campaign(conn: sa.Connection) -> None:
    """Version 3: each attempt names its campaign (NULL for attempts stored before; the
    run directories say it where they know it, and `history ingest` fills it in), and
    the prediction ledger's table."""
    conn.execute(sa.text("ALTER TABLE attempts ADD COLUMN campaign TEXT"))
    forecasts.create(conn, checkfirst=True)


def _name_systems(conn: sa.Connection) -> None:
    """Version 4: one name per system. Releases before stored a profile given by path
    under the path (`./mysite.yaml`) while its runs' provenance named the profile
    (`mysite`): each such study takes the profile's name from its attempts' provenance
    (else the file's stem), the path moves beside it, and the ledger's forecasts follow."""
    if "system_file" not in {c["name"] for c in sa.inspect(conn).get_columns("studies")}:
        conn.execute(sa.text("ALTER TABLE studies ADD COLUMN system_file TEXT"))
    renamed: dict[str, str] = {}
    for study_id, system in conn.execute(sa.select(studies.c.id, studies.c.system)).all():
        if not is_profile_file(system):
            continue
        provenance = conn.execute(sa.select(attempts.c.provenance).where(
            attempts.c.study_id == study_id).limit(1)).scalar_one_or_none()
        name = system_name(system, provenance)
        renamed[system] = name
        conn.execute(sa.update(studies).where(studies.c.id == study_id)
                     .values(system=name, system_file=system))
    for path, name in renamed.items():
        conn.execute(sa.update(forecasts).where(forecasts.c.system == path).values(system=name))
    for (path,) in conn.execute(sa.select(forecasts.c.system).distinct()).all():
        if is_profile_file(path):  # kept by a report whose study is no longer stored
            conn.execute(sa.update(forecasts).where(forecasts.c.system == path)
                         .values(system=Path(path).stem))


#: Migrations: version n-1 -> n, each in the transaction that records version n.
MIGRATIONS: dict[int, Callable[[sa.Connection], None]] = {
    2: _add_source, 3: _add_campaign, 4: _name_systems}


def is_profile_file(system: object) -> bool:
    """Whether a stored system is a profile file's path (as releases before version 4
    recorded it) rather than a name."""
    return isinstance(system, str) and system.endswith((".yaml", ".yml"))


def system_name(system: str, provenance: object) -> str:
    """The name of a system recorded as a profile file's path: the profile's name as the
    run's provenance has it (the job's SCALESTUDY_SYSTEM), else the file's stem."""
    if isinstance(provenance, str):  # SQLite hands JSON back as text in a migration
        import json

        with contextlib.suppress(ValueError):
            provenance = json.loads(provenance)
    named = (provenance or {}).get("configuration", {}).get("system") \
        if isinstance(provenance, dict) else None
    if isinstance(named, str) and named and not is_profile_file(named):
        return named
    return Path(system).stem
