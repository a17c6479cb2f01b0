"""The `--pack` use cases: how long each run is expected to take (this study's measured
runs, else the results store's, else its walltime), the queue's limits, and the
allocations a study's runs are packed into (what `plan --pack` shows and `run --pack`
queues)."""

from __future__ import annotations

import dataclasses
import shutil
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scalestudy.core.errors import ScalestudyError
from scalestudy.core.grid import Run
from scalestudy.core.spec import walltime_seconds
from scalestudy.core.states import RunState
from scalestudy.execute.preflight import preflight
from scalestudy.execute.status import read_status
from scalestudy.results.analysis import columns as col
from scalestudy.results.history.rows import AttemptRow
from scalestudy.site.packing import Allocation, pack
from scalestudy.site.plan import Plan
from scalestudy.site.preflight import profile_queue_limits
from scalestudy.site.queues import hms
from scalestudy.site.routing import documented, queue_for
from scalestudy.study.history import open_store

if TYPE_CHECKING:
    from scalestudy.site.preflight import Preflight
    from scalestudy.site.queues import QueueLimits

#: (nodes, ranks per node, global batch, backend, model); a store row may lack a number.
Shape = tuple[int | None, int | None, int | None, str, str]


def _shape(run: Run | AttemptRow) -> Shape:
    if isinstance(run, dict):
        return (run.get("nodes"), run.get("ranks_per_node"), run.get("global_batch"),
                str(run.get("backend")), str(run.get("model")))
    return run.nodes, run.ranks_per_node, run.global_batch, str(run.backend), str(run.model)


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


def expected_times(plan: Plan, store_url: str | None = None,
                   use_store: bool = True) -> Expected:
    """Per run: the median elapsed time of this study's completed runs of its shape
    (nodes, ranks per node, global batch, backend, model), else of the results store's
    completed attempts of that shape on this system, else its walltime."""
    measured: dict[Shape, list[float]] = {}
    for run in plan.runs:
        status = read_status(plan.run_dir(run))
        if status.state is RunState.COMPLETED and status.elapsed_s:
            measured.setdefault(_shape(run), []).append(float(status.elapsed_s))
    stored = _stored(plan, store_url) if use_store else {}
    wall = float(walltime_seconds(plan.study.job.walltime))
    seconds: dict[str, float] = {}
    source: dict[str, str] = {}
    for run in plan.runs:
        key = _shape(run)
        for where, found in (("this study", measured), ("results store", stored)):
            if found.get(key):
                seconds[run.run_id] = min(wall, statistics.median(found[key]))
                source[run.run_id] = where
                break
        else:
            seconds[run.run_id], source[run.run_id] = wall, "walltime"
    return Expected(seconds, source)


def _stored(plan: Plan, url: str | None) -> dict[Shape, list[float]]:
    """Elapsed seconds of the store's completed attempts on this system, by shape; {}
    where there is no store to read."""

    try:
        store = open_store(url)
        try:
            rows = store.rows(system=plan.system.name)
        finally:
            store.dispose()
    except Exception:  # a store that cannot be read only costs the estimates
        return {}
    out: dict[Shape, list[float]] = {}
    for row in rows:
        started, ended = row.get(col.STARTED), row.get(col.ENDED)
        if row.get(col.STATE) == "completed" and started and ended:
            seconds = (ended - started).total_seconds()
            if seconds > 0:
                out.setdefault(_shape(row), []).append(seconds)
    return out


def limits(plan: Plan, found: Preflight | None, name: str | None = None
           ) -> QueueLimits | None:
    """A queue's limits (`name`; None: the study's first queue): the scheduler's answer
    from a preflight where it is that queue's, else the profile's."""

    if found is not None and found.queue_limits is not None and (
            name is None or found.queue_limits.name == name):
        return found.queue_limits
    return documented(plan.system, name) if name else profile_queue_limits(plan)


def allocations(plan: Plan, runs: Sequence[Run], found: Preflight | None = None,
                expected: Expected | None = None) -> list[Allocation]:
    """The runs packed into allocations that their queues take: each run goes to the
    queue that takes it (site.routing), and each queue's runs are packed apart, within
    that queue's limits."""

    expected = expected or expected_times(plan)
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


def check_engine(plan: Plan) -> None:
    """`job.pack_engine: flux`: the scheduler must be able to start Flux in a job, and the
    `flux` command must be there to be started (it travels into the job on PATH)."""
    scheduler = plan.scheduler
    if plan.study.job.exclude_nodes and scheduler.hosts_argv is not None:
        raise ScalestudyError(
            f"run --pack with job.exclude_nodes: a {scheduler.name} allocation cannot "
            "exclude nodes yet (scalestudy names each unpacked job's hosts instead); run "
            "without --pack, or without the exclude list")
    engine = scheduler.pack_engine(plan.study.job.pack_engine)
    if not engine.flux_jobs and scheduler.nodes_command is None:
        raise ScalestudyError(f"run --pack: a {scheduler.name} job cannot run steps here")
    if not engine.flux_jobs or scheduler.job_is_flux_instance:
        return
    if scheduler.starts_flux is None:
        raise ScalestudyError(
            f"job.pack_engine: flux: scalestudy cannot start a Flux instance inside a "
            f"{plan.scheduler.name} job (it does so in Slurm jobs); set job.pack_engine: "
            "steps, scalestudy's own step runner")
    if shutil.which("flux") is None:
        raise ScalestudyError(
            "job.pack_engine: flux: no `flux` command on PATH; the allocation starts the "
            "one on PATH when the study is submitted: load the site's flux module (or put "
            "flux-core's bin directory on PATH) and run again")


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


def pack_summary(plan: Plan) -> dict[str, Any]:
    """`plan --pack`: the allocations of the runs not completed yet (the scheduler asked
    for its queue's limits where its commands are here, else the profile's), as JSON and
    as lines."""
    import shutil

    if not plan.scheduler.queued:

        raise ScalestudyError(
            f"--pack: system {plan.system.name} runs jobs on this host, one after the other: "
            "there is no allocation to pack into; plan without --pack")
    found = None
    if all(shutil.which(c) for c in plan.scheduler.needed_commands()):

        found = preflight(plan, python=False)
    todo = [r for r in plan.runs if read_status(plan.run_dir(r)).state is not RunState.COMPLETED]
    expected = expected_times(plan)
    planned = allocations(plan, todo, found, expected) if todo else []
    lines = describe(planned, expected)
    for name in dict.fromkeys([a.queue for a in planned] or [None]):
        queue = limits(plan, found, name)
        if queue is not None:
            lines.append(f"queue {queue.name}: {queue.describe()} ({queue.source})")
    return {"allocations": [
        {"index": a.index, "nodes": a.nodes, "walltime": hms(a.walltime_s), "queue": a.queue,
         "runs": [s.run.run_id for s in a.steps],
         "expected_hours": round(a.span_s / 3600, 3),
         "node_hours_held": round(a.nodes * a.span_s / 3600, 3),
         "node_hours_idle": round(a.idle_node_s / 3600, 3)} for a in planned],
        "expected_sources": expected.counts(), "lines": lines}
