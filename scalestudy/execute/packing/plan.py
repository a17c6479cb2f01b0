"""Packing a study into allocations: which runs share one scheduler job, in what order,
on how many nodes and for how long. Pure: the plan, the expected run times and the
queue's limits in; allocations out.

Order: all points' first repeats, then all second repeats, ... (largest runs first
within each round), so the repeats of one point lie a whole round apart in time and a
slow period of the machine does not fall on all of them. Inside an allocation the steps
start in that order, each as soon as enough nodes are free (first come, first served:
no step overtakes an earlier one, which keeps the rounds apart); small runs go side by
side on disjoint nodes. The allocation's walltime is that schedule's length from the
expected times, plus a margin; where it would pass the queue's longest walltime (or the
largest run its node limit), the study is split into several allocations.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scalestudy.core.errors import ScalestudyError
from scalestudy.core.grid import Run

#: Time added to an allocation's expected length: the steps' own start-up and the
#: allocation script's, and runs slower than their measurement.
MARGIN_FRACTION = 0.10
MARGIN_S = 120


@dataclass(frozen=True)
class Step:
    """One run inside an allocation: when the plan expects it to start, on which of the
    allocation's nodes (indexes), for how long; `limit_s` stops a step that hangs."""

    run: Run
    start_s: float
    expected_s: float
    limit_s: int
    nodes_at: tuple[int, ...]

    @property
    def end_s(self) -> float:
        """When the plan expects it to end."""
        return self.start_s + self.expected_s


@dataclass(frozen=True)
class Allocation:
    """One scheduler job that runs several runs as its steps."""

    index: int
    nodes: int
    walltime_s: int
    steps: tuple[Step, ...]
    queue: str | None = None  # where its runs go (None: the scheduler's default)

    @property
    def span_s(self) -> float:
        """The schedule's expected length (first step's start to last step's end)."""
        return max((s.end_s for s in self.steps), default=0.0)

    @property
    def busy_node_s(self) -> float:
        """Node-seconds the steps are expected to use."""
        return sum(s.run.nodes * s.expected_s for s in self.steps)

    @property
    def idle_node_s(self) -> float:
        """Node-seconds the allocation is expected to hold with no step on them (small
        runs leaving nodes free, the wait for a large run's nodes)."""
        return self.nodes * self.span_s - self.busy_node_s


def order(runs: Sequence[Run]) -> list[Run]:
    """The steps' order: round by round of repeats, largest runs first in each round,
    the plan's order between equals."""
    at = {r.run_id: i for i, r in enumerate(runs)}
    return sorted(runs, key=lambda r: (r.repeat, -r.nodes, at[r.run_id]))


def schedule(runs: Sequence[Run], nodes: int, expected: Callable[[Run], float],
             limit_s: int) -> list[Step]:
    """First come, first served on `nodes` nodes: each run starts no earlier than the one
    before it, on the lowest-numbered nodes that are free then."""
    free_at = [0.0] * nodes
    steps: list[Step] = []
    last_start = 0.0
    for run in runs:
        if run.nodes > nodes:
            raise ValueError(f"run {run.run_id} needs {run.nodes} nodes, the allocation "
                             f"has {nodes}")
        # the k-th earliest free time is when k nodes are free; not before the last start
        start = max(last_start, heapq.nsmallest(run.nodes, free_at)[-1])
        free = [i for i in range(nodes) if free_at[i] <= start][:run.nodes]
        seconds = float(expected(run))
        for i in free:
            free_at[i] = start + seconds
        steps.append(Step(run, start, seconds, limit_s, tuple(free)))
        last_start = start
    return steps


def walltime_for(span_s: float) -> int:
    """An allocation's walltime for a schedule of this length (with the margin), whole
    minutes."""
    seconds = span_s * (1 + MARGIN_FRACTION) + MARGIN_S
    return int(math.ceil(seconds / 60.0) * 60)


Longest = Callable[[int], "int | None"]


def pack(runs: Sequence[Run], expected: Callable[[Run], float], limit_s: int,
         longest: Longest = lambda nodes: None, max_nodes: int | None = None
         ) -> list[Allocation]:
    """The runs packed into as few allocations as the queue allows: `expected` gives a
    run's expected seconds, `limit_s` its own time limit (its walltime), `longest(n)` the
    queue's longest walltime for an n-node job (None: no limit), `max_nodes` its largest
    job. ScalestudyError where a run alone cannot fit the queue."""
    ordered = order(runs)
    for run in ordered:
        if max_nodes is not None and run.nodes > max_nodes:
            raise ScalestudyError(
                f"run {run.run_id} needs {run.nodes} nodes; the queue takes jobs of at most "
                f"{max_nodes}: lower grid.nodes, or choose a queue that takes {run.nodes}")
        cap = longest(run.nodes)
        if cap is not None and walltime_for(expected(run)) > cap:
            raise ScalestudyError(
                f"run {run.run_id} alone is expected to take {expected(run):.0f} s, with "
                f"the packing margin more than the queue's longest walltime ({cap} s) for "
                f"{run.nodes} node(s): lower job.walltime, or run it without --pack")
    groups: list[list[Run]] = []
    current: list[Run] = []
    for run in ordered:
        trial = [*current, run]
        if current and not _fits(trial, expected, limit_s, longest):
            groups.append(current)
            trial = [run]
        current = trial
    if current:
        groups.append(current)
    out = []
    for index, group in enumerate(groups, 1):
        nodes = max(r.nodes for r in group)
        steps = schedule(group, nodes, expected, limit_s)
        span = max(s.end_s for s in steps)
        out.append(Allocation(index, nodes, walltime_for(span), tuple(steps)))
    return out


def _fits(group: list[Run], expected: Callable[[Run], float], limit_s: int,
          longest: Longest) -> bool:
    nodes = max(r.nodes for r in group)
    cap = longest(nodes)
    if cap is None:
        return True
    span = max(s.end_s for s in schedule(group, nodes, expected, limit_s))
    return walltime_for(span) <= cap
