"""The step journal of a packed allocation (allocations/<name>/steps.jsonl): its lines,
written by whichever engine runs the steps and read by the submitting side.

The standard library alone: the engines run it inside the allocation.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from scalestudy.execute.journal import append_line

SCHEMA = "scalestudy.steps/1"
#: Seconds between two looks at the steps.
POLL_S = 0.5


def now() -> str:
    """UTC time, ISO 8601, seconds."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def append(path: Path, entry: dict[str, Any]) -> None:
    """One step-journal line, durable before returning."""
    append_line(path, {"schema": SCHEMA, **entry})


def read_events(path: Path) -> list[dict[str, Any]]:
    """Every readable line of a steps journal, oldest first."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get("event"), str):
            out.append(data)
    return out


def hosts_of(nodefile: list[str]) -> list[str]:
    """The allocation's hosts, each once, in the node file's order."""
    return list(dict.fromkeys(line.split()[0] for line in nodefile if line.strip()))
