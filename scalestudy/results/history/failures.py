"""A system's failure rate from the results store: the attempts that ended by a node
failure, a timeout, a broken communication (NCCL, gloo, MPI) or a scheduler/launcher
that could not start them, per node-hour of every attempt on the system, with Garwood's
90 % interval; or the rate a study's spec gives where the store holds too few failures.
Pure: the store's rows in (Store.rows), rates out (docs/goodput.md)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from scalestudy.core.states import Failure
from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.goodput import LEVEL, poisson_interval
from scalestudy.results.history.rows import AttemptRow
from scalestudy.results.history.schema import OWN
from scalestudy.results.history.store import as_utc

#: The failure classes that are the system's, not the program's (core.states.Failure):
#: the ones that interrupt a healthy training job.
COUNTED: tuple[Failure, ...] = (Failure.NODE_FAILURE, Failure.WALLTIME, Failure.COMM,
                                Failure.SCHEDULER)
#: The store's rate is used from this many counted failures on; with fewer, a rate the
#: spec gives wins.
ENOUGH = 3


@dataclass(frozen=True)
class FailureRate:
    """Failures per node-hour on one system, with its interval and what it rests on."""

    system: str
    per_node_hour: float
    low: float
    high: float
    failures: int
    node_hours: float
    attempts: int
    source: str  # "store" or "spec"
    level: float = LEVEL
    by_cause: dict[str, int] = field(default_factory=dict)
    unclassified: int = 0  # failed attempts stored without their class (earlier release)
    note: str = ""

    @property
    def mtbf_node_hours(self) -> float:
        """The mean node-hours between failures (infinite where none was seen)."""
        return math.inf if self.per_node_hour <= 0 else 1 / self.per_node_hour

    def as_dict(self) -> dict[str, object]:
        """For `--json`."""
        return {"system": self.system, "per_node_hour": self.per_node_hour,
                "low": self.low, "high": self.high, "level": self.level,
                "failures": self.failures, "node_hours": self.node_hours,
                "attempts": self.attempts, "source": self.source,
                "by_cause": dict(self.by_cause), "unclassified": self.unclassified,
                "note": self.note}

    def line(self) -> str:
        """One line: the rate, its interval, what it rests on."""
        if self.source == "spec":
            return (f"{self.system}: {self.per_node_hour:.3g} failures per node-hour, "
                    f"given in the spec ({self.note})")
        causes = ", ".join(f"{k} {v}" for k, v in sorted(self.by_cause.items()))
        return (f"{self.system}: {self.per_node_hour:.3g} failures per node-hour "
                f"[{self.low:.3g}–{self.high:.3g}, {self.level:.0%}] from {self.failures} "
                f"failure(s) in {self.node_hours:,.4g} node-hours of {self.attempts} "
                f"attempt(s)" + (f" ({causes})" if causes else "")
                + (f"; {self.note}" if self.note else ""))


def elapsed_hours(row: AttemptRow) -> float | None:
    """An attempt's hours from start to end (the run directory's times), else the elapsed
    time its status recorded; None when neither is known."""
    started, ended = row.get(col.STARTED), row.get(col.ENDED)
    if started and ended:
        seconds = (as_utc(ended) - as_utc(started)).total_seconds()
        if seconds >= 0:
            return seconds / 3600
    placement = (row.get(col.PROVENANCE) or {}).get("placement") or {}
    value = placement.get("elapsed_s") if isinstance(placement, dict) else None
    return float(value) / 3600 if isinstance(value, (int, float)) and value >= 0 else None


def failure_of(row: AttemptRow) -> str | None:
    """A failed attempt's class as stored, None when it was stored without one."""
    placement = (row.get(col.PROVENANCE) or {}).get("placement") or {}
    found = placement.get("failure") if isinstance(placement, dict) else None
    return str(found) if found else None


def failure_rates(rows: Iterable[AttemptRow], level: float = LEVEL
                  ) -> list[FailureRate]:
    """The failure rate of each system among the store's rows (scalestudy's own runs,
    not imports), by name."""
    by_system: dict[str, list[AttemptRow]] = {}
    for r in rows:
        if (r.get(col.SOURCE) or OWN) == OWN and r.get(col.SYSTEM):
            by_system.setdefault(str(r[col.SYSTEM]), []).append(r)
    return [_rate(name, part, level) for name, part in sorted(by_system.items())]


def _rate(system: str, rows: list[AttemptRow], level: float) -> FailureRate:
    counted = {str(f) for f in COUNTED}
    causes: Counter[str] = Counter()
    node_hours, attempts, unclassified, untimed = 0.0, 0, 0, 0
    for r in rows:
        hours, nodes = elapsed_hours(r), r.get(col.NODES)
        if hours is None or not isinstance(nodes, int):
            untimed += 1
            continue
        attempts += 1
        node_hours += nodes * hours
        if r.get("state") != "failed":
            continue
        cause = failure_of(r)
        if cause is None:
            unclassified += 1
        elif cause in counted:
            causes[cause] += 1
    failures = sum(causes.values())
    low, high = poisson_interval(failures, level)
    notes = []
    if unclassified:
        notes.append(f"{unclassified} failed attempt(s) stored without their class by an "
                     "earlier release: `scalestudy history ingest` their results again to "
                     "count them")
    if untimed:
        notes.append(f"{untimed} attempt(s) without a start and end time left out")
    if node_hours <= 0:
        return FailureRate(system, math.nan, math.nan, math.nan, failures, 0.0, attempts,
                           "store", level, dict(causes), unclassified,
                           "; ".join(["no node-hours measured", *notes]))
    return FailureRate(system, failures / node_hours, low / node_hours, high / node_hours,
                       failures, node_hours, attempts, "store", level, dict(causes),
                       unclassified, "; ".join(notes))


def chosen_rate(rows: Iterable[AttemptRow], system: str,
                spec_per_node_hour: float | None = None, *, enough: int = ENOUGH,
                level: float = LEVEL) -> FailureRate | None:
    """The rate to use for `system`: the store's, unless it rests on fewer than `enough`
    failures and the spec gives one (then the spec's, saying so); None when neither
    knows (no node-hours on the system and no spec value)."""
    found = next((r for r in failure_rates(rows, level) if r.system == system), None)
    usable = found is not None and math.isfinite(found.per_node_hour)
    if spec_per_node_hour is not None and (not usable or found is None
                                           or found.failures < enough):
        held = ("the store holds none of its runs" if found is None else
                f"the store holds {found.failures} failure(s) in "
                f"{found.node_hours:,.4g} node-hours, fewer than {enough}")
        return FailureRate(system, spec_per_node_hour, spec_per_node_hour,
                           spec_per_node_hour, 0, 0.0, 0, "spec", level,
                           note=f"{held}; no interval")
    return found if usable else None
