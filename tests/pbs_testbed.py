"""A real OpenPBS complex on this machine for tests: `scripts/pbs-testbed` as a pytest fixture.

`pbs_cluster` (session scope) starts the testbed (PostgreSQL + pbs_server, pbs_sched and
pbs_comm on the head host `pbslab`, one pbs_mom on each of n0..n3, 2 CPUs each, every
host in its own network and UTS namespace) and stops it at the end unless
SCALESTUDY_KEEP_PBS=1, it was started by hand before the session, or another test
session still uses it. PBS clients reach the server only from inside the head's
namespaces and PBS runs no job as root: every command goes through
`scripts/pbs-testbed exec`, as the user `pbsuser`. Where OpenPBS is not installed it
skips (`scripts/pbs-testbed install TARBALL` installs it), or fails where
SCALESTUDY_REQUIRE_PBS=1 (CI).

    def test_something(pbs_cluster: PBSCluster, pbs_tmp_path: Path) -> None:
        job_id = pbs_cluster.qsub("-l", "select=2:ncpus=1", "--", "/bin/hostname",
                                  cwd=pbs_tmp_path)
        assert pbs_cluster.wait_for_job(job_id)["Exit_status"] == 0

Tests mark themselves `@pytest.mark.pbs`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
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
SCRIPT = ROOT / "scripts" / "pbs-testbed"
STATE_DIR = Path(os.environ.get("SCALESTUDY_PBS_DIR") or "/var/spool/scalestudy-pbs")
PBS_EXEC = Path("/opt/pbs")
INSTALL_HINT = (
    "scripts/pbs-testbed install /path/to/openpbs-v23.06.06.tar.gz "
    "(the OpenPBS source tarball; or set SCALESTUDY_OPENPBS_TARBALL)"
)
# A job in state F is finished for good (history is on: qstat -x still shows it).
FINISHED = "F"


def pytest_configure(config: pytest.Config) -> None:
    """Register the `pbs` marker (effective where this module is loaded as a plugin)."""
    config.addinivalue_line(
        "markers", "pbs: needs the real OpenPBS testbed (scripts/pbs-testbed); "
        "skipped when not installed")



def _job_state_from_text(text: str) -> dict[str, Any]:
    """`qstat -x -f` text -> {"job_state": ..., "Exit_status": int|None, "comment": ...}."""
    attrs: dict[str, Any] = {}
    for name in ("job_state", "comment"):
        m = re.search(rf"^\s+{name} = (.*)$", text, re.M)
        if m:
            attrs[name] = m.group(1).strip()
    m = re.search(r"^\s+Exit_status = (-?\d+)", text, re.M)
    if m:
        attrs["Exit_status"] = int(m.group(1))
    return attrs


@dataclass(frozen=True)
class PBSCluster:
    """A running testbed: what `pbs_cluster` yields."""

    nodes: list[str]  # compute host names, ["n0", "n1", "n2", "n3"]
    head: str  # the server's host name, "pbslab" (job ids end in ".pbslab")
    user: str  # who submits: "pbsuser"
    ncpus: int  # resources_available.ncpus of each node
    env: dict[str, str]  # the variables `pbs-testbed start` exports
    state_dir: Path  # datastore, PBS_HOMEs, logs
    python: Path = field(default=ROOT / ".venv" / "bin" / "python")  # runnable by pbsuser

    @property
    def master_addr(self) -> str:
        """MASTER_ADDR of a job whose first node is n0, as seen from inside the job."""
        return self.nodes[0]

    def run_as_user(self, argv: Sequence[str], cwd: Path | str | None = None,
                    timeout: float = 60, input: str | None = None,
                    env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """ARGV on the head host as pbsuser, from cwd, PBS commands first on PATH."""
        return self._exec([], argv, cwd, timeout, input, env)

    def run_as_root(self, argv: Sequence[str], cwd: Path | str | None = None,
                    timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """ARGV on the head host as root (qmgr, pbsnodes -o ...)."""
        return self._exec(["--root"], argv, cwd, timeout, None, None)

    def _exec(self, opts: list[str], argv: Sequence[str], cwd: Path | str | None,
              timeout: float, input: str | None,
              env: dict[str, str] | None) -> subprocess.CompletedProcess[str]:
        full_env = {k: v for k, v in os.environ.items() if k != "SCALESTUDY_DEBUG"}
        full_env.update(env or {})
        return subprocess.run(
            [str(SCRIPT), "exec", *opts, "--", *argv], cwd=cwd, input=input,
            capture_output=True, text=True, timeout=timeout, env=full_env,
        )

    def qsub(self, *args: str, cwd: Path | str, timeout: float = 30) -> str:
        """`qsub ARGS` as pbsuser from cwd; the job id as printed ("12.pbslab", "13[].pbslab")."""
        proc = self.run_as_user(["qsub", *args], cwd=cwd, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(
                f"qsub {shlex.join(args)} failed (exit {proc.returncode}): {proc.stderr.strip()}")
        return proc.stdout.strip()

    def qstat(self, *job_ids: str, timeout: float = 30) -> dict[str, dict[str, Any]]:
        """`qstat -x -f -F json IDS` -> {full id: attributes}; unknown ids are left out."""
        proc = self.run_as_user(["qstat", "-x", "-f", "-F", "json", *job_ids], timeout=timeout)
        try:
            return dict(json.loads(proc.stdout).get("Jobs", {}))
        except ValueError:
            # Not JSON (qstat printed nothing: every id unknown): ask the text form.
            jobs: dict[str, dict[str, Any]] = {}
            for job_id in job_ids:
                text = self.run_as_user(["qstat", "-x", "-f", job_id], timeout=timeout)
                if text.returncode == 0:
                    jobs[job_id] = _job_state_from_text(text.stdout)
            return jobs

    def wait_for_job(self, job_id: str, timeout: float = 60.0,
                     poll: float = 0.3) -> dict[str, Any]:
        """Poll `qstat -x -f -F json` until the job is finished (F); its attributes.

        For an array job, pass the array id ("7[].pbslab"): it is F when all sub-jobs are.
        Raises TimeoutError with the last state and comment after `timeout` seconds.
        """
        deadline = time.monotonic() + timeout
        last: dict[str, Any] = {}
        while True:
            jobs = self.qstat(job_id)
            if jobs:
                last = next(iter(jobs.values()))
                if last.get("job_state") == FINISHED:
                    return last
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"job {job_id} not finished after {timeout:.0f} s "
                    f"(job_state {last.get('job_state')}, comment {last.get('comment')!r})")
            time.sleep(poll)

    def scalestudy(self, *args: str, cwd: Path | str,
                   timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """The scalestudy CLI (this checkout, the venv's Python) as pbsuser from cwd."""
        return self.run_as_user(
            [str(self.python), "-c", "from scalestudy.cli import main; main()", *args],
            cwd=cwd, timeout=timeout, env={"PYTHONPATH": str(ROOT)},
        )

    def user_dir(self, name: str = "work") -> Path:
        """A new empty directory pbsuser owns, where its jobs can write."""
        return _DIRS.make(name, self.user)


_DIRS = UserDirs("SCALESTUDY_PBS_TMP", "scalestudy-pbs-tests-")


def pbs_installed() -> bool:
    """OpenPBS is built into /opt/pbs (scripts/pbs-testbed install)."""
    return (PBS_EXEC / "sbin" / "pbs_server").exists() and (PBS_EXEC / "bin" / "qsub").exists()


_testbed = script_runner(SCRIPT, timeout=300)




@pytest.fixture(scope="session")
def pbs_cluster() -> Iterator[PBSCluster]:
    """A running OpenPBS testbed for the whole session."""
    if not pbs_installed():
        unavailable(f"OpenPBS testbed not installed: run {INSTALL_HINT}", "SCALESTUDY_REQUIRE_PBS")
    if os.geteuid() != 0:
        unavailable("the OpenPBS testbed needs root (namespaces, daemons)",
                    "SCALESTUDY_REQUIRE_PBS")
    started = join(STATE_DIR, _testbed)
    if started.returncode != 0:
        pytest.fail(f"scripts/pbs-testbed start failed:\n{started.stderr}", pytrace=False)
    env = parse_exports(started.stdout)
    cluster = PBSCluster(
        nodes=env["SCALESTUDY_PBS_NODES"].split(","),
        head=env["SCALESTUDY_PBS_HEAD"],
        user=env["SCALESTUDY_PBS_USER"],
        ncpus=int(env["SCALESTUDY_PBS_NCPUS"]),
        env=env,
        state_dir=Path(env["SCALESTUDY_PBS_DIR"]),
    )
    try:
        yield cluster
    finally:
        keep = os.environ.get("SCALESTUDY_KEEP_PBS") == "1"
        if not keep:
            _DIRS.remove()
        leave(STATE_DIR, _testbed, keep=keep)


@pytest.fixture
def pbs_tmp_path(pbs_cluster: PBSCluster, request: pytest.FixtureRequest) -> Path:
    """Like tmp_path, but owned by pbsuser and reachable by the jobs."""
    return pbs_cluster.user_dir(request.node.name)
