"""The step journal of a packed allocation (allocations/<name>/steps.jsonl): its lines,
written by whichever engine runs the steps and read by the submitting side.

The standard library alone: the engines run it inside the allocation.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path

from scalestudy.core.values import JSONObject
from scalestudy.execute.journal import append_line

SCHEMA = "scalestudy.steps/1"
#: Seconds between two looks at the steps.
POLL_S = 0.5


def now() -> str:
    """UTC time, ISO 8601, seconds."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Event(str, Enum):
    """What a line of the steps journal says happened."""

    ALLOCATION = "allocation"  # a step runner started in the allocation (again: requeued)
    STARTED = "started"  # a step is about to start (or Flux says it started)
    ENDED = "ended"  # a step ended, or will never start (`why`)
    DONE = "done"  # every step has ended

    def __str__(self) -> str:
        return self.value


#: The keys of a journal line that StepEvent's fields hold (the rest go to `extra`).
_KNOWN = frozenset({"event", "at", "run_id", "hosts", "port", "rc", "timed_out", "why",
                    "job_id", "schema"})


@dataclass(frozen=True)
class StepEvent:
    """One line of the steps journal: the event, when, and what it carries."""

    event: Event
    at: str | None = None
    run_id: str | None = None
    hosts: tuple[str, ...] = ()
    port: int | None = None  # started: the step's rendezvous port
    rc: int | None = None  # ended: the step's exit status
    timed_out: bool = False  # ended: stopped at its own time limit
    why: str | None = None  # ended without starting: why
    job_id: str | None = None  # allocation: the allocation's job
    #: Anything else the line holds (an engine's own words: flux_id, flux_result, engine).
    extra: JSONObject = field(default_factory=dict)

    def line(self) -> dict[str, object]:
        """The journal line (fields left at their defaults are not written)."""
        values = {k: v for k, v in asdict(self).items() if k != "extra"}
        written = {k: (list(v) if isinstance(v, tuple) else v) for k, v in values.items()
                   if k == "event" or not (v is None or v is False or v == ())}
        if self.event is Event.ENDED:
            written["timed_out"] = self.timed_out
        return {**written, "event": self.event.value, **self.extra}

    @classmethod
    def read(cls, data: JSONObject) -> StepEvent | None:
        """The event of one journal line; None where the line says no known event."""
        try:
            event = Event(data.get("event"))
        except ValueError:
            return None

        def text(key: str) -> str | None:
            value = data.get(key)
            return value if isinstance(value, str) else None

        def number(key: str) -> int | None:
            value = data.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        hosts = data.get("hosts")
        return cls(event, text("at"), text("run_id"),
                   tuple(str(h) for h in hosts) if isinstance(hosts, list) else (),
                   number("port"), number("rc"), data.get("timed_out") is True, text("why"),
                   None if data.get("job_id") is None else str(data["job_id"]),
                   {k: v for k, v in data.items() if k not in _KNOWN})


def append(path: Path, event: StepEvent) -> None:
    """One step-journal line, durable before returning."""
    append_line(path, {"schema": SCHEMA, **event.line()})


def read_events(path: Path) -> list[StepEvent]:
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
        event = StepEvent.read(data) if isinstance(data, dict) else None
        if event is not None:
            out.append(event)
    return out


def ended_runs(path: Path) -> set[str]:
    """The runs whose steps the journal says ended (a restarted runner skips them)."""
    return {e.run_id for e in read_events(path) if e.event is Event.ENDED and e.run_id}


def hosts_of(nodefile: list[str]) -> list[str]:
    """The allocation's hosts, each once, in the node file's order."""
    return list(dict.fromkeys(line.split()[0] for line in nodefile if line.strip()))
