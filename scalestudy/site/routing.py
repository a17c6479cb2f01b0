"""Which queue (or partition) each run's job goes to: the one the spec names; of several
named, the first whose documented limits take the run's node count and walltime; with
none named, the profile's default queue, or where its limits do not take the run, the
first of the profile's other queues that does (a 1-to-16-node Polaris study: the small
runs in debug-scaling, the 16-node runs in prod, one spec)."""

from __future__ import annotations

from scalestudy.core.grid import Run
from scalestudy.core.spec import Study, walltime_seconds
from scalestudy.site import joboptions, schedulers
from scalestudy.site.profiles import SystemProfile
from scalestudy.site.queues import QueueLimits
from scalestudy.site.schedulers import Scheduler


def named_queues(study: Study, scheduler: Scheduler) -> list[str]:
    """The queues the spec names (`job.slurm.partition`, `job.pbs.queue`, ...: the
    scheduler's `queue_key` option): none, one, or several in the order to try them."""
    key = scheduler.queue_key
    value = joboptions.spec_value(study, scheduler, key) if key else None
    if not value:
        return []
    return list(value) if isinstance(value, list) else [value]


def documented(system: SystemProfile, name: str) -> QueueLimits | None:
    """A queue's limits as the profile documents them (None: it says nothing of it)."""
    q = system.scheduler_options.queues.get(name)
    if q is None:
        return None
    seconds = {k: walltime_seconds(v) if v else None
               for k, v in (("min", q.min_walltime), ("max", q.max_walltime))}
    source = f"profile {system.name}, from the site's docs"
    return QueueLimits(
        name, source, q.min_nodes, q.max_nodes,
        min_walltime_s=seconds["min"], max_walltime_s=seconds["max"],
        walltime_by_nodes=tuple((n, walltime_seconds(t))
                                for n, t in sorted(q.walltime_by_nodes.items())),
        max_jobs=q.max_jobs_per_user, max_running=q.max_running_per_user,
        jobs_source=f"{source}: {q.limits_source}" if q.limits_source else None)


def queue_for(study: Study, system: SystemProfile, run: Run) -> str | None:
    """The queue `run`'s job goes to (None: the scheduler's default)."""
    scheduler = schedulers.get(system.scheduler)
    if scheduler.queue_key is None:
        return None
    names, opts = named_queues(study, scheduler), system.scheduler_options
    if len(names) == 1:
        return names[0]
    if not names:  # the profile's default, unless its documented limits refuse the run
        if not opts.queue:
            return None
        site = joboptions.site_settings(system)
        names = [opts.queue, *(q for q in opts.queues if q != opts.queue
                               and scheduler.misnamed_queue(site, q) is None)]
    wall = walltime_seconds(study.job.walltime)
    for name in names:
        limits = documented(system, name)
        if limits is None or limits.takes(run.nodes, wall):
            return name
    return names[0]  # none takes it: the first, whose limits the checks then name
