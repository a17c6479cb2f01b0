"""Shared by the Slurm, OpenPBS and Flux fixtures: parsing a testbed's exports, which test
sessions hold a testbed so that the last one out (and only a test-started one) stops it,
skipping (or, in CI, failing) where one is missing, and work directories its user owns.

Every session using a testbed (pytest-xdist workers, two people's pytest runs on one
machine) leaves a file named after its pid in the testbed's `holders` directory; a
testbed started by a test session carries the marker `started-by-tests`, one started by
hand does not and stays up.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

Testbed = Callable[..., "subprocess.CompletedProcess[str]"]
MARKER = "started-by-tests"


def parse_exports(text: str) -> dict[str, str]:
    """The NAME=value pairs of `export NAME=value` lines (shell-quoted values)."""
    env: dict[str, str] = {}
    for line in text.splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            name, value = words[1].split("=", 1)
            env[name] = value
    return env


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (owned by anyone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def holders(state_dir: Path) -> Iterator[Path]:
    """The testbed's holders directory, locked against other test sessions."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with (state_dir / "holders.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        directory = state_dir / "holders"
        directory.mkdir(exist_ok=True)
        yield directory


def join(state_dir: Path, testbed: Testbed) -> subprocess.CompletedProcess[str]:
    """Start the testbed (a no-op when it runs) and record this session as a holder.

    Returns `start`'s result (its stdout holds the exports); the caller fails on a
    non-zero return code, which records nothing.
    """
    with holders(state_dir) as directory:
        was_running = testbed("status").returncode == 0
        started = testbed("start")
        if started.returncode == 0:
            (directory / str(os.getpid())).touch()
            if not was_running:
                (directory / MARKER).touch()
    return started


def leave(state_dir: Path, testbed: Testbed, *, keep: bool) -> None:
    """Drop this session; stop the testbed if it was the last and a test started it.

    `keep` (SCALESTUDY_KEEP_*=1) hands a test-started testbed over to the user: no later
    session stops it.
    """
    with holders(state_dir) as directory:
        (directory / str(os.getpid())).unlink(missing_ok=True)
        others = []
        for holder in directory.iterdir():
            if holder.name.isdigit():
                if pid_alive(int(holder.name)):
                    others.append(holder)
                else:  # a session that died without its teardown
                    holder.unlink(missing_ok=True)
        marker = directory / MARKER
        if keep:
            marker.unlink(missing_ok=True)
        elif not others and marker.exists():
            testbed("stop")
            marker.unlink(missing_ok=True)


def unavailable(message: str, required_by: str) -> None:
    """Skip a test whose testbed is not there, with the reason; fail instead where the
    variable `required_by` is 1 (CI: never skip silently)."""
    if os.environ.get(required_by) == "1":
        pytest.fail(f"{message} ({required_by}=1)", pytrace=False)
    pytest.skip(message)


def script_runner(script: Path, timeout: float) -> Testbed:
    """`script ARGS` (a testbed's own script), its output captured."""
    def run(*args: str, timeout: float = timeout) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(script), *args], capture_output=True, text=True,
                              timeout=timeout)
    return run


class UserDirs:
    """Work directories a testbed's own user owns, below a base of this session that the
    user can reach (pytest's tmp_path, under /tmp/pytest-of-root, mode 700, is not);
    removed at the end of the session."""

    def __init__(self, base_variable: str, prefix: str) -> None:
        self.base_variable, self.prefix = base_variable, prefix
        self.base: Path | None = None

    def make(self, name: str, user: str) -> Path:
        """A new empty directory `user` owns (jobs write their output there)."""
        if self.base is None:
            parent = Path(os.environ.get(self.base_variable) or tempfile.gettempdir())
            self.base = Path(tempfile.mkdtemp(prefix=self.prefix, dir=parent))
            self.base.chmod(0o755)
        path = Path(tempfile.mkdtemp(prefix=f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)[:40]}-",
                                     dir=self.base))
        if os.geteuid() == 0:
            shutil.chown(path, user=user, group=user)
        path.chmod(0o755)
        return path

    def remove(self) -> None:
        if self.base is not None:
            shutil.rmtree(self.base, ignore_errors=True)
