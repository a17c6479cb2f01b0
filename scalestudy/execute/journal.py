"""The study's journal of submitted jobs (`results/<study>/jobs.jsonl`): append-only,
one JSON line per event, each fsynced before the next submission starts.

Lines: an intent `{run_id, intent: true, attempt, at}` written just before a submit
command; a job `{run_id, job_id, attempt, scheduler, via, submitted_at[, adopted]}`
once the command answered (or a restart found the job by name); a resolution
`{run_id, resolved: true, at}` when a restart found no job for an intent. A torn last
line (a crash mid-write) is ignored. See docs/reliability.md.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


def now() -> str:
    """UTC time, ISO 8601, seconds."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Journal:
    """Append-only record of the jobs a study submitted."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def record(self, entry: dict[str, Any]) -> None:
        """Append one line and make it durable before returning."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(entry, sort_keys=True) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def lines(self) -> list[dict[str, Any]]:
        """Every readable line with a run id, oldest first."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        out = []
        for line in text.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and isinstance(entry.get("run_id"), str):
                out.append(entry)
        return out

    def entries(self) -> list[dict[str, Any]]:
        """The job lines (a job id came back, or was adopted), oldest first."""
        return [e for e in self.lines() if "job_id" in e]

    def latest(self) -> dict[str, dict[str, Any]]:
        """run id -> its most recent job."""
        return {e["run_id"]: e for e in self.entries()}

    def jobs_per_run(self) -> dict[str, int]:
        """run id -> how many jobs it has had (its attempts on the scheduler)."""
        counts: dict[str, int] = {}
        for entry in self.entries():
            counts[entry["run_id"]] = counts.get(entry["run_id"], 0) + 1
        return counts

    def unresolved_intents(self) -> dict[str, dict[str, Any]]:
        """run id -> an intent to submit that no job id followed: the submitting process
        died while the command ran, so the job may exist."""
        open_intents: dict[str, dict[str, Any]] = {}
        for entry in self.lines():
            if entry.get("intent"):
                open_intents[entry["run_id"]] = entry
            elif "job_id" in entry or entry.get("resolved"):
                open_intents.pop(entry["run_id"], None)
        return open_intents
