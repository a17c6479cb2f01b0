"""The local executor: runs one rendered job script on this host and records how it ended.

This is the only module of the local path that starts processes. A job runs in its
own process group so that a time limit or Ctrl-C stops every rank it started.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from scalestudy import state

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


def extract_throughput(log: Path, pattern: str) -> float | None:
    """The last match of a `command` workload's pattern in its stdout (tail only)."""
    regex = re.compile(pattern)
    text = state.tail_text(log, lines=100000, max_bytes=4 << 20)
    matches = list(regex.finditer(text))
    if not matches:
        return None
    match = matches[-1]
    raw = match.group("throughput") if "throughput" in regex.groupindex else match.group(1)
    try:
        return float(raw)
    except (TypeError, ValueError):
        return None


def record_command_throughput(run_dir: Path, params: dict[str, Any], pattern: str) -> str | None:
    """Write a `command` workload's record from the throughput its pattern finds in
    stdout.log; the reason when there is none (None when written)."""
    value = extract_throughput(run_dir / "stdout.log", pattern)
    if value is None:
        return f"the throughput pattern {pattern!r} matched nothing in stdout.log"
    record = {"schema": "scalestudy.metrics/1", "source": "command", "throughput": value,
              **{k: params[k] for k in ("world_size", "batch_size", "global_batch", "nodes")}}
    state.write_text_atomic(run_dir / state.METRICS, json.dumps(record, sort_keys=True) + "\n")
    return None


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
) -> dict[str, Any]:
    """Run run_dir/job.sh to its end; write and return its status.json.

    `command_regex` is set for a `command` workload: its throughput is extracted from
    stdout.log and written to metrics.jsonl. The previous attempt's files are moved
    to attempts/<n>/ first.
    """
    state.archive_attempt(run_dir)
    started = time.monotonic()
    status: dict[str, Any] = {"state": "running", "started_at": _now(), "pid": os.getpid()}
    state.write_json_atomic(run_dir / state.STATUS, status)
    env = {**os.environ, "SCALESTUDY_MASTER_PORT": str(free_port()), "PYTHONUNBUFFERED": "1"}
    reason: str | None = None
    with (run_dir / "stdout.log").open("wb") as out, (run_dir / "stderr.log").open("wb") as err:
        proc = subprocess.Popen(
            ["bash", str(run_dir / state.SCRIPT)], cwd=run_dir, stdout=out, stderr=err,
            stdin=subprocess.DEVNULL, env=env, start_new_session=True,
        )
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            code = proc.returncode if proc.returncode is not None else -signal.SIGKILL
            reason = f"time limit of {timeout_s:.0f} s (job.walltime) exceeded; stopped"
        except BaseException:
            _stop_group(proc)
            state.write_json_atomic(run_dir / state.STATUS, {
                **status, "state": "failed", "ended_at": _now(),
                "exit_code": proc.returncode, "reason": "interrupted by the user",
            })
            raise
    if code == 0 and command_regex is not None:
        reason = record_command_throughput(run_dir, params, command_regex)
    if reason is None:
        reason = _exit_reason(code) if code != 0 else state.record_problem(
            state.read_record(run_dir / state.METRICS))
    failed = reason is not None
    if failed:
        from scalestudy.diagnose import diagnose

        found = diagnose(run_dir, code, None, reason)
        status.update(failure=found.failure, failure_line=found.line)
    status.update({
        "state": "failed" if failed else "completed",
        "exit_code": code,
        "ended_at": _now(),
        "elapsed_s": round(time.monotonic() - started, 3),
        "reason": reason,
        "log_tail": state.log_tail(run_dir) if failed else None,
    })
    status.pop("pid", None)
    state.write_json_atomic(run_dir / state.STATUS, status)
    return status

