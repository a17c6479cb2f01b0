"""Expected queue waits per job shape from what a system's jobs waited before: the
results store's attempts, each with its placement's queue wait (submitted to started),
one job per run (a packed allocation's steps do not wait alone). Pure: the store's rows
in, a median per node count out, with how many jobs it rests on."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from scalestudy.results.analysis import columns as col

#: Fewer earlier jobs than this at a node count: the estimate says it rests on few.
FEW = 3


@dataclass(frozen=True)
class Wait:
    """The expected wait of one job shape, and where it comes from."""

    nodes: int
    seconds: float | None  # None: not known
    jobs: int  # the earlier jobs it rests on
    source: str  # in words
    start: str | None = None  # the scheduler's expected start (ISO 8601), where it said

    def as_dict(self) -> dict[str, object]:
        """For `plan --json`."""
        return {"nodes": self.nodes, "seconds": self.seconds, "jobs": self.jobs,
                "source": self.source, **({"start": self.start} if self.start else {})}


def from_scheduler(nodes: int, start: str, now: datetime, command: str) -> Wait:
    """The wait the scheduler's own estimate gives (`start`: its local time, as `now`)."""
    seconds = max(0.0, (datetime.fromisoformat(start) - now).total_seconds())
    return Wait(nodes, seconds, 0, f"{command}: the scheduler's plan for a {nodes}-node "
                f"job submitted now", start)


def waits_by_nodes(rows: Iterable[Mapping[str, Any]]) -> dict[int, list[float]]:
    """The queue waits of earlier one-job-per-run attempts, by node count."""
    out: dict[int, list[float]] = {}
    for row in rows:
        placement = (row.get(col.PROVENANCE) or {}).get("placement") or {}
        wait = placement.get(col.QUEUE_WAIT_S) if isinstance(placement, dict) else None
        if placement.get("allocation") or not isinstance(wait, (int, float)) or wait < 0:
            continue
        if isinstance(row.get(col.NODES), int):
            out.setdefault(int(row[col.NODES]), []).append(float(wait))
    return out


def expected(history: Mapping[int, Sequence[float]], nodes: Iterable[int],
             system: str) -> list[Wait]:
    """The median earlier wait of each node count asked, from its own jobs, else from
    the nearest larger node count measured (a larger job waits at least as long, as a
    rule), else not known."""
    out = []
    for n in sorted(set(nodes)):
        own = history.get(n, [])
        if own:
            out.append(Wait(n, statistics.median(own), len(own),
                            f"median of {len(own)} earlier {n}-node job(s) on {system} in "
                            "the results store" + (" (few)" if len(own) < FEW else "")))
            continue
        larger = sorted(k for k in history if k > n)
        if larger:
            k = larger[0]
            out.append(Wait(n, statistics.median(history[k]), len(history[k]),
                            f"no {n}-node jobs on {system} in the results store: the median "
                            f"of {len(history[k])} {k}-node job(s), an upper bound as a rule"))
        else:
            out.append(Wait(n, None, 0, f"no {n}-node (or larger) jobs on {system} in the "
                            "results store yet"))
    return out
