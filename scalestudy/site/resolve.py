"""The values a study takes from its spec, its system's profile or scalestudy's defaults,
each with where it came from; and the GPUs its runs leave idle. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scalestudy.core.grid import DEFAULT_BATCH, Run
from scalestudy.core.spec import Job, Study, walltime_seconds
from scalestudy.site import joboptions, schedulers
from scalestudy.site.profiles import SystemProfile

SPEC, PROFILE, DEFAULT, UNSET = "spec", "profile", "default", "unset"


@dataclass(frozen=True)
class Value:
    """One value of a study and where it came from (spec, profile, default, unset)."""

    key: str
    value: Any
    origin: str
    where: str

    def as_dict(self) -> dict[str, object]:
        """What `plan --json` lists under `values`."""
        return {"value": self.value, "from": self.origin, "where": self.where}


def ranks_per_node(study: Study, system: SystemProfile) -> tuple[list[int], str, str]:
    """(the ranks-per-node axis, its origin, where): the spec's, else the profile's
    `default_ranks_per_node`, else its GPUs per node, else 1."""
    if study.grid.ranks_per_node:
        return list(study.grid.ranks_per_node), SPEC, study.line_of(("grid", "ranks_per_node"))
    if system.default_ranks_per_node:
        return ([system.default_ranks_per_node], PROFILE,
                f"profile {system.name}: default_ranks_per_node")
    if system.gpus_per_node > 0:
        return [system.gpus_per_node], PROFILE, f"profile {system.name}: gpus_per_node"
    return [1], DEFAULT, "scalestudy's default for a CPU system (one rank per node)"


def _axis(study: Study, key: str, default: Any) -> Value:
    """A grid axis and where it came from: the spec's line only where the spec sets it
    (a grid model's own default is scalestudy's, not a line of the spec)."""
    values = getattr(study.grid, key)
    if values and key in study.grid.model_fields_set:
        return Value(f"grid.{key}", values, SPEC, study.line_of(("grid", key)))
    return Value(f"grid.{key}", values or default, DEFAULT, "scalestudy's default")


def _job(study: Study, key: str, fallback: Any, origin: str, where: str) -> Value:
    if key in study.job.model_fields_set and getattr(study.job, key) is not None:
        return Value(f"job.{key}", getattr(study.job, key), SPEC, study.line_of(("job", key)))
    return Value(f"job.{key}", fallback, origin, where)


def values(study: Study, system: SystemProfile) -> list[Value]:
    """ranks_per_node, nodes, the batch axis, walltime, account, queue (and the
    scheduler's other limited options, Slurm's QOS): what each is and where it came
    from."""
    scheduler = schedulers.get(system.scheduler)
    ranks, origin, where = ranks_per_node(study, system)
    batch_key = "global_batch" if study.scaling == "strong" else "batch_size"
    out = [Value("grid.ranks_per_node", ranks, origin, where),
           _axis(study, "nodes", [1]), _axis(study, batch_key, [DEFAULT_BATCH]),
           _job(study, "walltime", Job.model_fields["walltime"].default, DEFAULT,
                "scalestudy's default")]
    if not scheduler.queued:
        return out
    defaults = joboptions.profile_defaults(system)
    out.append(_job(study, "account", None, UNSET,
                    "not set: the scheduler charges your default account"))
    limited = scheduler.limited_option[0] if scheduler.limited_option else None
    for key in (scheduler.queue_key, limited):
        if key is None or key not in scheduler.options.model_fields:
            continue
        profiled = (system.scheduler_options.queue if key == scheduler.queue_key
                    else getattr(defaults, key))
        name = f"job.{scheduler.name}.{key}"
        given = joboptions.spec_value(study, scheduler, key)
        label = "queue" if key == scheduler.queue_key else key
        if given is not None:
            out.append(Value(name, given, SPEC, joboptions.where(study, scheduler, key)))
        elif profiled:
            out.append(Value(name, profiled, PROFILE,
                             f"profile {system.name}: scheduler_options.{label}"))
        else:
            out.append(Value(name, None, UNSET, "not set: the scheduler's default"))
    return out


@dataclass(frozen=True)
class IdleGPUs:
    """Runs whose ranks per node leave GPUs of their nodes idle, and what that costs."""

    ranks_per_node: int
    gpus_per_node: int
    runs: int
    nodes: tuple[int, ...]
    node_hours: float  # idle GPUs / GPUs per node x nodes x walltime, summed


def idle_gpus(system: SystemProfile, runs: Sequence[Run], walltime: str) -> list[IdleGPUs]:
    """Per ranks-per-node value below the system's GPUs per node: the runs that leave
    GPUs idle and the node-hours those idle GPUs hold (at most; walltime-long runs)."""
    gpus = system.gpus_per_node
    hours = walltime_seconds(walltime) / 3600
    out = []
    for rpn in sorted({r.ranks_per_node for r in runs if 0 < r.ranks_per_node < gpus}):
        these = [r for r in runs if r.ranks_per_node == rpn]
        wasted = sum((gpus - rpn) / gpus * r.nodes * hours for r in these)
        out.append(IdleGPUs(rpn, gpus, len(these), tuple(sorted({r.nodes for r in these})),
                            wasted))
    return out


def idle_gpu_warnings(study: Study, system: SystemProfile, runs: Sequence[Run]) -> list[str]:
    """One line per ranks-per-node value that leaves GPUs idle: where it comes from, what
    it wastes, how to use every GPU (it may be intended: a warning, not an error)."""
    _, origin, where = ranks_per_node(study, system)
    lines = []
    for idle in idle_gpus(system, runs, study.job.walltime):
        nodes = ", ".join(map(str, idle.nodes))
        lines.append(
            f"{where}: {idle.ranks_per_node} rank(s) per node leave "
            f"{idle.gpus_per_node - idle.ranks_per_node} of the {idle.gpus_per_node} GPUs of "
            f"each {system.name} node idle in {idle.runs} run(s) (on {nodes} node(s)): up to "
            f"{round(idle.node_hours, 3):g} node-hours of idle GPUs (idle GPUs / GPUs per "
            f"node x nodes x walltime {study.job.walltime}, summed); to use every GPU set "
            f"ranks_per_node {idle.gpus_per_node}"
            + (" (or leave grid.ranks_per_node out: that is the profile's default)"
               if origin == SPEC and not system.default_ranks_per_node else "")
            + "; keep it if the idle GPUs are meant")
    return lines
