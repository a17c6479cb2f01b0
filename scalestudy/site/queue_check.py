"""A study's queue (partition, QOS) held against its limits: the scheduler's answer
or, where there is none, the limits its profile documents (`offline`: what validate,
plan and run --dry-run check with no scheduler at hand). Pure: one problem a line."""

from __future__ import annotations

import difflib

from scalestudy.core.spec import walltime_seconds
from scalestudy.site.plan import Plan
from scalestudy.site.queues import QueueLimits, hms
from scalestudy.site.verdict import ERROR, WARNING, Facts, Preflight


def offline(plan: Plan) -> Preflight:
    """The study held against its profile's queue limits alone, no scheduler asked (what
    `validate`, `plan` and `run --dry-run` check, on a laptop too): the queue's name
    (with a did-you-mean), node counts, walltimes and one user's jobs at once."""
    out = Preflight()
    if plan.scheduler.queued:
        profile_queues(plan, Facts("", ""), out)
        check_qos(plan, Facts("", ""), out)
    return out


def profile_queues(plan: Plan, facts: Facts, out: Preflight) -> None:
    """The study's queue held against the limits its profile documents."""
    key = plan.scheduler.queue_key
    name, where = queue_name(plan, facts)
    if not (name and key):
        return
    known = {n: lim for n in plan.system.scheduler_options.queues
             if (lim := profile_limits(plan, n))}
    limits = known.get(name)
    if limits is not None:
        out.queue_limits = limits
        check_limits(plan, facts, out, key, key, where, limits, known)
        return
    if not known:
        return
    listed = ", ".join(sorted(known))
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.75)
    if close:
        out.add(ERROR, f"{where}: {key} {name} is not one of profile {plan.system.name}'s "
                f"{key}s ({listed}): did you mean {close[0]}? set job.{key}: {close[0]}")
    else:
        out.add(WARNING, f"{where}: {key} {name} is not among profile "
                f"{plan.system.name}'s {key}s ({listed}), so its limits are not checked "
                "here; `validate --preflight` asks the scheduler")


def check_qos(plan: Plan, facts: Facts, out: Preflight) -> None:
    """The study's QOS against sacctmgr's answer, else the profile's limits."""
    qos = plan.study.job.qos or plan.system.scheduler_options.qos
    if not (qos and "qos" in plan.scheduler.job_options):
        return
    where = (plan.study.line_of(("job", "qos")) if plan.study.job.qos
             else f"profile {plan.system.name}: scheduler_options.qos")
    if facts.queues.qos and not facts.missing:
        limits = facts.queues.qos.get(qos.lower())
        if limits is None:
            out.add(ERROR, f"{where}: QOS {qos} does not exist (sacctmgr show qos lists "
                    f"{', '.join(sorted(facts.queues.qos))}): set job.qos to one of them")
            return
    else:
        limits = profile_limits(plan, qos)
    if limits is not None:
        check_limits(plan, facts, out, "QOS", "qos", where, limits, {})


def answer_source(facts: Facts, kind: str) -> str:
    """Which command listed the queues (the first answer's source), else `kind`."""
    return next(iter(facts.queues.queues.values())).source if facts.queues.queues else kind


def check_limits(plan: Plan, facts: Facts, out: Preflight, kind: str, key: str,
                 where: str, limits: QueueLimits, known: dict[str, QueueLimits]) -> None:
    """The runs' node counts and walltime against one queue's (or QOS's) limits."""
    study, name, src = plan.study, limits.name, limits.source
    wall = walltime_seconds(study.job.walltime)
    counts = sorted({r.nodes for r in plan.runs})
    nodes_at = study.line_of(("grid", "nodes"))
    before = len(out.problems)

    def others(n: int, pack: bool = True) -> str:
        fits = sorted(q for q, lim in known.items() if q != name and lim.takes(n, wall))
        verb = "they take" if len(fits) > 1 else "it takes"
        packs = ("pack the study (`run --pack`: each allocation goes to a queue that "
                 "takes its size), or " if pack and key == "queue" else "")
        return (f"run those node counts as a study of their own with job.{key}: "
                f"{' or '.join(fits)} ({verb} {n}-node jobs of {study.job.walltime}), or "
                f"{packs}" if fits else "")

    if limits.closed:
        out.add(ERROR, f"{where}: {kind} {name} takes no jobs now ({limits.closed}, {src}): "
                f"its jobs would wait until it reopens; use another {kind}")
    high = min(x for x in (limits.max_nodes, limits.total_nodes) if x) if (
        limits.max_nodes or limits.total_nodes) else None
    for bad, bound, word in (
            ([n for n in counts if high and n > high], high, "at most"),
            ([n for n in counts if limits.min_nodes and n < limits.min_nodes],
             limits.min_nodes, "at least")):
        if bad:
            runs = sum(1 for r in plan.runs if r.nodes in bad)
            out.add(ERROR, f"{nodes_at}: {', '.join(map(str, bad))} node(s): {kind} {name} "
                    f"takes {word} {bound} nodes ({src}), so {runs} run(s) would be refused "
                    f"or wait for ever; {others(bad[0])}keep grid.nodes {word} {bound} (or "
                    "exclude those node counts)")
    over = [n for n in counts if (cap := limits.longest(n)) and wall > cap]
    if over:
        cap = min(limits.longest(n) or wall for n in over)
        instead = others(over[0], pack=False).removesuffix(", or ") or f"pick another {kind}"
        sizes = f" for {', '.join(map(str, over))} node(s)" if limits.walltime_by_nodes else ""
        out.add(ERROR, f"{study.line_of(('job', 'walltime'))}: {study.job.walltime} is longer "
                f"than {kind} {name} allows ({hms(cap)}{sizes}, {src}): the jobs would be "
                f"refused or never start; lower job.walltime to {hms(cap)}, or {instead}")
    if limits.min_walltime_s and wall < limits.min_walltime_s:
        out.add(ERROR, f"{study.line_of(('job', 'walltime'))}: {study.job.walltime} is "
                f"shorter than {kind} {name} accepts ({hms(limits.min_walltime_s)}, {src}): "
                f"raise job.walltime to {hms(limits.min_walltime_s)}")
    for what, allowed, value in (("account", limits.allow_accounts, study.job.account),
                                 ("QOS", limits.allow_qos, study.job.qos)):
        if allowed is not None and value and value.lower() not in allowed:
            out.add(ERROR, f"{where}: {kind} {name} admits the {what}s "
                    f"{', '.join(sorted(allowed))} only, not {value} ({src}): use one of "
                    f"them, or another {kind}")
    down = facts.queues.down_nodes.get(name)
    if down and limits.total_nodes:
        up = limits.total_nodes - down
        waiting = [n for n in counts if up < n <= limits.total_nodes]
        if waiting:
            out.add(WARNING, f"only {up} of the {limits.total_nodes} nodes of {kind} {name} "
                    f"take jobs now (sinfo: {down} down, drained or failing): the "
                    f"{', '.join(map(str, waiting))}-node runs wait until enough return")
    _job_limits(plan, out, kind, name, limits.jobs_source or src, limits)
    if len(out.problems) == before:
        out.checked.append(f"{kind} {name} takes {limits.describe()}"
                           + (f" ({src})" if src.startswith("profile ") else ""))


def _job_limits(plan: Plan, out: Preflight, kind: str, name: str, src: str,
                limits: QueueLimits) -> None:
    """One user's jobs at once in the queue: `run` keeps within it (its --max-jobs
    default), and what that means for the study's wall time."""
    most = limits.max_jobs or limits.max_running
    if not most:
        return
    if out.job_limit is None or most < out.job_limit[0]:
        out.job_limit = (most, f"{kind} {name}'s per-user limit ({src})")
    runs, running = len(plan.runs), limits.max_running or most
    if runs <= running:
        return
    wall = walltime_seconds(plan.study.job.walltime)
    rounds = -(-runs // running)
    out.add(WARNING, f"{kind} {name} lets one user have {most} job(s) in it at once"
            + (f", {running} running" if limits.max_running and limits.max_running < most
               else "") + f" ({src}): `run` keeps at most {most} of the study's {runs} jobs "
            f"there (its --max-jobs default), so they run {running} at a time: at least "
            f"{rounds} × {plan.study.job.walltime} = {hms(rounds * wall)} of walltime-long "
            "runs one after another, plus the queue waits; pack them into one allocation "
            "(`run --pack`: one job, one queue wait), use a queue that takes more jobs per "
            "user, or run fewer (--only)")


def queue_name(plan: Plan, facts: Facts) -> tuple[str | None, str]:
    """(the queue the jobs go to, where it is named): spec, profile, scheduler default."""
    key = plan.scheduler.queue_key
    if key is None:
        return None, ""
    named = getattr(plan.study.job, key)
    if named:
        return named, plan.study.line_of(("job", key))
    if plan.system.scheduler_options.queue:
        return (plan.system.scheduler_options.queue,
                f"profile {plan.system.name}: scheduler_options.queue")
    return facts.queues.default, f"the default {key} of {plan.system.scheduler}"


def profile_limits(plan: Plan, name: str) -> QueueLimits | None:
    q = plan.system.scheduler_options.queues.get(name)
    if q is None:
        return None
    seconds = {k: walltime_seconds(v) if v else None
               for k, v in (("min", q.min_walltime), ("max", q.max_walltime))}
    source = f"profile {plan.system.name}, from the site's docs"
    return QueueLimits(
        name, source, q.min_nodes, q.max_nodes,
        min_walltime_s=seconds["min"], max_walltime_s=seconds["max"],
        walltime_by_nodes=tuple((n, walltime_seconds(t))
                                for n, t in sorted(q.walltime_by_nodes.items())),
        max_jobs=q.max_jobs_per_user, max_running=q.max_running_per_user,
        jobs_source=f"{source}: {q.limits_source}" if q.limits_source else None)


def profile_queue_limits(plan: Plan) -> QueueLimits | None:
    """The limits of the study's queue as its profile documents them (None: unknown)."""
    key = plan.scheduler.queue_key
    name = (getattr(plan.study.job, key) if key else None) or plan.system.scheduler_options.queue
    return profile_limits(plan, name) if name else None


def profile_job_limit(plan: Plan) -> tuple[int, str] | None:
    """The per-user job limit of the study's queue as its profile documents it (what
    `run --max-jobs` defaults to when no preflight asked the scheduler)."""
    key = plan.scheduler.queue_key
    name = (getattr(plan.study.job, key) if key else None) or plan.system.scheduler_options.queue
    limits = profile_limits(plan, name) if name else None
    if limits is None or not limits.max_jobs:
        return None
    return limits.max_jobs, (f"queue {name}'s per-user limit "
                             f"({limits.jobs_source or limits.source})")
