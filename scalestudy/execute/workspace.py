"""A study's workspace on disk: file names, the one atomic writer, tails of logs and
records, the study lock, and the attempts kept when a run is run again.

The layout is documented in docs/results-layout.md. Every write goes through
`write_atomic` (temporary file, fsync, rename): a crash never leaves half a file.
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

from scalestudy.core.errors import ScalestudyError

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


def write_atomic(path: Path, data: str | bytes, mode: int = 0o644) -> None:
    """Write a file so that readers see the old or the new content, never a part: a
    temporary file in the same directory, fsynced, then renamed over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Text through `write_atomic`."""
    write_atomic(path, text, mode)


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


#: File descriptors of the study locks this process holds. Scheduler commands inherit
#: them (scalestudy.submit): an sbatch left running by a `run` killed with SIGKILL keeps
#: the study locked until it has ended, so no second `run` can submit meanwhile.
HELD_LOCKS: set[int] = set()


@contextlib.contextmanager
def study_lock(directory: Path) -> Iterator[None]:
    """Hold results/<study>/.lock while running or submitting: a second `run` of the same
    study refuses instead of running or submitting the same runs twice."""
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


def extract_throughput(log: Path, pattern: str) -> float | None:
    """The last match of a `command` workload's pattern in its stdout (tail only)."""
    regex = re.compile(pattern)
    text = tail_text(log, lines=100000, max_bytes=4 << 20)
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
    write_text_atomic(run_dir / METRICS, json.dumps(record, sort_keys=True) + "\n")
    return None


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
