"""A real Slurm cluster on localhost for tests: `scripts/slurm-testbed` as a pytest fixture.

`slurm_cluster` (session scope) starts the testbed (munge, MariaDB + slurmdbd, slurmctld,
4 virtual nodes n1..n4 with 2 CPUs each), puts its exported variables (SLURM_CONF,
OMPI_ALLOW_RUN_AS_ROOT, ...) into `os.environ` for the session, and stops it at the end
unless SCALESTUDY_KEEP_SLURM=1, it was started by hand before the session, or another
test session (an xdist worker, a second pytest) still uses it. Where Slurm is not
installed it skips: `scripts/slurm-testbed install` installs it.

    def test_something(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
        job_id = slurm_cluster.sbatch("-N2", "--wrap", "srun hostname", cwd=tmp_path)
        assert wait_for_job(job_id, timeout=60) == "COMPLETED"
"""

from __future__ import annotations

import contextlib
import os
import random
import shlex
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.testbed_sessions import join, leave, parse_exports, script_runner, unavailable

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "slurm-testbed"
STATE_DIR = Path(os.environ.get("SCALESTUDY_SLURM_DIR") or "/tmp/scalestudy-slurm")

#: A site profile of the testbed, for a spec's `system: profile.yaml`.
TESTBED_PROFILE = """name: testbed
description: the localhost Slurm testbed (4 virtual nodes of 2 CPUs)
scheduler: slurm
launcher: srun
max_nodes: 4
cores_per_node: 2
threads_per_rank: 1
launcher_options: {cpu_bind: none}
"""
# States after which a job never runs again (sacct and scontrol spell them the same).
TERMINAL_STATES = frozenset({
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL",
    "OUT_OF_MEMORY", "PREEMPTED", "REVOKED", "SPECIAL_EXIT", "TIMEOUT",
})
# After scontrol sees a job end, slurmctld still has to tell slurmdbd: wait this long
# for sacct to agree, so that callers can read the job's record with sacct right away.
SACCT_GRACE_S = 10.0


@dataclass(frozen=True)
class SlurmCluster:
    """A running testbed: what `slurm_cluster` yields."""

    conf: Path  # its slurm.conf (SLURM_CONF)
    nodes: list[str]  # node names, ["n1", "n2", "n3", "n4"]
    env: dict[str, str]  # the variables `slurm-testbed start` exports
    state_dir: Path  # logs, spool directories, database
    # True where the nodes could not get their own hostnames (no namespaces): then all
    # nodes report the machine's hostname, OMPI_MCA_btl=self,tcp is exported and torch
    # rendezvous must use MASTER_ADDR=127.0.0.1.
    shared_hostname: bool

    @property
    def master_addr(self) -> str:
        """MASTER_ADDR for a job whose first node is n1, as seen from inside the job."""
        return "127.0.0.1" if self.shared_hostname else self.nodes[0]

    def sbatch(self, *args: str, cwd: Path | None = None) -> str:
        """`sbatch --parsable ARGS` from cwd; the job id."""
        proc = subprocess.run(
            ["sbatch", "--parsable", *args], cwd=cwd, env={**os.environ, **self.env},
            capture_output=True, text=True, timeout=30,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"sbatch {shlex.join(args)} failed: {proc.stderr.strip()}")
        return proc.stdout.strip().split(";")[0]


def slurm_installed() -> bool:
    """sbatch and slurmctld are on this machine (slurmctld lives in /usr/sbin)."""
    return shutil.which("sbatch") is not None and (
        shutil.which("slurmctld") is not None or Path("/usr/sbin/slurmctld").exists()
    )



def free_port() -> int:
    """A free TCP port for MASTER_PORT, below the kernel's ephemeral range.

    A port from bind(0) is an ephemeral one: between choosing it and the job binding it,
    srun or slurmstepd may be handed the same port for their own sockets.
    """
    low = 32768
    with contextlib.suppress(OSError, ValueError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    for _ in range(100):
        port = rng.randrange(20000, max(min(low, 30000), 20001))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(*cmd: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def sacct_state(job_id: str | int) -> str | None:
    """The job's state in accounting ("COMPLETED", "CANCELLED", ...), None if not there."""
    proc = _run("sacct", "-j", str(job_id), "-X", "-n", "-P", "-o", "State")
    words = proc.stdout.split()  # "CANCELLED by 0" -> "CANCELLED"
    return words[0] if proc.returncode == 0 and words else None


def scontrol_state(job_id: str | int) -> str | None:
    """The job's state as slurmctld has it, None if it does not know the job."""
    proc = _run("scontrol", "show", "job", str(job_id))
    for word in proc.stdout.split():
        if word.startswith("JobState="):
            return word.removeprefix("JobState=")
    return None


def wait_for_job(job_id: str | int, timeout: float = 60.0, poll: float = 0.2) -> str:
    """Poll sacct and scontrol until the job is in a terminal state; return that state.

    Returns the state word ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", ...). When
    it returns, sacct already shows the job's final record if accounting works. Raises
    TimeoutError with the last states seen after `timeout` seconds.
    """
    deadline = time.monotonic() + timeout
    ended_at: float | None = None
    acct = ctld = None
    while True:
        acct = sacct_state(job_id)
        if acct in TERMINAL_STATES:
            return acct
        ctld = scontrol_state(job_id)
        now = time.monotonic()
        if ctld in TERMINAL_STATES:
            ended_at = ended_at or now
            # Accounting that does not know the job at all will not catch up.
            if acct is None or now - ended_at > SACCT_GRACE_S:
                return ctld
        if now > deadline:
            raise TimeoutError(
                f"job {job_id} not finished after {timeout:.0f} s (sacct: {acct}, scontrol: {ctld})"
            )
        time.sleep(poll)


_testbed = script_runner(SCRIPT, timeout=300)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A running Slurm testbed for the whole session; its env is in os.environ."""
    if not slurm_installed():
        unavailable("Slurm testbed not installed: run scripts/slurm-testbed install",
                    "SCALESTUDY_REQUIRE_SLURM")
    if os.geteuid() != 0:
        pytest.skip("the Slurm testbed runs its daemons as root")
    started = join(STATE_DIR, _testbed)
    if started.returncode != 0:
        pytest.fail(f"scripts/slurm-testbed start failed:\n{started.stderr}", pytrace=False)
    env = parse_exports(started.stdout)
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    cluster = SlurmCluster(
        conf=Path(env["SLURM_CONF"]),
        nodes=env["SCALESTUDY_SLURM_NODES"].split(","),
        env=env,
        state_dir=Path(env["SCALESTUDY_SLURM_DIR"]),
        shared_hostname=env.get("SCALESTUDY_SLURM_SHARED_HOSTNAME") == "1",
    )
    try:
        yield cluster
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        leave(STATE_DIR, _testbed, keep=os.environ.get("SCALESTUDY_KEEP_SLURM") == "1")
