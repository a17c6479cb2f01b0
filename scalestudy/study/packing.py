"""The `--pack` use cases that read the results store: how long each run is expected to
take (this study's measured runs, else the store's, else its walltime), and what
`plan --pack` shows. The packing itself is execute.packing's (this layer alone may read
the store)."""

from __future__ import annotations

import shutil
import statistics
from typing import Any

from scalestudy.core.errors import ScalestudyError
from scalestudy.core.grid import Run
from scalestudy.core.spec import walltime_seconds
from scalestudy.core.states import RunState
from scalestudy.execute.packing.queues import Expected, allocations, describe, limits
from scalestudy.execute.preflight import preflight
from scalestudy.execute.status import read_status
from scalestudy.results.analysis import columns as col
from scalestudy.results.history.rows import AttemptRow
from scalestudy.site.plan import Plan
from scalestudy.site.queues import hms
from scalestudy.study.history import open_store

#: (nodes, ranks per node, global batch, backend, model); a store row may lack a number.
Shape = tuple[int | None, int | None, int | None, str, str]


def _shape(run: Run | AttemptRow) -> Shape:
    if isinstance(run, dict):
        return (run.get("nodes"), run.get("ranks_per_node"), run.get("global_batch"),
                str(run.get("backend")), str(run.get("model")))
    return run.nodes, run.ranks_per_node, run.global_batch, str(run.backend), str(run.model)


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


def pack_summary(plan: Plan) -> dict[str, Any]:
    """`plan --pack`: the allocations of the runs not completed yet (the scheduler asked
    for its queue's limits where its commands are here, else the profile's), as JSON and
    as lines."""
    if not plan.scheduler.queued:

        raise ScalestudyError(
            f"--pack: system {plan.system.name} runs jobs on this host, one after the other: "
            "there is no allocation to pack into; plan without --pack")
    found = None
    if all(shutil.which(c) for c in plan.scheduler.needed_commands()):

        found = preflight(plan, python=False)
    todo = [r for r in plan.runs if read_status(plan.run_dir(r)).state is not RunState.COMPLETED]
    expected = expected_times(plan)
    planned = allocations(plan, todo, expected, found) if todo else []
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
