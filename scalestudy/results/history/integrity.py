"""Whether a results store's SQLite file is intact, checked read-only before `run`,
`history check` and `history ingest` trust it.

SQLite's `PRAGMA quick_check` walks every page of every table and index and checks the
b-trees and the records' formats (not that indexes match their tables: that is
`integrity_check`, slower and no better here). It takes 0.23 s for a store of 100,000
attempts (207 MB). It finds a lost or overwritten page (a 4 KB block of random bytes in
the middle of a real store: 60 of 60 found) but not every small change inside a page
(512 random bytes: 23 of 60; 16 bytes: 4 of 60), and never a changed byte inside a
stored text: SQLite keeps no checksums. PostgreSQL has no such pragma (the server checks
its own pages, with data checksums where the cluster enabled them): nothing is checked
there.
"""

from __future__ import annotations

import contextlib
import sqlite3
import urllib.parse
from pathlib import Path

import sqlalchemy as sa


def damage(url: str) -> str:
    """What is wrong with the SQLite file `url` names ("" when it is intact, is not
    there yet, or is no SQLite file: PostgreSQL, an in-memory database, a URI)."""
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database \
            or parsed.database == ":memory:":
        return ""
    try:
        there = Path(parsed.database).is_file()
    except OSError:  # a directory this user cannot enter: opening it says why
        return ""
    return quick_check(Path(parsed.database)) if there else ""


def quick_check(path: Path) -> str:
    """What SQLite's quick_check finds wrong in a file ("" when nothing), opened read-only
    so that nothing is written into it."""
    uri = f"file:{urllib.parse.quote(str(path))}?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=30)) as conn:
            found = [str(r[0]) for r in conn.execute("PRAGMA quick_check(3)")]
    except sqlite3.OperationalError:  # cannot open or locked: opening it says why
        return ""
    except sqlite3.DatabaseError as exc:  # the header itself: not a database
        return str(exc)
    return "" if found == ["ok"] else "; ".join(found)[:300]
