"""A study's runs packed into allocations its queues take: each run to the queue that
takes it, each queue's runs packed apart within that queue's limits (the scheduler's
answer, else the profile's); what `plan --pack` says of them, and the `--budget` check.
Pure: each run's expected seconds (study.packing reads them) and the limits in."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scalestudy.core.errors import ScalestudyError
from scalestudy.core.grid import Run
from scalestudy.core.spec import walltime_seconds
from scalestudy.execute.packing.plan import Allocation, pack
from scalestudy.site.plan import Plan
from scalestudy.site.preflight import profile_queue_limits
from scalestudy.site.queues import hms
from scalestudy.site.routing import documented, queue_for

if TYPE_CHECKING:
    from scalestudy.site.preflight import Preflight
    from scalestudy.site.queues import QueueLimits


@dataclass(frozen=True)
class Expected:
    """Each run's expected seconds, and where each figure comes from."""

    seconds: dict[str, float]
    source: dict[str, str]  # run id -> "this study" | "results store" | "walltime"

    def __call__(self, run: Run) -> float:
        """The run's expected seconds."""
        return self.seconds[run.run_id]

    def counts(self) -> dict[str, int]:
        """How many runs' figures come from each source."""
        out: dict[str, int] = {}
        for where in self.source.values():
            out[where] = out.get(where, 0) + 1
        return out


def limits(plan: Plan, found: Preflight | None, name: str | None = None
           ) -> QueueLimits | None:
    """A queue's limits (`name`; None: the study's first queue): the scheduler's answer
    from a preflight where it is that queue's, else the profile's."""

    if found is not None and found.queue_limits is not None and (
            name is None or found.queue_limits.name == name):
        return found.queue_limits
    return documented(plan.system, name) if name else profile_queue_limits(plan)


def allocations(plan: Plan, runs: Sequence[Run], expected: Expected,
                found: Preflight | None = None) -> list[Allocation]:
    """The runs packed into allocations that their queues take: each run goes to the
    queue that takes it (site.routing), and each queue's runs are packed apart, within
    that queue's limits (`found`: the scheduler's answer where a preflight asked it)."""

    by_queue: dict[str | None, list[Run]] = {}
    for run in runs:
        by_queue.setdefault(queue_for(plan.study, plan.system, run), []).append(run)
    out: list[Allocation] = []
    for name, group in by_queue.items():
        for a in _packed(plan, group, limits(plan, found, name), expected):
            out.append(dataclasses.replace(a, index=len(out) + 1, queue=name))
    return out


def _packed(plan: Plan, runs: Sequence[Run], queue: QueueLimits | None,
            expected: Expected) -> list[Allocation]:
    """One queue's runs packed into allocations within its limits."""
    wall = walltime_seconds(plan.study.job.walltime)
    longest: Callable[[int], int | None] = (
        queue.longest if queue is not None else lambda nodes: None)
    caps = [x for x in ((queue.max_nodes, queue.total_nodes) if queue else ()) if x]
    cap = min([*caps, plan.system.max_nodes]) if caps else plan.system.max_nodes
    system_wall = plan.system.scheduler_options.max_walltime
    if system_wall:
        ceiling = walltime_seconds(system_wall)

        def capped(nodes: int) -> int | None:
            known = longest(nodes)
            return ceiling if known is None else min(known, ceiling)
        return pack(runs, expected, wall, capped, cap)
    return pack(runs, expected, wall, longest, cap)


def describe(allocations_: Sequence[Allocation], expected: Expected) -> list[str]:
    """`plan --pack`'s lines: each allocation's nodes, walltime, runs and expected idle
    node-hours, then where the expected times come from."""

    lines = []
    several = len({a.queue for a in allocations_}) > 1
    for a in allocations_:
        sizes = sorted({s.run.nodes for s in a.steps})
        lines.append(
            f"allocation {a.index}: {a.nodes} node(s) for {hms(a.walltime_s)}"
            + (f" in queue {a.queue}" if several and a.queue else "") + ", "
            f"{len(a.steps)} run(s) of {', '.join(map(str, sizes))} node(s); expected "
            f"{a.span_s / 3600:.2f} h, {a.nodes * a.span_s / 3600:.2f} node-h held, "
            f"{a.idle_node_s / 3600:.2f} node-h idle ({_share(a)} of it)")
    counts = ", ".join(f"{n} from {w}" for w, n in sorted(expected.counts().items()))
    lines.append(f"expected run times: {counts}")
    return lines


def _share(a: Allocation) -> str:
    held = a.nodes * a.span_s
    return f"{a.idle_node_s / held:.0%}" if held else "0%"


def check_packed_budget(planned: Sequence[Allocation], budget: float | None) -> None:
    """`run --pack --budget N`: refuse allocations whose worst case (their nodes for their
    whole walltime, idle nodes included) passes N node-hours."""
    if budget is None or not planned:
        return
    worst = sum(a.nodes * a.walltime_s for a in planned) / 3600
    if worst > budget:

        raise ScalestudyError(
            f"the {len(planned)} allocation(s) may hold up to {worst:g} node-hours (their "
            f"nodes for their whole walltime, idle ones included), more than --budget "
            f"{budget:g}: exclude the largest scales (--only 'nodes<=N'), lower "
            "job.walltime, or raise --budget")
