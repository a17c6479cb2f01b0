"""A study bound to its system: load both, expand the grid, check what the system can
give. Pure: writes nothing, runs nothing."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from scalestudy.core.errors import Loc, SpecError
from scalestudy.core.grid import Run, expand, run_options
from scalestudy.core.load import load_study
from scalestudy.core.spec import Study, walltime_seconds
from scalestudy.site import containers, joboptions, resolve, schedulers
from scalestudy.site.profiles import SystemProfile, load_system
from scalestudy.site.routing import named_queues
from scalestudy.site.schedulers import Scheduler


@dataclass(frozen=True)
class Plan:
    """A validated study with its system, its scheduler and its runs."""

    study: Study
    system: SystemProfile
    runs: list[Run]
    results: Path
    #: The campaign this `scalestudy run` is (None: planning, a dry run, a report).
    campaign: str | None = None

    @property
    def scheduler(self) -> Scheduler:
        """The system's scheduler (local, slurm, pbs, ...)."""
        return schedulers.get(self.system.scheduler)

    @property
    def directory(self) -> Path:
        """results/<study>; study names are validated, so this never leaves results/."""
        return self.results / self.study.name

    def run_dir(self, run: Run) -> Path:
        """results/<study>/runs/<run-id>."""
        return self.directory / "runs" / run.run_id


def make_plan(path: str | Path, results: Path = Path("results")) -> Plan:
    """Load, validate and expand a study; check it against its system. Writes nothing."""
    study = load_study(path)
    try:
        name = study.system
        if name.endswith((".yaml", ".yml")) and study.source is not None:
            name = str(study.source.parent / name)
        system = load_system(name)
    except SpecError as exc:
        msg = str(exc).removeprefix("system: ")
        raise SpecError(f"{study.line_of(('system',))}: {msg}") from None
    # One name everywhere: a profile file's own `name` is the system (store, run.json,
    # report, site, --system filters); the file is where it was found.
    study = study.on_system(system.name, Path(name).resolve()
                            if name.endswith((".yaml", ".yml")) else None)
    runs = expand(study, resolve.ranks_per_node(study, system)[0])
    problems = joboptions.problems(study, system)
    try:
        problems += [f"{study.line_of(loc)}: {msg}" for loc, msg in system_checks(study, system)]
    except SpecError:  # a scheduler's options it could not read: `problems` says why
        if not problems:
            raise
    problems += _xpu_precision(study, system, runs)
    if problems:
        raise SpecError("\n".join(problems))
    joboptions.note_legacy(study, system)
    return Plan(study, system, runs, results)


def system_checks(study: Study, system: SystemProfile) -> list[tuple[Loc, str]]:
    """What the study asks that its system cannot give, each with the key to fix."""
    problems: list[tuple[Loc, str]] = []
    scheduler = schedulers.get(system.scheduler)
    too_big = sorted({n for n in study.grid.nodes if n > system.max_nodes})
    if too_big:
        problems.append((("grid", "nodes"), (
            f"{', '.join(map(str, too_big))} node(s) is more than system {system.name!r} "
            f"allows ({system.max_nodes}): lower grid.nodes")))
    problems += _gpu_sharing(study, system)
    if system.gpus_per_node and system.gpu_api == "xpu" and study.workload.bundled:
        problems += _xpu_checks(study, system)
    job = study.job
    if job.exclude_nodes and scheduler.exclusion is None:
        others = [c.name for c in schedulers.classes() if c.exclusion is not None]
        problems.append((("job", "exclude_nodes"), (
            f"system {system.name!r} uses {system.scheduler}, which has no exclude_nodes; "
            f"exclude_nodes is a {' or '.join(others)} option: remove it")))
    key = scheduler.queue_key
    site = joboptions.site_settings(system)
    for queue in named_queues(study, scheduler) if key else []:
        if (why := scheduler.misnamed_queue(site, queue)) is not None:
            written = joboptions.written(study, scheduler, str(key)) or ("job",)
            problems.append((written, f"on system {system.name!r}, {why}"))
    if scheduler.queued and system.scheduler_options.account_required and not job.account:
        problems.append((("job",), (
            f"system {system.name!r} requires an account: add `account: <project>` under job")))
    limit = system.scheduler_options.max_walltime
    if limit and walltime_seconds(job.walltime) > walltime_seconds(limit):
        problems.append((("job", "walltime"), (
            f"{job.walltime} is longer than system {system.name!r} allows ({limit}, the "
            f"longest of its documented queues): the jobs would be refused; lower "
            f"job.walltime to {limit} or less")))
    if job.submit == "submitit" and not scheduler.submitit:
        able = " or ".join(c.name for c in schedulers.classes() if c.submitit)
        problems.append((("job", "submit"), (
            f"submitit submits to {able} only; system {system.name!r} uses "
            f"{system.scheduler}: use `submit: native`")))
    if job.pack and (not scheduler.queued or job.submit == "submitit"):
        problems.append((("job", "pack"), (
            f"system {system.name!r} runs jobs on this host, one after the other: there is "
            "no allocation to pack into; remove `pack`" if not scheduler.queued else
            "packed runs are steps of scalestudy's own allocation script: use `submit: "
            "native` with `pack: true`")))
    elif job.pack and scheduler.packing is None:
        problems.append((("job", "pack"), (
            f"system {system.name!r} uses {system.scheduler}, which cannot run runs as "
            "steps of one allocation: remove `pack`")))
    if not scheduler.queued:
        problems += _local_backend_checks(study)
    problems += containers.checks(study, system)
    return problems


#: What the bundled benchmark runs on Intel GPUs (torch.xpu): the torch.distributed
#: backends, over xccl. Horovod and DeepSpeed builds for XPU are not what it starts.
XPU_BACKENDS = ("ddp", "fsdp")


def _xpu_checks(study: Study, system: SystemProfile) -> list[tuple[Loc, str]]:
    """The backends the bundled benchmark cannot run on Intel GPUs (torch.xpu, process
    group xccl): Horovod and DeepSpeed, said before any run starts."""
    problems: list[tuple[Loc, str]] = []
    for i, backend in enumerate(study.grid.backend):
        if backend not in XPU_BACKENDS:
            problems.append((("grid", "backend", i), (
                f"backend {backend} does not run on the Intel GPUs of system {system.name!r} "
                f"in the bundled benchmark (torch.xpu with xccl runs "
                f"{' and '.join(XPU_BACKENDS)}): use {' or '.join(XPU_BACKENDS)}, or "
                "run your own program with `workload: {kind: command, ...}`")))
    return problems


def _xpu_precision(study: Study, system: SystemProfile, runs: list[Run]) -> list[str]:
    """fp16 runs of the bundled benchmark on Intel GPUs (its loss scaling is CUDA's)."""
    if not (system.gpus_per_node and system.gpu_api == "xpu" and study.workload.bundled):
        return []
    fp16 = sum(1 for r in runs if run_options(study, r).get("precision") == "fp16")
    if not fp16:
        return []
    return [f"{study.line_of(('workload',))}: {fp16} run(s) in precision fp16, which the "
            f"bundled benchmark does not run on the Intel GPUs of system {system.name!r} (its "
            "loss scaling is CUDA's): use bf16 (autocast on xpu) or fp32"]


def _gpu_sharing(study: Study, system: SystemProfile) -> list[tuple[Loc, str]]:
    """More ranks per node than GPUs on a GPU system: two ranks on one GPU, which
    measures contention, not scaling; an error unless the spec says it is meant."""
    gpus = system.gpus_per_node
    ranks, origin, _ = resolve.ranks_per_node(study, system)
    over = sorted({r for r in ranks if r > gpus})
    if not gpus or not over or study.job.share_gpus:
        return []
    loc: Loc = ("grid", "ranks_per_node") if origin == resolve.SPEC else ("system",)
    most = max(over)
    return [(loc, (
        f"{', '.join(map(str, over))} rank(s) per node on system {system.name!r}, which has "
        f"{gpus} GPUs per node: up to {-(-most // gpus)} ranks would share each GPU, "
        f"which measures their contention, not scaling; set ranks_per_node to {gpus} or "
        "fewer (or leave it out: one rank per GPU), or set `job.share_gpus: true` if "
        "sharing GPUs is meant (e.g. with MPS)"))]


#: Optional backends: the module to import, and how to get it.
_OPTIONAL_BACKENDS = {
    "horovod": ("horovod.torch", "build it with `scripts/build-horovod` (see "
                "docs/benchmark.md, 'Optional backends')"),
    "deepspeed": ("deepspeed", "install it with `pip install 'scalestudy[deepspeed]'`"),
}


def backend_module(backend: str) -> tuple[str, str] | None:
    """(the module an optional backend imports, how to get it); None for a backend that
    needs nothing optional."""
    return _OPTIONAL_BACKENDS.get(backend)


def optional_backend_missing(backend: str) -> str | None:
    """How to get an optional backend this Python cannot import (None when it can, or
    when the backend needs nothing optional)."""
    module, hint = _OPTIONAL_BACKENDS.get(backend, (None, ""))
    if module is None:
        return None
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    return None if found else hint


def _local_backend_checks(study: Study) -> list[tuple[Loc, str]]:
    """On this machine the jobs run this Python: an optional backend it lacks is a
    mistake in the study, said before any run starts."""
    problems: list[tuple[Loc, str]] = []
    for i, backend in enumerate(study.grid.backend):
        hint = optional_backend_missing(backend)
        if hint is not None:
            package = _OPTIONAL_BACKENDS[backend][0].split(".")[0]
            problems.append((("grid", "backend", i), (
                f"backend {backend} needs {package}, which {sys.executable} "
                f"cannot import: {hint}, or remove {backend} from grid.backend")))
    return problems
