"""Shared test helpers: writing specs, running the real CLI as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# The real-Slurm, real-OpenPBS, real-Flux and real-PostgreSQL fixtures (`slurm_cluster`,
# `pbs_cluster`, `flux_cluster`, `postgres_url`), for every test module.
pytest_plugins = ["tests.slurm_testbed", "tests.pbs_testbed", "tests.flux_testbed",
                  "tests.postgres_testbed"]

ROOT = Path(__file__).resolve().parents[1]

# Following a testbed's jobs, scalestudy asks the scheduler at most every 5 s instead of
# backing off to 60 s: its jobs last seconds to a minute, and the end of each was seen up
# to a minute late (15 s of a 95 s Slurm test). The backoff itself is tested apart
# (tests/test_tracking.py). A user's own value is kept.
os.environ.setdefault("SCALESTUDY_POLL_S", "5")

#: Each testbed's tests run in one pytest-xdist worker, one after another (`--dist
#: loadgroup`, as the README's test command asks): one study at a time on a testbed's
#: few nodes, and a test that stops slurmctld or the PBS server never pulls it from under
#: another. The other worker takes everything else.
TESTBEDS = {"slurm": "slurm_cluster", "pbs": "pbs_cluster", "flux": "flux_cluster",
            "postgres": "postgres_server"}


@pytest.hookimpl(tryfirst=True)  # before xdist tags each test id with its group
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put every test of a testbed (by its marker or its fixture) in that testbed's
    xdist group."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for group, fixture in TESTBEDS.items():
            if item.get_closest_marker(group) is not None or fixture in names:
                item.add_marker(pytest.mark.xdist_group(group))
                break


@pytest.fixture(autouse=True, scope="session")
def _results_store(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every test's `run` and `report` (and the CLI they start) feed a store of the test
    session, never the user's own (~/.local/state/scalestudy/history.sqlite)."""
    os.environ["SCALESTUDY_STORE"] = str(tmp_path_factory.mktemp("store") / "history.sqlite")


def run_cli(*args: str, cwd: Path, timeout: float = 600, path: str | None = None,
            env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`scalestudy ARGS` in a fresh interpreter, as a user runs it (`path`: its PATH;
    `env_extra`: more variables, e.g. COLUMNS)."""
    env = {k: v for k, v in os.environ.items() if k not in ("SCALESTUDY_DEBUG", "COLUMNS")}
    if path is not None:
        env["PATH"] = path
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-c", "from scalestudy.cli import main; main()", *args],
        cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env,
    )


@pytest.fixture
def write_spec(tmp_path: Path):
    """write_spec(text, name='study.yaml') -> path of a spec file in tmp_path."""

    def write(text: str, name: str = "study.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write
