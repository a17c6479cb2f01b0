"""The local executor: runs one rendered job script on this host and records how it ended.

This is the only module of the local path that starts processes. A job runs in its
own session (process group) so that a time limit or Ctrl-C stops every rank it
started. A run stopped by Ctrl-C is recorded as `interrupted` (not failed): a plain
`scalestudy run` starts it again.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from scalestudy.core.grid import Run
from scalestudy.core.spec import walltime_seconds
from scalestudy.core.states import RunState
from scalestudy.execute import workspace as ws
from scalestudy.execute.diagnose import diagnose
from scalestudy.execute.status import RunStatus, write_status
from scalestudy.site.plan import Plan

GRACE_S = 10.0


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 now (for one run's rendezvous)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the job's process group, then SIGKILL what is left after a grace period."""
    for sig, wait_s in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _exit_reason(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exit code {code}"


def execute(
    run_dir: Path,
    params: dict[str, Any],
    timeout_s: float,
    command_regex: str | None = None,
    campaign: str | None = None,
) -> RunStatus:
    """Run run_dir/job.sh to its end; write and return its status.

    `command_regex` is set for a `command` workload: its throughput is extracted from
    stdout.log and written to metrics.jsonl. The previous attempt's files are moved
    to attempts/<n>/ first.
    """
    ws.archive_attempt(run_dir, campaign)
    started = time.monotonic()
    status = RunStatus(RunState.RUNNING, started_at=_now(), pid=os.getpid())
    write_status(run_dir, status)
    env = {**os.environ, "SCALESTUDY_MASTER_PORT": str(free_port()), "PYTHONUNBUFFERED": "1"}
    reason: str | None = None
    with (run_dir / "stdout.log").open("wb") as out, (run_dir / "stderr.log").open("wb") as err:
        proc = subprocess.Popen(
            ["bash", str(run_dir / ws.SCRIPT)], cwd=run_dir, stdout=out, stderr=err,
            stdin=subprocess.DEVNULL, env=env, start_new_session=True,
        )
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            code = proc.returncode if proc.returncode is not None else -signal.SIGKILL
            reason = f"time limit of {timeout_s:.0f} s (job.walltime) exceeded; stopped"
        except BaseException:  # Ctrl-C (KeyboardInterrupt) or SIGTERM: stop the ranks
            _stop_group(proc)
            write_status(run_dir, replace(
                status, state=RunState.INTERRUPTED, pid=None, ended_at=_now(),
                exit_code=proc.returncode, reason="interrupted by the user"))
            raise
    if code == 0 and command_regex is not None:
        reason = ws.record_command_throughput(run_dir, params, command_regex)
    if reason is None:
        reason = _exit_reason(code) if code != 0 else ws.record_problem(
            ws.read_record(run_dir / ws.METRICS))
    failed = reason is not None
    found = diagnose(run_dir, code, None, reason) if failed else None
    ended = replace(
        status, state=RunState.FAILED if failed else RunState.COMPLETED, pid=None,
        exit_code=code, ended_at=_now(), elapsed_s=round(time.monotonic() - started, 3),
        reason=reason, failure=found.failure if found else None,
        failure_line=found.line if found else None,
        log_tail=ws.log_tail(run_dir) if failed else None)
    write_status(run_dir, ended)
    return ended



Progress = Callable[[Run, RunStatus | None], None]


def execute_runs(plan: Plan, runs: Sequence[Run], progress: Progress | None = None
                 ) -> list[RunStatus]:
    """Execute the runs one after the other (they would share this host's cores);
    `progress(run, None)` before each, `progress(run, status)` after."""
    timeout = walltime_seconds(plan.study.job.walltime)
    regex = plan.study.workload.record_pattern
    statuses = []
    for run in runs:
        if progress:
            progress(run, None)
        status = execute(plan.run_dir(run).resolve(), run.params(), timeout, regex,
                         plan.campaign)
        statuses.append(status)
        if progress:
            progress(run, status)
    return statuses
