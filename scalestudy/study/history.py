"""The history use cases: a study's runs go into the results store as `run` and `report`
finish; `history ingest` takes older studies (or rebuilds a lost store); `history` lists
what the store holds over time."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scalestudy.core.errors import ScalestudyError
from scalestudy.site.plan import Plan

if TYPE_CHECKING:
    from scalestudy.results.store import Store

#: `--since` durations: 30d, 12h, 2w.
_SINCE = re.compile(r"^(\d+)([hdw])$")


def open_store(url: str | None = None) -> Store:
    """The results store (`--store`, $SCALESTUDY_STORE, or the embedded default)."""
    from scalestudy.results.store import Store

    return Store(url)


def store_study(plan: Plan, url: str | None = None) -> str:
    """Index the study's ended runs in the store; one line saying what was stored, or
    why not (the run directories stay the truth: a store that cannot be written never
    fails a run or a report)."""
    import sqlalchemy.exc

    from scalestudy.results.store import URL_VARIABLE, shown

    store = open_store(url)
    try:
        count = store.ingest(plan.directory)
    except (ScalestudyError, sqlalchemy.exc.SQLAlchemyError, OSError) as exc:
        return (f"history: not stored in {shown(store.url)}: {exc}; the run directories "
                f"keep everything: `scalestudy history ingest {plan.directory}` later, or set "
                f"${URL_VARIABLE}")
    finally:
        store.dispose()
    return f"history: {count} run attempt(s) of {plan.study.name} in {shown(store.url)}"


@dataclass(frozen=True)
class Ingested:
    """What `history ingest` did per directory."""

    directory: Path
    attempts: int


def ingest(directories: list[Path], url: str | None = None) -> list[Ingested]:
    """Index study directories (results/<study>), or every study under a results
    directory; idempotent."""
    from scalestudy.results.store import study_dirs

    store = open_store(url)
    out = []
    try:
        for directory in directories:
            if not Path(directory).is_dir():
                raise ScalestudyError(f"{directory}: no such directory; give a study's "
                                      "results directory (results/<study>) or results/")
            found = [Path(directory)] if (Path(directory) / "runs").is_dir() else \
                study_dirs(Path(directory))
            if not found:
                raise ScalestudyError(f"{directory}: holds no run directories (runs/<id>/); "
                                      "give results/<study> or the results directory")
            out += [Ingested(d, store.ingest(d)) for d in found]
    finally:
        store.dispose()
    return out


def since(text: str | None, now: datetime | None = None) -> datetime | None:
    """`--since 30d` (hours h, days d, weeks w) as the moment it names."""
    if text is None:
        return None
    match = _SINCE.match(text.strip())
    if match is None:
        raise ScalestudyError(f"--since {text!r}: give a number and h, d or w (e.g. 30d, 12h)")
    count, unit = int(match.group(1)), match.group(2)
    span = {"h": timedelta(hours=count), "d": timedelta(days=count),
            "w": timedelta(weeks=count)}[unit]
    return (now or datetime.now(timezone.utc)) - span


def history(url: str | None = None, *, system: str | None = None, model: str | None = None,
            since_text: str | None = None, tag: str | None = None,
            study: str | None = None) -> list[dict[str, Any]]:
    """The stored run attempts, oldest first, filtered."""
    store = open_store(url)
    try:
        return store.rows(system=system, model=model, since=since(since_text), tag=tag,
                          study=study)
    finally:
        store.dispose()
