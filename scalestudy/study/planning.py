"""What a study's plan says and allows before anything runs: its summary and warnings,
the preflight, the node-hour budget, the `--only` selection and the study's lock."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scalestudy.core.errors import ScalestudyError
from scalestudy.core.grid import Run, node_hours, select
from scalestudy.core.spec import walltime_seconds
from scalestudy.core.states import RunState
from scalestudy.execute import workspace as ws
from scalestudy.execute.commands import estimate_start
from scalestudy.execute.preflight import preflight as ask
from scalestudy.execute.status import read_status
from scalestudy.results.analysis.waits import Wait, expected, from_scheduler, waits_by_nodes
from scalestudy.site import resolve
from scalestudy.site.plan import Plan
from scalestudy.site.preflight import offline, profile_job_limits
from scalestudy.site.render import job_request
from scalestudy.site.routing import queue_for

if TYPE_CHECKING:
    from scalestudy.execute.submit import JobLimit
    from scalestudy.site.preflight import Preflight

Say = Callable[[str], None]
#: Attempts a run gets at most, unless `run --max-attempts` says otherwise.
MAX_ATTEMPTS = 3


def quiet(_: str) -> None:
    return None


def plan_summary(plan: Plan) -> dict[str, Any]:
    """What `plan --json` prints: the runs, their states and the totals: the worst-case
    node-hours (every run using its whole walltime) and the expected ones (measured
    where a run, or a run of the same shape, has run; the walltime elsewhere)."""

    statuses = {r.run_id: read_status(plan.run_dir(r)) for r in plan.runs}
    expected, measured = expected_node_hours(plan, statuses)
    queues = {r.run_id: queue_for(plan.study, plan.system, r) for r in plan.runs}
    return {
        "study": plan.study.name,
        "system": plan.system.name,
        "scaling": plan.study.scaling,
        "runs": [{**r.params(), "state": statuses[r.run_id].state.value,
                  **({"queue": queues[r.run_id]} if plan.scheduler.queued else {})}
                 for r in plan.runs],
        "run_count": len(plan.runs),
        "node_hours_max": round(node_hours(plan.study, plan.runs), 3),
        "node_hours_expected": round(expected, 3),
        "runs_measured": measured,
        "walltime": plan.study.job.walltime,
        "values": {v.key: v.as_dict() for v in resolve.values(plan.study, plan.system)},
        "warnings": plan_warnings(plan),
    }


def expected_waits(plan: Plan) -> list[Wait]:
    """The expected queue wait of each node count of the study:
    the scheduler's own estimate where it gives one (Slurm: `sbatch --test-only`, when
    sbatch is here), else the median of this system's earlier jobs in the results
    store; [] for a system without a queue."""
    if not plan.scheduler.queued:
        return []
    stored = _stored_waits(plan)
    live = _scheduler_waits(plan)
    return [live.get(w.nodes, w) for w in stored] if stored else list(live.values())


def _scheduler_waits(plan: Plan) -> dict[int, Wait]:
    """Per node count, the wait the scheduler's estimate gives (one command each; none
    where the scheduler has no estimate or its command is not on PATH)."""
    import shutil
    from datetime import datetime

    out: dict[int, Wait] = {}
    for run in plan.runs:
        if run.nodes in out:
            continue
        job = job_request(plan.study, plan.system, run, plan.run_dir(run))
        argv = plan.scheduler.estimate_argv(job)
        if argv is None or shutil.which(argv[0]) is None:
            return out
        start = estimate_start(plan.scheduler, job)
        if start is not None:
            out[run.nodes] = from_scheduler(run.nodes, start, datetime.now(),
                                            " ".join(argv[:2]))
    return out


def _stored_waits(plan: Plan) -> list[Wait]:
    """The store's estimate of each node count ([] where the store cannot be read: it
    only costs the estimate)."""
    import sqlalchemy.exc

    from scalestudy.study.history import open_store

    try:  # a store that cannot be read (or reached: another user's) costs the estimate only
        store = open_store()
        if store.url.startswith("sqlite:///") and \
                not Path(store.url[len("sqlite:///"):]).exists():
            return expected({}, (r.nodes for r in plan.runs), plan.system.name)  # none yet
        try:
            rows = store.rows(system=plan.study.system)
        finally:
            store.dispose()
    except (ScalestudyError, sqlalchemy.exc.SQLAlchemyError, OSError):
        return []
    return expected(waits_by_nodes(rows), (r.nodes for r in plan.runs), plan.system.name)


def plan_warnings(plan: Plan) -> list[str]:
    """What the plan does that may not be meant (GPUs of its nodes left idle), with fixes."""
    return resolve.idle_gpu_warnings(plan.study, plan.system, plan.runs)


def preflight(plan: Plan, python: bool = True) -> Preflight:
    """Ask the scheduler and this host whether the study's jobs can run (`python`: also
    run the jobs' Python here); each problem with its fix."""

    return ask(plan, python)


def preflight_gate(plan: Plan, python: bool, show: Callable[[Preflight], None],
                   hint: str = "") -> Preflight:
    """The preflight, shown (`show`), then an error when a problem would make the jobs
    fail or wait for ever (`hint`: what else the user may do)."""
    found = preflight(plan, python)
    show(found)
    if found.errors:
        raise ScalestudyError(
            f"preflight: {len(found.errors)} problem(s) above would make jobs of study "
            f"{plan.study.name} fail or wait for ever: fix them{hint}")
    return found


def limits_gate(plan: Plan, show: Callable[[str], None]) -> Preflight:
    """The study against its profile's documented queue limits, no scheduler asked
    (`validate`, `plan`, `run --dry-run`): each problem shown as one line (`show`), then
    an error when one would make jobs be refused or wait for ever."""

    found = offline(plan)
    for problem in found.problems:
        show(problem.line("limits"))
    if found.errors:
        raise ScalestudyError(
            f"limits: {len(found.errors)} problem(s) above: profile {plan.system.name}'s "
            f"documented limits would refuse the jobs of study {plan.study.name} or keep "
            "them waiting for ever: fix them (`validate --preflight` asks the scheduler "
            "itself)")
    return found


def job_limit(plan: Plan, given: int | None, found: Preflight | None, say: Say
              ) -> JobLimit:
    """`--max-jobs` (the study's jobs all together), or the per-user job limit of the
    study's queue as the scheduler said it in the preflight, else of each queue its runs
    go to as the profile documents them (each queue counted apart); said when it
    applies."""
    if given is not None:
        return given
    later = "; jobs beyond it are submitted as earlier ones end (with --wait) or by the " \
            "next `run`"

    limits = found.job_limits if found is not None and found.job_limits else \
        profile_job_limits(plan)
    if not limits:
        return None
    for queue, (most, why) in limits.items():
        say(f"note: at most {most} job(s) at once in queue {queue}: {why}{later}")
    routed = {queue_for(plan.study, plan.system, r) for r in plan.runs}
    out: dict[str | None, int] = {q: limits[q][0] for q in routed if q in limits}
    # runs that name no queue go to the scheduler's default: the limit found for it
    default = [most for q, (most, _) in limits.items() if q not in routed]
    if None in routed and default:
        out[None] = min(default)
    return out


def expected_node_hours(plan: Plan, statuses: dict[str, Any]) -> tuple[float, int]:
    """(node-hours, runs whose time is measured): each run's measured elapsed time, else
    the median of measured runs of the same shape (nodes, ranks, batch), else its walltime."""
    import statistics

    by_shape: dict[tuple[int, int, int], list[float]] = {}
    for run in plan.runs:
        elapsed = statuses[run.run_id].elapsed_s
        if elapsed is not None and statuses[run.run_id].state is RunState.COMPLETED:
            by_shape.setdefault((run.nodes, run.ranks_per_node, run.global_batch),
                                []).append(elapsed)
    wall = walltime_seconds(plan.study.job.walltime)
    total, measured = 0.0, 0
    for run in plan.runs:
        known = by_shape.get((run.nodes, run.ranks_per_node, run.global_batch))
        seconds = statistics.median(known) if known else wall
        measured += bool(known)
        total += run.nodes * seconds / 3600
    return total, measured


def check_budget(plan: Plan, runs: Sequence[Run], budget: float | None) -> None:
    """`run --budget N`: refuse runs whose worst case (nodes x walltime) exceeds N
    node-hours, naming the costliest."""
    if budget is None or not runs:
        return
    worst = node_hours(plan.study, runs)
    if worst <= budget:
        return
    hours_each = node_hours(plan.study, runs[:1]) / runs[0].nodes
    costly = sorted(runs, key=lambda r: -r.nodes)[:5]
    named = ", ".join(f"{r.run_id} ({r.nodes} nodes: {r.nodes * hours_each:g} node-h)"
                      for r in costly)
    raise ScalestudyError(
        f"the {len(runs)} run(s) to start may use up to {worst:g} node-hours (nodes x "
        f"walltime {plan.study.job.walltime}), more than --budget {budget:g}; the costliest: "
        f"{named}. Lower job.walltime, exclude the largest scales (--only 'nodes<=N'), or "
        "raise --budget")


def lock(plan: Plan) -> contextlib.AbstractContextManager[None]:
    """The study's lock (a second `run` of the same study refuses)."""
    return ws.study_lock(plan.directory)


def selected(plan: Plan, only: str | None) -> Sequence[Run]:
    """The runs `--only` selects."""
    return select(plan.runs, only)


def check_selection(plan: Plan, only: str | None) -> None:
    """A `--only` that selects no run is an error that says what the study has."""
    if only and not select(plan.runs, only):
        raise ScalestudyError(
            f"--only {only!r} selects none of the study's {len(plan.runs)} runs; it has "
            + describe_axes(plan.runs))


def describe_axes(runs: Sequence[Run]) -> str:
    """The values each filter key takes in these runs, e.g. `world_size 1, 2, 4; ...`."""
    keys = ("nodes", "ranks_per_node", "world_size", "batch_size", "global_batch", "backend",
            "tuning")
    parts = []
    for key in keys:
        values = sorted({getattr(r, key) for r in runs}, key=lambda v: (str(type(v)), v))
        parts.append(f"{key} {', '.join(map(str, values))}")
    return "; ".join(parts)


def read_exclude_list(path: Path) -> list[str]:
    """The hosts of an exclude list (`run --exclude-nodes FILE`): one or more per line,
    separated by commas or spaces, `#` starting a comment (what `history nodes
    --write-exclude` writes)."""
    import re

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScalestudyError(f"--exclude-nodes {path}: cannot read it ({exc.strerror}); "
                              "give a file of host names, one per line") from None
    hosts: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        for host in re.split(r"[\s,]+", line.split("#", 1)[0].strip()):
            if not host:
                continue
            if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$", host):
                raise ScalestudyError(f"{path}:{number}: {host!r} is not a host name (letters, "
                                      "digits, `.`, `_`, `-`): fix or remove it")
            hosts.append(host)
    return list(dict.fromkeys(hosts))


def with_excluded(plan: Plan, hosts: Sequence[str]) -> Plan:
    """The plan with these hosts added to the spec's `job.exclude_nodes` (refused where
    the scheduler cannot keep a job off a node)."""
    import dataclasses

    if not hosts:
        return plan
    if plan.scheduler.exclusion is None:
        raise ScalestudyError(
            f"--exclude-nodes: system {plan.system.name} uses {plan.system.scheduler}, which "
            "scalestudy cannot ask to keep a job off a node (Slurm --exclude and Flux "
            "--requires=-host: can): report the nodes to the site, or run without it")
    merged = list(dict.fromkeys([*plan.study.job.exclude_nodes, *hosts]))
    job = plan.study.job.model_copy(update={"exclude_nodes": merged})
    return dataclasses.replace(plan, study=plan.study.model_copy(update={"job": job}))
