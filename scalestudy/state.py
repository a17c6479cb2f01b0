"""A study's files on disk: where each run lives and what its status files say.

The layout is documented in docs/results-layout.md. Writes are atomic (temporary
file + rename), so a crash never leaves half a JSON file behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

METRICS = "metrics.jsonl"
STATUS = "status.json"
RUN_JSON = "run.json"
SCRIPT = "job.sh"
#: How much of the end of metrics.jsonl is read to find its last record.
METRICS_TAIL_BYTES = 64 * 1024
NO_RECORD = "no metrics record in metrics.jsonl"
BAD_THROUGHPUT = "throughput is not a finite positive number"
# What a new attempt moves aside so that earlier attempts' logs are kept.
ATTEMPT_FILES = ("stdout.log", "stderr.log", STATUS, METRICS, "env.txt", "hosts.txt")


def study_dir(results: Path, study_name: str) -> Path:
    """results/<study>; study names are validated, so this never leaves results/."""
    return results / study_name


def run_dir(results: Path, study_name: str, run_id: str) -> Path:
    """results/<study>/runs/<run-id>."""
    return study_dir(results, study_name) / "runs" / run_id


def write_text_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Write a file so that readers see the old or the new content, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    """JSON (sorted keys, indented) written atomically."""
    write_text_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def _read_tail(path: Path, max_bytes: int) -> bytes:
    """The last `max_bytes` of a file, starting at a line boundary (OSError if unreadable)."""
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size <= max_bytes:
            fh.seek(0)
            return fh.read()
        # Read one byte more: if it is a newline, the cut falls on a line boundary.
        fh.seek(size - max_bytes - 1)
        data = fh.read()
    cut = data.find(b"\n")
    return b"" if cut < 0 else data[cut + 1 :]


def read_record(path: Path, max_bytes: int = METRICS_TAIL_BYTES) -> dict[str, Any] | None:
    """The last line of a JSON-lines file that parses as a JSON object, else None.

    Only the last `max_bytes` are read; a missing or unreadable file gives None.
    """
    try:
        data = _read_tail(Path(path), max_bytes)
    except OSError:
        return None
    for raw in reversed(data.split(b"\n")):
        raw = raw.strip()
        if not raw:
            continue
        try:
            obj = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            continue
        if isinstance(obj, dict):
            return obj
    return None


def record_problem(record: Mapping[str, Any] | None) -> str | None:
    """Why a metric record cannot count as a completed run, or None when it can."""
    if record is None:
        return NO_RECORD
    value = record.get("throughput")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return BAD_THROUGHPUT
    if not math.isfinite(value) or value <= 0:
        return BAD_THROUGHPUT
    return None


def tail_text(path: Path, lines: int = 20, max_bytes: int = 16384) -> str:
    """The last `lines` lines of a text file (at most `max_bytes` read); "" if unreadable."""
    if lines <= 0:
        return ""
    try:
        data = _read_tail(Path(path), max_bytes)
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def _read_json_object(path: Path) -> tuple[bool, dict[str, Any] | None]:
    """(exists, object): object is None when the file exists but is not a JSON object."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return False, None
    except (OSError, UnicodeDecodeError):
        return True, None
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return True, None
    return True, obj if isinstance(obj, dict) else None


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def _as_float(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def run_status(run_dir: Path) -> dict[str, Any]:
    """`state`, `reason`, `exit_code`, `elapsed_s` of one run directory, checked against
    its metric record, plus `record` (the last valid metric record or None)."""
    exists, status = _read_json_object(run_dir / "status.json")
    record = read_record(run_dir / "metrics.jsonl")
    out: dict[str, Any] = {"state": "pending", "reason": None, "exit_code": None,
                           "elapsed_s": None, "failure": None, "failure_line": None,
                           "record": record}
    if not exists:
        return out
    if status is None:
        out.update(state="failed", reason="status.json is unreadable")
        return _with_failure(run_dir, out, {})
    state = status.get("state")
    reason = status.get("reason")
    out.update(
        state=state if isinstance(state, str) and state else "failed",
        reason=None if reason is None else str(reason),
        exit_code=_as_int(status.get("exit_code")),
        elapsed_s=_as_float(status.get("elapsed_s")),
    )
    if not (isinstance(state, str) and state):
        out["reason"] = "status.json has no state"
    elif state == "completed":
        problem = record_problem(record)
        if problem is not None:
            out.update(state="failed", reason=problem)
    return _with_failure(run_dir, out, status)


def _with_failure(run_dir: Path, out: dict[str, Any], status: Mapping[str, Any]) -> dict[str, Any]:
    """A failed run's `failure` class and `failure_line`: from status.json, else diagnosed
    now from its exit code, scheduler state and log tails (see scalestudy.diagnose)."""
    if out["state"] != "failed":
        return out
    failure, line = status.get("failure"), status.get("failure_line")
    # A stored class is kept, except `unknown`: a newer classifier may know better.
    if isinstance(failure, str) and failure and failure != "unknown" \
            and status.get("state") == "failed":
        out.update(failure=failure, failure_line=None if line is None else str(line))
        return out
    from scalestudy.diagnose import diagnose

    raw = status.get("scheduler_state")
    found = diagnose(run_dir, out["exit_code"], raw if isinstance(raw, str) else None,
                     out["reason"])
    out.update(failure=found.failure, failure_line=found.line)
    return out


def run_state(directory: Path) -> str:
    """pending (not run), running, completed or failed (see `run_status`)."""
    return str(run_status(directory)["state"])


#: File descriptors of the study locks this process holds. Scheduler commands inherit
#: them (scalestudy.submit): an sbatch left running by a `run` killed with SIGKILL keeps
#: the study locked until it has ended, so no second `run` can submit meanwhile.
HELD_LOCKS: set[int] = set()


@contextlib.contextmanager
def study_lock(directory: Path) -> Iterator[None]:
    """Hold results/<study>/.lock while running or submitting: a second `run` of the same
    study refuses instead of running or submitting the same runs twice."""
    from scalestudy.errors import ScalestudyError

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / ".lock"
    with path.open("a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            pid = holder.removeprefix("pid ")
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                raise ScalestudyError(
                    f"{directory}: a scheduler command started by `scalestudy run` ({holder}, "
                    "which has ended) is still running and holds the study's lock; run again "
                    "in a few seconds, once it has ended") from None
            raise ScalestudyError(
                f"{directory}: another `scalestudy run` ({holder}) is working on this study; "
                "wait for it to finish (or stop it), then run again"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()}\n")
        fh.flush()
        HELD_LOCKS.add(fh.fileno())
        try:
            yield
        finally:
            HELD_LOCKS.discard(fh.fileno())
            fh.truncate(0)
            fcntl.flock(fh, fcntl.LOCK_UN)


def archive_attempt(directory: Path) -> Path | None:
    """Move the previous attempt's logs and status to attempts/<n>/ (nothing is lost)."""
    present = [name for name in ATTEMPT_FILES if (directory / name).exists()]
    if not present:
        return None
    attempts = directory / "attempts"
    attempts.mkdir(exist_ok=True)
    number = 1 + sum(1 for p in attempts.iterdir() if p.is_dir())
    target = attempts / str(number)
    target.mkdir()
    for name in present:
        os.replace(directory / name, target / name)
    return target


def attempt_count(directory: Path) -> int:
    """Attempts a run has had: those kept in attempts/<n>/, plus the current one when it
    left files (a pending run has had none)."""
    attempts = directory / "attempts"
    kept = sum(1 for p in attempts.iterdir() if p.is_dir()) if attempts.is_dir() else 0
    return kept + any((directory / name).exists() for name in ATTEMPT_FILES)


_NOTABLE = re.compile(r"error|exception|traceback|killed|out of memory|timed? ?out", re.I)


def log_tail(run_dir: Path, lines: int = 20) -> str:
    """The last lines of each log, preceded by the last lines that look like errors
    (a launcher's own summary often buries the rank's message)."""
    parts = []
    for name in ("stderr.log", "stdout.log"):
        text = tail_text(run_dir / name, lines=400, max_bytes=65536)
        if not text.strip():
            continue
        all_lines = text.splitlines()
        notable = [ln for ln in all_lines[:-lines] if _NOTABLE.search(ln)][-8:]
        if notable:
            parts.append(f"--- {name} (lines that look like errors) ---\n" + "\n".join(notable))
        parts.append(f"--- {name} (last lines) ---\n" + "\n".join(all_lines[-lines:]))
    return "\n".join(parts)
