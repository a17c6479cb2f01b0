"""A study's queue (partition, QOS) held against its limits: the scheduler's answer
or, where there is none, the limits its profile documents (`offline`: what validate,
plan and run --dry-run check with no scheduler at hand). Pure: one problem a line."""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Sequence

from scalestudy.core.grid import Run
from scalestudy.core.spec import walltime_seconds
from scalestudy.site import joboptions
from scalestudy.site.plan import Plan
from scalestudy.site.queues import QueueLimits, hms
from scalestudy.site.routing import documented, named_queues, queue_for
from scalestudy.site.verdict import ERROR, WARNING, Facts, Preflight


def offline(plan: Plan) -> Preflight:
    """The study held against its profile's queue limits alone, no scheduler asked (what
    `validate`, `plan` and `run --dry-run` check, on a laptop too): the queue's name
    (with a did-you-mean), node counts, walltimes and one user's jobs at once."""
    out = Preflight()
    if plan.scheduler.queued:
        profile_queues(plan, Facts("", ""), out)
        check_pools(plan, Facts("", ""), out)
    return out


def profile_queues(plan: Plan, facts: Facts, out: Preflight) -> None:
    """Each queue the study's runs go to held against the limits its profile documents."""
    key = plan.scheduler.queue_key
    if key is None:
        return
    known = {n: lim for n in plan.system.scheduler_options.queues
             if (lim := documented(plan.system, n))}
    for name, where, runs in routed(plan, facts):
        if not name:
            continue
        limits = known.get(name)
        if limits is not None:
            out.queue_limits = out.queue_limits or limits
            check_limits(plan, facts, out, key, key, where, limits, known, runs)
            continue
        if not known:
            continue
        listed = ", ".join(sorted(known))
        close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.75)
        if close:
            out.add(ERROR, f"{where}: {key} {name} is not one of profile "
                    f"{plan.system.name}'s {key}s ({listed}): did you mean {close[0]}? "
                    f"set {joboptions.label(plan.study, plan.scheduler, key)}: {close[0]}")
        else:
            out.add(WARNING, f"{where}: {key} {name} is not among profile "
                    f"{plan.system.name}'s {key}s ({listed}), so its limits are not "
                    "checked here; `validate --preflight` asks the scheduler")


def routed(plan: Plan, facts: Facts) -> list[tuple[str | None, str, list[Run]]]:
    """(queue, where it is named, the runs that go there) for every queue the study's
    jobs go to: as the spec names it, the profile's default, the profile's queue that
    takes what the default does not, or the scheduler's default."""
    key = plan.scheduler.queue_key
    if key is None:
        return []
    groups: dict[str | None, list[Run]] = {}
    for run in plan.runs:
        groups.setdefault(queue_for(plan.study, plan.system, run), []).append(run)
    named = named_queues(plan.study, plan.scheduler)
    default = plan.system.scheduler_options.queue
    out = []
    for name, runs in groups.items():
        if name is None:
            out.append((facts.queues.default, f"the default {key} of {plan.system.scheduler}",
                        runs))
        elif named:
            out.append((name, joboptions.where(plan.study, plan.scheduler, key), runs))
        elif name == default:
            out.append((name, f"profile {plan.system.name}: scheduler_options.queue", runs))
        else:
            out.append((name, f"profile {plan.system.name}: scheduler_options.queues (the "
                        f"runs its default {key} {default} does not take)", runs))
    return out


def check_pools(plan: Plan, facts: Facts, out: Preflight) -> None:
    """The pool the study's limited option names (Slurm's QOS) against the scheduler's
    answer, else the profile's documented limits."""
    if plan.scheduler.limited_option is None:
        return
    key, word = plan.scheduler.limited_option
    given = joboptions.spec_value(plan.study, plan.scheduler, key)
    pool = given or getattr(joboptions.profile_defaults(plan.system), key, None)
    if not pool:
        return
    where = (joboptions.where(plan.study, plan.scheduler, key) if given
             else f"profile {plan.system.name}: scheduler_options.{key}")
    if facts.queues.pools and not facts.missing:
        limits = facts.queues.pools.get(pool.lower())
        if limits is None:
            source = next(iter(facts.queues.pools.values())).source
            out.add(ERROR, f"{where}: {word} {pool} does not exist ({source} lists "
                    f"{', '.join(sorted(facts.queues.pools))}): set "
                    f"{joboptions.label(plan.study, plan.scheduler, key)} to one of them")
            return
    else:
        limits = profile_limits(plan, pool)
    if limits is not None:
        check_limits(plan, facts, out, word, key, where, limits, {})


def answer_source(facts: Facts, kind: str) -> str:
    """Which command listed the queues (the first answer's source), else `kind`."""
    return next(iter(facts.queues.queues.values())).source if facts.queues.queues else kind


def check_limits(plan: Plan, facts: Facts, out: Preflight, kind: str, key: str,
                 where: str, limits: QueueLimits, known: dict[str, QueueLimits],
                 runs: Sequence[Run] | None = None) -> None:
    """The runs' (those that go there; every run by default) node counts and walltime
    against one queue's (or QOS's) limits."""
    study, name, src = plan.study, limits.name, limits.source
    runs = plan.runs if runs is None else runs
    wall = walltime_seconds(study.job.walltime)
    counts = sorted({r.nodes for r in runs})
    nodes_at = study.line_of(("grid", "nodes"))
    before = len(out.problems)

    def others(n: int, pack: bool = True) -> str:
        fits = sorted(q for q, lim in known.items() if q != name and lim.takes(n, wall))
        verb = "they take" if len(fits) > 1 else "it takes"
        packs = ("pack the study (`run --pack`: each allocation goes to a queue that "
                 "takes its size), or " if pack and key == "queue" else "")
        cover = covering(plan, known) if documented(plan.system, name) else None
        if cover:
            return f"{suggest(plan, key, cover)}, or {packs}"
        if not fits:
            return ""
        return (f"run those node counts as a study of their own with "
                f"{joboptions.label(study, plan.scheduler, key)}: "
                f"{' or '.join(fits)} ({verb} {n}-node jobs of {study.job.walltime}), or "
                f"{packs}")

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
            refused = sum(1 for r in runs if r.nodes in bad)
            out.add(ERROR, f"{nodes_at}: {', '.join(map(str, bad))} node(s): {kind} {name} "
                    f"takes {word} {bound} nodes ({src}), so {refused} run(s) would be refused "
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
    pool = plan.scheduler.limited_option
    for what, allowed, value in (
            ("account", limits.allow_accounts, study.job.account),
            *([(pool[1], limits.allow_pools,
                joboptions.spec_value(study, plan.scheduler, pool[0]))] if pool else [])):
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
    _job_limits(plan, out, kind, name, limits.jobs_source or src, limits, len(runs))
    if len(out.problems) == before:
        out.checked.append(f"{kind} {name} takes {limits.describe()}"
                           + (f" ({src})" if src.startswith("profile ") else ""))


def covering(plan: Plan, known: dict[str, QueueLimits]) -> list[str] | None:
    """The fewest of the profile's documented queues that together take every run of the
    study (its node counts at its walltime), in the order to name them: those the spec
    names first, then the profile's order. Of several such sets, the one that keeps most
    of the queues already named. The set is checked as routing would use it (each run to
    the first queue that takes it) before it is offered; None when no set takes them all.
    A search over sets, not one queue swapped at a time: swapping one at a time can go
    round in a circle ([debug] -> [debug, debug-scaling] -> [debug, prod] -> ...)."""
    key = plan.scheduler.queue_key
    if key is None or not known:
        return None
    wall = walltime_seconds(plan.study.job.walltime)
    counts = sorted({r.nodes for r in plan.runs})
    named = named_queues(plan.study, plan.scheduler)
    order = [q for q in named if q in known] + [q for q in known if q not in named]
    for size in range(1, min(len(order), 5) + 1):
        sets = [c for c in itertools.combinations(order, size)
                if all(any(known[q].takes(n, wall) for q in c) for n in counts)]
        for chosen in sorted(sets, key=lambda c: -len(set(c) & set(named))):
            if list(chosen) != named and _routes_all(plan, key, list(chosen)):
                return list(chosen)
    return None


def _routes_all(plan: Plan, key: str, names: list[str]) -> bool:
    """Whether, with the queue option set to `names`, every run goes to a queue whose
    documented limits take it (the check each suggestion passes before it is offered)."""
    value: str | list[str] = names[0] if len(names) == 1 else names
    study = joboptions.with_value(plan.study, plan.scheduler, key, value)
    wall = walltime_seconds(study.job.walltime)
    by_size = {run.nodes: run for run in plan.runs}  # routing reads the node count alone
    for run in by_size.values():
        chosen = queue_for(study, plan.system, run)
        limits = documented(plan.system, chosen) if chosen else None
        if limits is None or not limits.takes(run.nodes, wall):
            return False
    return True


def suggest(plan: Plan, key: str, cover: list[str]) -> str:
    """The words of a suggestion to name `cover` (see `covering`)."""
    named = named_queues(plan.study, plan.scheduler)
    counts = sorted({r.nodes for r in plan.runs})
    sizes = f"{counts[0]}-{counts[-1]}" if len(counts) > 1 else str(counts[0])
    value = cover[0] if len(cover) == 1 else f"[{', '.join(cover)}]"
    added = [q for q in cover if q not in named]
    dropped = [q for q in named if q not in cover]
    if not dropped:
        verb = "name " + " and ".join(added) + " too"
    elif not added:
        verb = "leave out " + " and ".join(dropped)
    else:
        verb = "name " + " and ".join(added) + " instead of " + " and ".join(dropped)
    takes = "it takes" if len(cover) == 1 else "together they take"
    option = joboptions.label(plan.study, plan.scheduler, key)
    return (f"{verb}, e.g. {option}: {value} ({takes} every run of the study, {sizes}-node "
            f"jobs of {plan.study.job.walltime}; each run goes to the first that takes it)")


def _job_limits(plan: Plan, out: Preflight, kind: str, name: str, src: str,
                limits: QueueLimits, jobs: int) -> None:
    """One user's jobs at once in the queue: `run` keeps within it (its --max-jobs
    default), and what that means for the study's wall time."""
    most = limits.max_jobs or limits.max_running
    if not most:
        return
    said = (most, f"{kind} {name}'s per-user limit ({src})")
    out.job_limits[name] = said
    if out.job_limit is None or most < out.job_limit[0]:
        out.job_limit = said
    runs, running = jobs, limits.max_running or most
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


def profile_limits(plan: Plan, name: str) -> QueueLimits | None:
    """A queue's (or QOS's) limits as the study's profile documents them."""
    return documented(plan.system, name)


def profile_queue_limits(plan: Plan) -> QueueLimits | None:
    """The limits of the study's queue as its profile documents them (None: unknown);
    of several, the first named (or the profile's default)."""
    key = plan.scheduler.queue_key
    names = named_queues(plan.study, plan.scheduler) or [plan.system.scheduler_options.queue or ""]
    return documented(plan.system, names[0]) if key and names[0] else None


def profile_job_limits(plan: Plan) -> dict[str, tuple[int, str]]:
    """The per-user job limit of each queue the study's runs go to, as its profile
    documents it (queue -> (limit, its source)); queues without one are left out."""
    out = {}
    for name, _, _ in routed(plan, Facts("", "")):
        lim = documented(plan.system, name) if name else None
        if name and lim is not None and lim.max_jobs:
            out[name] = (lim.max_jobs, f"queue {lim.name}'s per-user limit "
                                       f"({lim.jobs_source or lim.source})")
    return out


def profile_job_limit(plan: Plan) -> tuple[int, str] | None:
    """The smallest documented per-user job limit among the queues the study's runs go
    to (what the preflight reports as the study's)."""
    limits = profile_job_limits(plan)
    return min(limits.values(), key=lambda lim: lim[0]) if limits else None
