"""Slow nodes named from ordinary runs: every run of the bundled workload records each
rank's host and its compute-only step time (`rank_hosts`, `rank_compute_s`), so the
evidence of a node that drags its ranks costs no extra job.

In one run, a host's slowness is its ranks' mean compute time against the median rank
of the run's other hosts (log ratio): one observation per host and run. A system's
noise is the spread of a host's observations around its own mean, pooled over the
hosts seen in several runs (a slow host's offset is not noise), shrunk towards a prior
belief of PRIOR_NOISE worth PRIOR_DOF degrees of freedom: from one or two runs of a
handful of hosts the spread can come out far below the real one. A host is slow when,
pooled over its runs, its mean slowness passes Z standard errors and MIN_SLOWER, over at
least MIN_RUNS runs: several studies' worth of small evidence adds up, and one run, however
slow, is one draw (a neighbour's process, a daemon, the node that runs the job script).
Runs with fewer than 3 hosts say nothing (the median of two is their mean); a run whose
record lacks the per-rank hosts or times (older results, imports, a user's program) is
counted as untestable, never as passed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from scalestudy.core.values import JSON, array, member
from scalestudy.results.analysis import columns as col
from scalestudy.results.history.rows import AttemptRow

if TYPE_CHECKING:
    import pandas as pd

#: Standard errors a host's mean slowness must pass.
Z = 4.0
#: And the least excess that names a host (5 % slower than its runs' median).
MIN_SLOWER = 0.05
#: Hosts a run needs to say which one is slow.
MIN_HOSTS = 3
#: Runs a host must be seen in before it is named. On the Flux testbed, one run in 35
#: trials put a normal node 25 % behind (its broker runs the job's script, on two cores
#: shared by four nodes): one run, however far off, is one draw. Replayed on all five
#: recorded trial series, requiring two named no wrong node, and every faulted node
#: that had a second study (docs/gate.md, "Slow nodes").
MIN_RUNS = 2
#: The least noise believed (log units).
MIN_NOISE = 0.005
#: The noise believed before a system's runs say (log units: about 5 % per host and
#: run), and what that belief weighs (degrees of freedom). Without it, the first run or
#: two of 4 hosts on the Flux testbed gave 0.8 % where later runs showed 3-12 %, and a
#: node 5-10 % off in one run was named (docs/gate.md, "Slow nodes").
PRIOR_NOISE = 0.05
PRIOR_DOF = 2


@dataclass(frozen=True)
class SlowNode:
    """A host slower beyond the noise: by how much (with a 95 % interval), over which runs
    and studies, and where it shows."""

    system: str
    host: str
    slower: float  # mean excess of its ranks' compute time over their runs' medians
    low: float
    high: float
    z: float
    runs: int
    studies: tuple[str, ...]
    where: str = "compute"  # the compute-only step time, measured without gradient sync

    def as_dict(self) -> dict[str, object]:
        return {"system": self.system, "host": self.host, "slower": self.slower,
                "low": self.low, "high": self.high, "z": self.z, "runs": self.runs,
                "studies": list(self.studies), "where": self.where}

    def line(self) -> str:
        """`lab: n3 is 12.1% slower [9.8%, 14.4%] in compute, over 6 runs of 3 studies
        (nightly, scaling, ...)`."""
        names = ", ".join(self.studies[:4]) + (", ..." if len(self.studies) > 4 else "")
        return (f"{self.system}: {self.host} is {self.slower:.1%} slower "
                f"[{self.low:.1%}, {self.high:.1%}] in {self.where}, over {self.runs} run(s) "
                f"of {len(self.studies)} study(ies) ({names})")


@dataclass
class Evidence:
    """What the store's runs say about nodes: the slow ones, how many runs and hosts
    were testable, and how many runs were not (with why)."""

    slow: list[SlowNode] = field(default_factory=list)
    testable_runs: int = 0
    hosts: int = 0
    untestable: dict[str, int] = field(default_factory=dict)  # why -> runs
    noise: dict[str, float] = field(default_factory=dict)  # system -> sigma

    def as_dict(self) -> dict[str, object]:
        """`history nodes --json`'s object, and a report's `stragglers`."""
        return {"slow": [n.as_dict() for n in self.slow], "hosts": self.hosts,
                "testable_runs": self.testable_runs, "untestable": dict(self.untestable),
                "noise": dict(self.noise)}


def observations(row: AttemptRow) -> dict[str, float] | str:
    """One run's slowness per host (log ratio of its ranks' mean compute time to the
    run's median rank), or why the run cannot tell."""
    record = member(row, col.METRICS)
    hosts, times = array(record.get("rank_hosts")), array(record.get("rank_compute_s"))
    if not hosts:
        return "no per-rank hosts in its record (older results, an import, or a program)"
    if not times:
        return "no per-rank compute times (run without diagnostics)"
    seconds = [t for t in times if isinstance(t, (int, float)) and t > 0]
    if len(hosts) != len(times) or len(seconds) != len(times):
        return "per-rank hosts and times that do not match"
    if len(set(hosts)) < MIN_HOSTS:
        return f"fewer than {MIN_HOSTS} hosts (a median of two is their mean)"
    by_host: dict[str, list[float]] = {}
    for host, t in zip(hosts, seconds, strict=True):
        by_host.setdefault(str(host), []).append(float(t))
    # each host against the median rank of the others: its own ranks do not pull it
    return {h: math.log(statistics.fmean(mine) / statistics.median(
        [t for other, ts in by_host.items() if other != h for t in ts]))
        for h, mine in by_host.items()}


def slow_nodes(rows: Sequence[AttemptRow], z: float = Z,
               min_slower: float = MIN_SLOWER) -> Evidence:
    """The slow hosts of every system, from the completed runs in `rows` (the store's)."""
    out = Evidence()
    per_system: dict[str, dict[str, list[tuple[float, str]]]] = {}
    for row in rows:
        if row.get(col.STATE) != "completed":
            continue
        got = observations(row)
        if isinstance(got, str):
            out.untestable[got] = out.untestable.get(got, 0) + 1
            continue
        out.testable_runs += 1
        hosts = per_system.setdefault(str(row.get(col.SYSTEM) or "?"), {})
        for host, value in got.items():
            hosts.setdefault(host, []).append((value, str(row.get(col.STUDY) or "?")))
    for system, hosts in per_system.items():
        sigma = _noise([[v for v, _ in seen] for seen in hosts.values()])
        out.noise[system] = sigma
        out.hosts += len(hosts)
        for host, seen in sorted(hosts.items()):
            mean = statistics.fmean(v for v, _ in seen)
            se = sigma / math.sqrt(len(seen))
            if len(seen) >= MIN_RUNS and mean / se >= z and math.exp(mean) - 1 >= min_slower:
                out.slow.append(SlowNode(
                    system, host, math.exp(mean) - 1, math.exp(mean - 1.96 * se) - 1,
                    math.exp(mean + 1.96 * se) - 1, mean / se, len(seen),
                    tuple(dict.fromkeys(s for _, s in seen))))
    out.slow.sort(key=lambda n: -n.z)
    return out


def study_stragglers(study: str, system: str | None, runs: pd.DataFrame | None
                     ) -> dict[str, object]:
    """One study's own evidence (its runs.csv rows, a DataFrame): `Evidence.as_dict`,
    or {} when none of its runs recorded per-rank hosts."""
    if runs is None or runs.empty or "rank_hosts" not in runs:
        return {}
    rows: list[AttemptRow] = []
    for run in runs.to_dict("records"):
        metrics = {"rank_hosts": _items(run.get("rank_hosts"), number=False),
                   "rank_compute_s": _items(run.get("rank_compute_s"), number=True)}
        rows.append({"state": run.get(col.STATE), "system": system or "?", "study": study,
                     "metrics": {k: v for k, v in metrics.items() if v is not None}})
    return slow_nodes(rows).as_dict()


def _items(value: object, number: bool) -> list[str] | list[float] | list[JSON] | None:
    """A per-rank cell of runs.csv, which holds a list joined with "," (results.analysis.collect;
    one rank: a lone value), as the list; None when empty or unreadable."""
    if isinstance(value, list):
        return value
    if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
        return None
    items = str(value).split(",")
    if not number:
        return items
    try:
        return [float(item) for item in items]
    except ValueError:
        return None


def _noise(per_host: Sequence[Sequence[float]]) -> float:
    """The spread of one observation: pooled over the hosts seen in several runs, around
    each host's own mean (a slow host's offset is not noise), with the prior's PRIOR_DOF
    degrees of freedom of PRIOR_NOISE added; the prior alone where no host was seen
    twice."""
    sums, dof = 0.0, 0
    for values in per_host:
        if len(values) > 1:
            m = statistics.fmean(values)
            sums += sum((v - m) ** 2 for v in values)
            dof += len(values) - 1
    pooled = (sums + PRIOR_DOF * PRIOR_NOISE ** 2) / (dof + PRIOR_DOF)
    return max(math.sqrt(pooled), MIN_NOISE)
