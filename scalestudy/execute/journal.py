"""The study's journal of submitted jobs (`results/<study>/jobs.jsonl`): append-only,
one JSON line per event, each fsynced before the next submission starts.

Lines, each a typed entry: an `Intent` `{run_id, intent: true, attempt, at}` written
just before a submit command; a `Job` `{run_id, job_id, attempt, scheduler, via,
submitted_at[, adopted][, allocation]}` once the command answered (or a restart found the job by
name); a `Resolved` `{run_id, resolved: true, at}` when a restart found no job for an
intent. Each line carries `schema` (`scalestudy.journal/2`); lines written before it
(version 1, no `schema`) read the same. A torn last line (a crash mid-write) is
ignored. See docs/reliability.md.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

SCHEMA = "scalestudy.journal/2"


def now() -> str:
    """UTC time, ISO 8601, seconds."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Intent:
    """A submit command is about to run for this run (its attempt)."""

    run_id: str
    attempt: int | None = None
    at: str | None = None
    allocation: str | None = None  # packed: the allocation it is a step of

    def to_json(self) -> dict[str, object]:
        """The line's JSON object (`allocation` only for a packed run)."""
        out = {"schema": SCHEMA, "run_id": self.run_id, "intent": True,
               "attempt": self.attempt, "at": self.at}
        return {**out, "allocation": self.allocation} if self.allocation else out


@dataclass(frozen=True)
class Job:
    """A job the scheduler queued for this run (or that a restart adopted by name)."""

    run_id: str
    job_id: str
    attempt: int | None = None
    scheduler: str | None = None
    via: str | None = None
    submitted_at: str | None = None
    adopted: bool = False
    #: packed: the allocation (results/<study>/allocations/<name>) the run is a step of;
    #: `job_id` is then the allocation's job
    allocation: str | None = None

    def to_json(self) -> dict[str, object]:
        """The line's JSON object (`adopted` and `allocation` only where set)."""
        out: dict[str, Any] = {"schema": SCHEMA, "run_id": self.run_id,
                               "job_id": self.job_id, "attempt": self.attempt,
                               "scheduler": self.scheduler, "via": self.via,
                               "submitted_at": self.submitted_at}
        if self.allocation:
            out["allocation"] = self.allocation
        return {**out, "adopted": True} if self.adopted else out


@dataclass(frozen=True)
class Resolved:
    """A restart found no job for this run's open intent: it may be submitted again."""

    run_id: str
    at: str | None = None

    def to_json(self) -> dict[str, object]:
        """The line's JSON object."""
        return {"schema": SCHEMA, "run_id": self.run_id, "resolved": True, "at": self.at}


Entry = Intent | Job | Resolved


def append_line(path: Path, data: dict[str, Any]) -> None:
    """Append one JSON line to an append-only journal and make it durable before
    returning; after a torn last line (a crash mid-write) it starts a line of its own."""
    line = json.dumps(data, sort_keys=True) + "\n"
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = "\n" + line
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse(data: Any) -> Entry | None:
    """The entry a journal line holds (either version), or None for a line that is none."""
    if not isinstance(data, dict) or not isinstance(data.get("run_id"), str):
        return None
    run_id = data["run_id"]
    if data.get("job_id") is not None:
        return Job(run_id, str(data["job_id"]), _int(data.get("attempt")),
                   _text(data.get("scheduler")), _text(data.get("via")),
                   _text(data.get("submitted_at")), data.get("adopted") is True,
                   _text(data.get("allocation")))
    if data.get("intent"):
        return Intent(run_id, _int(data.get("attempt")), _text(data.get("at")),
                      _text(data.get("allocation")))
    if data.get("resolved"):
        return Resolved(run_id, _text(data.get("at")))
    return None


class Journal:
    """Append-only record of the jobs a study submitted: its one writer and reader."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def record(self, entry: Entry) -> None:
        """Append one line and make it durable before returning. After a torn last line
        (a crash mid-write) the entry starts a line of its own, not glued to the torn
        one (which would make both unreadable)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        append_line(self.path, entry.to_json())

    def lines(self) -> list[Entry]:
        """Every readable entry, oldest first."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        out = []
        for line in text.splitlines():
            try:
                entry = parse(json.loads(line))
            except ValueError:
                continue
            if entry is not None:
                out.append(entry)
        return out

    def entries(self) -> list[Job]:
        """The jobs (a job id came back, or was adopted), oldest first."""
        return [e for e in self.lines() if isinstance(e, Job)]

    def latest(self) -> dict[str, Job]:
        """run id -> its most recent job."""
        return {e.run_id: e for e in self.entries()}

    def jobs_per_run(self) -> dict[str, int]:
        """run id -> how many jobs it has had (its attempts on the scheduler)."""
        counts: dict[str, int] = {}
        for entry in self.entries():
            counts[entry.run_id] = counts.get(entry.run_id, 0) + 1
        return counts

    def unresolved_intents(self) -> dict[str, Intent]:
        """run id -> an intent to submit that no job id followed: the submitting process
        died while the command ran, so the job may exist."""
        open_intents: dict[str, Intent] = {}
        for entry in self.lines():
            if isinstance(entry, Intent):
                open_intents[entry.run_id] = entry
            else:
                open_intents.pop(entry.run_id, None)
        return open_intents
