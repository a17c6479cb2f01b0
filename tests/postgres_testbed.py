"""A real PostgreSQL server for tests: `scripts/postgres-testbed` as a pytest fixture.

`postgres_server` (session scope) starts Debian's PostgreSQL in a data directory of its
own, on 127.0.0.1 at a free port, and stops it at the end; `postgres_url` gives each
test a fresh database on it. Where PostgreSQL is not installed it skips (`sudo
scripts/postgres-testbed install`), or fails where SCALESTUDY_REQUIRE_POSTGRES=1 (CI).
Tests mark themselves `@pytest.mark.postgres`.
"""

from __future__ import annotations

import glob
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.testbed_sessions import unavailable

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "postgres-testbed"


def pytest_configure(config: pytest.Config) -> None:
    """Register the `postgres` marker (where this module is loaded as a plugin)."""
    config.addinivalue_line(
        "markers", "postgres: needs a real PostgreSQL server (scripts/postgres-testbed); "
        "skipped when not installed")


def _missing() -> str | None:
    if not glob.glob("/usr/lib/postgresql/*/bin/postgres"):
        return "PostgreSQL is not installed (sudo scripts/postgres-testbed install)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install -e '.[test]')"
    return None


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The URL of a running PostgreSQL server of this test session."""
    why = _missing()
    if why is not None:
        unavailable(why, "SCALESTUDY_REQUIRE_POSTGRES")
    # Under /tmp itself: the server's user must reach the directory (pytest's are 0700).
    where = tempfile.mkdtemp(prefix="scalestudy-pg.")
    try:
        done = subprocess.run([str(SCRIPT), "start", where], capture_output=True, text=True,
                              timeout=120)
        if done.returncode != 0:
            pytest.fail(f"postgres-testbed start: {done.stderr.strip()}")
        yield done.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([str(SCRIPT), "stop", where], capture_output=True, timeout=120)
        shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: str) -> str:
    """A fresh, empty database on the session's server."""
    import sqlalchemy as sa

    name = f"t_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(postgres_server, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return postgres_server.rsplit("/", 1)[0] + f"/{name}"
