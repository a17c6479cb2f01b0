"""The journal of an adaptive study (`results/<study>/adaptive.jsonl`): every decision of
`run --adaptive`, append-only, one JSON line each, fsynced, so that a killed run resumes
where it stopped and the report can say what was not measured, and why.

Lines (each with `schema`, `kind` and `at`): `round` {round, runs, points, noise,
noise_source, objective, notes} before a round's runs start (its runs: one repeat of
each point); `drop` {round, alternative, evidence} (an alternative), or with `nodes` and
`repeats` a point whose repeats the halving within a rung stopped; `skip` {round,
alternative, nodes, evidence}; `stop` {round, why, tally} when no point is left open (or
the budget ends it). A torn last line (a crash mid-write) is ignored. Lines of earlier
releases (no objective, notes, tally; a round ran every repeat of its points) load.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from scalestudy.core.errors import ScalestudyError
from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.adaptive import Decision, Point

SCHEMA = "scalestudy.adaptive/1"
FILE = "adaptive.jsonl"


@dataclass
class Journal:
    """What the journal holds: the rounds (each a list of run ids), what was dropped and
    skipped with the evidence, and the last stop's reason (None: not stopped, or a round
    came after it)."""

    rounds: list[dict[str, Any]] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)
    skipped: dict[tuple[str, int], str] = field(default_factory=dict)
    halved: dict[tuple[str, int], str] = field(default_factory=dict)
    stopped: str | None = None

    @property
    def started(self) -> bool:
        return bool(self.rounds)

    def runs(self) -> list[str]:
        """Every run id a round started, in order."""
        return [r for entry in self.rounds for r in entry["runs"]]


def read(directory: Path) -> Journal:
    """The journal of the study in `directory` (an empty one where there is none)."""
    path = directory / FILE
    journal = Journal()
    if not path.exists():
        return journal
    lines = path.read_text().splitlines()
    for number, line in enumerate(lines, 1):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                break  # torn by a crash mid-write
            raise ScalestudyError(f"{path}:{number}: not a JSON line; the adaptive "
                                  "journal is written by `run --adaptive` only: restore it, "
                                  "or remove it to start the adaptive study afresh") from None
        if not str(entry.get("schema", "")).startswith("scalestudy.adaptive/"):
            raise ScalestudyError(f"{path}:{number}: not an adaptive journal line "
                                  f"(schema {entry.get('schema')!r})")
        kind = entry.get("kind")
        if kind == "round":
            journal.rounds.append(entry)
            journal.stopped = None
        elif kind == "drop" and entry.get(col.NODES) is not None:
            journal.halved[(entry["alternative"], int(entry[col.NODES]))] = entry["evidence"]
        elif kind == "drop":
            journal.dropped[entry["alternative"]] = entry["evidence"]
        elif kind == "skip":
            journal.skipped[(entry["alternative"], int(entry[col.NODES]))] = entry["evidence"]
        elif kind == "stop":
            journal.stopped = entry["why"]
    return journal


def record(directory: Path, number: int, decision: Decision,
           tally: Mapping[str, Any] | None = None) -> None:
    """Journal a decision: its drops and skips, then the round it starts or its stop
    (with `tally`, what the study measured by then)."""
    at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    lines: list[dict[str, Any]] = [
        {"kind": "drop", "round": number, "alternative": v.alternative,
         "evidence": v.evidence} for v in decision.dropped]
    lines += [{"kind": "drop", "round": number, "alternative": v.alternative,
               "nodes": v.nodes, "repeats": v.repeats, "evidence": v.evidence}
              for v in decision.halved]
    lines += [{"kind": "skip", "round": number, "alternative": v.alternative,
               "nodes": v.nodes, "evidence": v.evidence} for v in decision.skipped]
    told = {"noise": decision.noise, "noise_source": decision.noise_source,
            **({"objective": decision.objective} if decision.objective else {}),
            **({"notes": list(decision.notes)} if decision.notes else {})}
    if decision.points:
        lines.append({"kind": "round", "round": number, "runs": list(decision.runs),
                      "points": [{"alternative": p.alternative, "nodes": p.nodes}
                                 for p in decision.points], **told})
    else:
        lines.append({"kind": "stop", "round": number, "why": decision.why, **told,
                      **({"tally": dict(tally)} if tally else {})})
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / FILE, "a") as out:
        for line in lines:
            out.write(json.dumps({"schema": SCHEMA, "at": at, **line}) + "\n")
        out.flush()
        os.fsync(out.fileno())


def tally(points: Sequence[Point], measured: Mapping[tuple[str, int], Sequence[float]],
          ended: Collection[str]) -> dict[str, Any]:
    """How many points the study measured fully (every repeat ended), partly (stopped
    after some repeats) and not at all, and the node-hours its ended runs could use
    against the full grid's (nodes x walltime)."""
    runs = {p.key: sum(1 for r in p.runs if r in ended) for p in points}
    full = sum(1 for p in points if runs[p.key] >= len(p.runs))
    none = sum(1 for p in points if not runs[p.key] and not measured.get(p.key))
    spent = sum(p.node_hours / len(p.runs) * runs[p.key] for p in points)
    grid = sum(p.node_hours for p in points)
    return {"points": len(points), "measured_fully": full,
            "measured_partly": len(points) - full - none, "not_measured": none,
            "node_hours": round(spent, 3), "node_hours_grid": round(grid, 3),
            "share": round(spent / grid, 4) if grid else 0.0}


def not_measured(points: Sequence[Point], journal: Journal,
                 measured: Mapping[tuple[str, int], Sequence[float]]) -> list[dict[str, Any]]:
    """Each point of the grid an adaptive study did not measure, with why: its
    alternative was dropped, it was left out, or the study stopped first; and each point
    it measured partly, halved within its rung (the repeats it did not run)."""
    out = []
    started = set(journal.runs())
    for p in points:
        done = len(measured.get(p.key) or ())
        if done and p.key in journal.halved and done < len(p.runs):
            left = len(p.runs) - done
            out.append({"alternative": p.alternative, "nodes": p.nodes, "runs": left,
                        "node_hours": p.node_hours * left / len(p.runs),
                        "why": f"measured partly ({done} of {len(p.runs)} repeats), then "
                               f"halved within its rung: {journal.halved[p.key]}"})
        if done:
            continue
        if p.key in journal.skipped:
            why = journal.skipped[p.key]
        elif p.alternative in journal.dropped:
            why = "its alternative was dropped: " + journal.dropped[p.alternative]
        elif journal.stopped is not None:
            why = "not reached: the study stopped first (" + journal.stopped + ")"
        elif started.intersection(p.runs):
            why = "its runs did not complete (see `scalestudy status`)"
        else:
            why = "not reached yet: the adaptive study has not finished"
        out.append({"alternative": p.alternative, "nodes": p.nodes, "runs": len(p.runs),
                    "node_hours": p.node_hours, "why": why})
    return out
