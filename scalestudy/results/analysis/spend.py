"""What a packed study itself used: the node-hours its allocations held (their whole
nodes from the step runner's start to its last event, idle ones included), the
node-hours its steps were busy, and each allocation's queue wait (submitted to started),
from the journal (jobs.jsonl) and the allocations' step journals (steps.jsonl)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from scalestudy.execute.journal import Journal
from scalestudy.execute.packing.steplog import Event, StepEvent, read_events
from scalestudy.results.analysis import columns as col


@dataclass(frozen=True)
class Held:
    """One allocation as it ran."""

    name: str
    nodes: int
    seconds: float  # the runner's start to its last event
    busy_node_s: float  # its steps' nodes x their time
    wait_s: float | None  # submitted to the runner's start
    steps: int  # steps it started
    finished: bool  # the runner saw every step end
    run_ids: tuple[str, ...] = ()  # the runs it started


@dataclass(frozen=True)
class Spend:
    """A packed study's allocations, and what they held against what they used."""

    allocations: tuple[Held, ...]
    #: Where the results store has them: one-job-per-run attempts on this system, their
    #: median queue wait (s) and how many there are (what packing saves per run).
    per_run_wait: tuple[float, int] | None = None

    @property
    def held_node_h(self) -> float:
        """Node-hours the allocations held."""
        return sum(a.nodes * a.seconds for a in self.allocations) / 3600

    @property
    def busy_node_h(self) -> float:
        """Node-hours the steps ran on."""
        return sum(a.busy_node_s for a in self.allocations) / 3600

    @property
    def idle_node_h(self) -> float:
        """Node-hours held with no step on them."""
        return max(0.0, self.held_node_h - self.busy_node_h)

    def sentences(self) -> list[str]:
        """The report's words."""
        held, idle = self.held_node_h, self.idle_node_h
        share = f" ({idle / held:.0%} of them)" if held else ""
        waits = [a.wait_s for a in self.allocations if a.wait_s is not None]
        cut = [a.name for a in self.allocations if not a.finished]
        out = [f"The runs ran packed, as steps of {len(self.allocations)} allocation(s): "
               f"{held:.3g} node-hours held, counted whole (every node of an allocation for "
               f"as long as it ran), of which {self.busy_node_h:.3g} ran a step and "
               f"{idle:.3g} stood idle{share} while smaller runs held part of an "
               "allocation or a larger one waited for its nodes."]
        if waits:
            out.append(f"Queue waits: {len(waits)} in all, one per allocation instead of "
                       f"one per run ({', '.join(f'{w:.0f} s' for w in waits)}).")
        if waits and self.per_run_wait is not None:
            median, count = self.per_run_wait
            runs = len({r for a in self.allocations for r in a.run_ids})
            out.append(f"One job per run on this system waited a median of {median:.0f} s "
                       f"in the queue ({count} such attempts in the results store): "
                       f"{runs} runs, one wait each, against these {len(waits)} waits of "
                       f"{sum(waits):.0f} s in all.")
        if cut:
            out.append(f"Allocation(s) {', '.join(cut)} ended before every step had: "
                       "their time is counted to their last recorded event.")
        return out

    def to_json(self) -> dict[str, object]:
        """summary.json's `spend`."""
        return {"allocations": [{**a.__dict__, "run_ids": list(a.run_ids)}
                                for a in self.allocations],
                **({"per_run_wait_median_s": round(self.per_run_wait[0], 1),
                    "per_run_wait_attempts": self.per_run_wait[1]}
                   if self.per_run_wait else {}),
                "node_hours_held": round(self.held_node_h, 4),
                "node_hours_busy": round(self.busy_node_h, 4),
                "node_hours_idle": round(self.idle_node_h, 4)}


def _at(text: object) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text))
    except ValueError:
        return None


def _events(path: Path) -> list[tuple[StepEvent, datetime]]:
    """A step journal's events that say when they happened, with that moment."""
    return [(e, at) for e in read_events(path) if (at := _at(e.at)) is not None]


def allocation_start(study_dir: Path, name: str) -> datetime | None:
    """When allocation `name`'s step runner first started (its queue wait's end)."""
    for event, at in _events(study_dir / "allocations" / name / "steps.jsonl"):
        if event.event is Event.ALLOCATION:
            return at
    return None


def spend_of(study_dir: Path) -> Spend | None:
    """The packed study's spend, or None when none of its runs ran packed."""
    root = study_dir / "allocations"
    if not root.is_dir():
        return None
    submitted: dict[str, datetime] = {}
    for entry in Journal(study_dir / "jobs.jsonl").entries():
        name, at = entry.allocation, _at(entry.submitted_at)
        if name and at and (name not in submitted or at < submitted[name]):
            submitted[name] = at
    held = []
    for directory in sorted(root.iterdir(), key=lambda p: (len(p.name), p.name)):
        found = _held(directory, submitted.get(directory.name))
        if found is not None:
            held.append(found)
    return Spend(tuple(held)) if held else None


def _held(directory: Path, submitted: datetime | None) -> Held | None:
    """One allocation from its step journal (None: its runner never started)."""
    try:
        spec = json.loads((directory / "allocation.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    moments = _events(directory / "steps.jsonl")
    events = [e for e, _ in moments]
    begin = next((at for e, at in moments if e.event is Event.ALLOCATION), None)
    if begin is None:
        return None
    nodes_of = {s[col.RUN_ID]: int(s[col.NODES]) for s in spec.get("steps", [])}
    end = max(at for _, at in moments)
    busy, running = 0.0, {}
    for e, at in moments:
        run_id = e.run_id or ""
        if e.event is Event.STARTED:
            running[run_id] = at
        elif e.event is Event.ENDED and run_id in running:
            busy += nodes_of.get(run_id, 1) * (at - running.pop(run_id)).total_seconds()
        elif e.event is Event.ALLOCATION:  # a requeued runner: what ran before it ended then
            running.clear()
    busy += sum(nodes_of.get(r, 1) * (end - t).total_seconds() for r, t in running.items())
    return Held(directory.name, int(spec.get(col.NODES) or 0), (end - begin).total_seconds(),
                busy, None if submitted is None else (begin - submitted).total_seconds(),
                sum(1 for e in events if e.event is Event.STARTED),
                any(e.event is Event.DONE for e in events),
                tuple(dict.fromkeys(str(e.run_id) for e in events
                                    if e.event is Event.STARTED)))
