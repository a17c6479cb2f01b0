"""A real Flux instance on this machine for tests: `scripts/flux-testbed` as a pytest fixture.

`flux_cluster` (session scope) starts the testbed (one `flux start --test-size=4`: fake
nodes node0..node3 with 2 cores each, queues `batch` (the default) and `debug`) and
stops it at the end unless SCALESTUDY_KEEP_FLUX=1, it was started by hand before the
session, or another test session still uses it. An instance accepts only the user who
started it and runs every job as that user: run as root, that is `fluxuser`, and every
command goes through `scripts/flux-testbed exec`. Where Flux is not built it skips
(`scripts/flux-testbed install TARBALL` builds it), or fails where
SCALESTUDY_REQUIRE_FLUX=1 (CI).

    def test_something(flux_cluster: FluxCluster, flux_tmp_path: Path) -> None:
        job_id = flux_cluster.submit("batch", "-N2", "job.sh", cwd=flux_tmp_path)
        assert flux_cluster.wait_for_job(job_id)["result"] == "COMPLETED"

Job ids are printed in ASCII (FLUX_F58_FORCE_ASCII=1: `f6q9bC2j`, not `ƒ6q9bC2j`).
Tests mark themselves `@pytest.mark.flux`.
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.testbed_sessions import (
    UserDirs,
    join,
    leave,
    parse_exports,
    script_runner,
    unavailable,
)

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "flux-testbed"
CACHE = Path(os.environ.get("SCALESTUDY_FLUX_CACHE") or "/var/cache/scalestudy/flux")
# Who runs the instance (the script's rule): `fluxuser` for root, else the caller.
USER = (os.environ.get("SCALESTUDY_FLUX_USER") or "fluxuser") if os.geteuid() == 0 \
    else pwd.getpwuid(os.geteuid()).pw_name
STATE_DIR = Path(os.environ.get("SCALESTUDY_FLUX_DIR") or f"/tmp/scalestudy-flux-{USER}")
INSTALL_HINT = (
    "scripts/flux-testbed install /path/to/flux-core-0.88.0.tar.gz "
    "(the flux-core release tarball; or set SCALESTUDY_FLUX_TARBALL)"
)
# A job in this state has ended for good; `result` says how.
INACTIVE = "INACTIVE"
# Every command's ids in ASCII, whatever the locale.
ASCII_IDS = {"FLUX_F58_FORCE_ASCII": "1"}


@dataclass(frozen=True)
class FluxCluster:
    """A running testbed: what `flux_cluster` yields."""

    nodes: list[str]  # ["node0", "node1", "node2", "node3"]
    cores: int  # cores of each node
    queues: list[str]  # ["batch", "debug"]; batch is the default
    user: str  # who the instance belongs to (and who runs every job)
    uri: str  # FLUX_URI
    prefix: Path  # the Flux installation (its bin/flux)
    env: dict[str, str]  # the variables `flux-testbed start` exports
    state_dir: Path

    def run_as_user(self, argv: Sequence[str], cwd: Path | str | None = None,
                    timeout: float = 60, input: str | None = None,
                    env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """ARGV as the instance's user, from cwd, FLUX_URI set, flux first on PATH."""
        full_env = {k: v for k, v in os.environ.items() if k != "SCALESTUDY_DEBUG"}
        full_env.update(ASCII_IDS)
        full_env.update(env or {})
        return subprocess.run(
            [str(SCRIPT), "exec", "--", *argv], cwd=cwd, input=input,
            capture_output=True, text=True, timeout=timeout, env=full_env,
        )

    def scalestudy(self, *args: str, cwd: Path | str,
                   timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """The scalestudy CLI (this checkout, the venv's Python) as the instance's user."""
        return self.run_as_user(
            [str(ROOT / ".venv" / "bin" / "python"), "-c",
             "from scalestudy.cli import main; main()", *args],
            cwd=cwd, timeout=timeout, env={"PYTHONPATH": str(ROOT)})

    def flux(self, *args: str, cwd: Path | str | None = None,
             timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """`flux ARGS` as the instance's user."""
        return self.run_as_user(["flux", *args], cwd=cwd, timeout=timeout)

    def submit(self, command: str, *args: str, cwd: Path | str,
               timeout: float = 30) -> str:
        """`flux batch ARGS` or `flux submit ARGS` (command) from cwd; the job id (f58)."""
        proc = self.flux(command, *args, cwd=cwd, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(
                f"flux {command} {shlex.join(args)} failed (exit {proc.returncode}): "
                f"{proc.stderr.strip()}")
        return proc.stdout.strip()

    def job(self, job_id: str, timeout: float = 30) -> dict[str, Any] | None:
        """`flux jobs --json ID`: the job's record, None when Flux does not know it."""
        proc = self.flux("jobs", "--json", job_id, timeout=timeout)
        if proc.returncode != 0:
            return None
        return json.loads(proc.stdout)

    def wait_for_job(self, job_id: str, timeout: float = 60.0, poll: float = 0.3,
                     state: str = INACTIVE) -> dict[str, Any]:
        """Poll `flux jobs --json ID` until the job is in `state` (INACTIVE: ended);
        its record. Raises TimeoutError with the last state seen."""
        deadline = time.monotonic() + timeout
        last: dict[str, Any] = {}
        while True:
            last = self.job(job_id) or last
            if last.get("state") == state or (state != INACTIVE and last.get("state") == INACTIVE):
                return last
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"job {job_id} not {state} after {timeout:.0f} s "
                    f"(state {last.get('state')}, result {last.get('result')})")
            time.sleep(poll)

    def user_dir(self, name: str = "work") -> Path:
        """A new empty directory the instance's user owns, where its jobs can write."""
        return _DIRS.make(name, self.user)


_DIRS = UserDirs("SCALESTUDY_FLUX_TMP", "scalestudy-flux-tests-")


def flux_installed() -> bool:
    """flux-core is built into the cache (scripts/flux-testbed install)."""
    return (CACHE / "current" / "bin" / "flux").exists()


_testbed = script_runner(SCRIPT, timeout=120)


@pytest.fixture(scope="session")
def flux_cluster() -> Iterator[FluxCluster]:
    """A running Flux testbed for the whole session."""
    if not flux_installed():
        unavailable(f"Flux testbed not installed: run {INSTALL_HINT}", "SCALESTUDY_REQUIRE_FLUX")
    started = join(STATE_DIR, _testbed)
    if started.returncode != 0:
        pytest.fail(f"scripts/flux-testbed start failed:\n{started.stderr}", pytrace=False)
    env = parse_exports(started.stdout)
    cluster = FluxCluster(
        nodes=env["SCALESTUDY_FLUX_NODES"].split(","),
        cores=int(env["SCALESTUDY_FLUX_CORES"]),
        queues=env["SCALESTUDY_FLUX_QUEUES"].split(","),
        user=env["SCALESTUDY_FLUX_USER"],
        uri=env["FLUX_URI"],
        prefix=Path(env["SCALESTUDY_FLUX_PREFIX"]),
        env=env,
        state_dir=Path(env["SCALESTUDY_FLUX_DIR"]),
    )
    try:
        yield cluster
    finally:
        keep = os.environ.get("SCALESTUDY_KEEP_FLUX") == "1"
        if not keep:
            _DIRS.remove()
        leave(STATE_DIR, _testbed, keep=keep)


@pytest.fixture
def flux_tmp_path(flux_cluster: FluxCluster, request: pytest.FixtureRequest) -> Path:
    """Like tmp_path, but owned by the instance's user, where its jobs can write."""
    return flux_cluster.user_dir(request.node.name)
