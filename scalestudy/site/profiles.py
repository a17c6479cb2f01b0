"""Site profiles: a machine described as data (scheduler, launcher, node shape, environment).

Profiles ship as YAML files in site/systems/; a spec may also name a profile file by
path (`system: ./mysite.yaml`). The scheduler named there is one of site.schedulers.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from scalestudy.core.errors import SpecError, note_once, suggest, validation_messages
from scalestudy.core.spec import EnvName, Name, walltime_seconds
from scalestudy.site import launchers, schedulers
from scalestudy.site.containers import names as runtime_names

SYSTEMS = "scalestudy.site.systems"


def _one_of(what: str, names: Callable[[], list[str]]) -> AfterValidator:
    """A name that must be in a registry (`names`), which the error lists."""
    def check(name: str) -> str:
        if name not in names():
            raise ValueError(f"unknown {what} {name!r}; valid {what}s: {', '.join(names())}")
        return name
    return AfterValidator(check)


def _listed(names: Callable[[], list[str]], *more: None) -> Callable[[dict[str, Any]], None]:
    """The JSON Schema of such a name lists the registry's names (when it is made), and
    `more` (null, where the field may be null)."""
    return lambda schema: schema.update(enum=[*names(), *more])


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    # Where code builds a model itself (`SchedulerOptions(...)`), its fields give their
    # defaults as `Field(default=...)`: a type checker reads only that keyword.


def _walltime(value: str | None) -> str | None:
    if value is not None:
        walltime_seconds(value)
    return value


Walltime = Annotated[str, AfterValidator(_walltime)]


class QueueLimit(_Data):
    """What one queue (PBS), partition or QOS (Slurm) accepts, as the site documents it:
    preflight's fallback where the scheduler cannot be asked."""

    min_nodes: int = Field(1, ge=1, description="fewest nodes a job may ask for")
    max_nodes: int | None = Field(None, ge=1, description="most nodes a job may ask for")
    min_walltime: Walltime | None = Field(None, description="shortest walltime, [D-]HH:MM:SS")
    max_walltime: Walltime | None = Field(None, description="longest walltime, [D-]HH:MM:SS")
    walltime_by_nodes: dict[Annotated[int, Field(ge=1)], Walltime] = Field(
        default_factory=dict, description="longest walltime of a job of up to N nodes, where "
        "it depends on the size (a routing queue's execution queues)")
    max_jobs_per_user: int | None = Field(
        None, ge=1, description="most jobs one user may have in it at once, running or "
        "waiting (`run --max-jobs` defaults to it)")
    max_running_per_user: int | None = Field(
        None, ge=1, description="most of them running at once")
    limits_source: str = Field("", description="where the job limits come from")


class SchedulerOptions(_Data):
    """How the site's scheduler wants a job asked for (defaults; a spec's `job:` wins).

    The fields here hold for every scheduler. Beside them go the profile's scheduler's
    own keys: defaults of its job options (the spec's `job.<scheduler>:` keys, e.g.
    Slurm's `qos`, PBS's `place`) and its site settings (`site_options`, e.g. Slurm's
    `qos_names`), checked against that scheduler's models (`scheduler_own`)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    queue: str | None = Field(
        default=None, description="default queue (PBS -q) or partition (Slurm -p)")
    submit_args: list[str] | None = Field(
        default=None, description="extra arguments of the submit command; null: the scheduler's "
        "default (PBS: -f, qsub in the foreground; Torque-style qsub needs [])")
    account_required: bool = Field(default=False, description="jobs must name an account (-A)")
    max_walltime: str | None = Field(default=None, description="longest walltime, [D-]HH:MM:SS")
    extra: list[str] = Field(
        default_factory=list, description="more directive lines, without the #SBATCH/#PBS"
    )
    queues: dict[str, QueueLimit] = Field(
        default_factory=dict, description="limits of each queue, partition or QOS by name, "
        "from the site's docs (preflight asks the scheduler first)")


_OWN: dict[int, tuple[SchedulerOptions, str, schedulers.Options, schedulers.Options]] = {}


def _owners(key: str) -> list[str]:
    """The registered schedulers whose own options or site settings have `key`."""
    return [c.name for c in schedulers.classes()
            if key in c.options.model_fields or key in c.site_options.model_fields]


def unused_keys(options: SchedulerOptions, scheduler: str) -> dict[str, list[str]]:
    """Keys of `options` that are not `scheduler`'s but another scheduler's, with their
    owners: a profile moved between schedulers keeps loading, and is told (`load_system`)."""
    sched = schedulers.get(scheduler)
    mine = set(sched.options.model_fields) | set(sched.site_options.model_fields)
    return {key: owners for key in options.model_extra or {}
            if key not in mine and (owners := _owners(key))}


def scheduler_own(options: SchedulerOptions, scheduler: str
                  ) -> tuple[schedulers.Options, schedulers.Options]:
    """The profile's defaults of `scheduler`'s own job options, and its site settings of
    that scheduler, from the keys of `options` beside the shared ones (another
    scheduler's are left unused); ValueError naming the key when one is no scheduler's
    or its value is wrong."""
    held = _OWN.get(id(options))
    if held is not None and held[0] is options and held[1] == scheduler:
        return held[2], held[3]
    sched = schedulers.get(scheduler)
    given = dict(options.model_extra or {})
    job_keys = [k for k in sched.options.model_fields if k != sched.queue_key]
    site_keys = list(sched.site_options.model_fields)
    unused = unused_keys(options, scheduler)
    for key in given:
        if key == sched.queue_key:
            raise ValueError(f"{key}: the profile's default {key} is `queue:`; rename the key")
        if key not in job_keys and key not in site_keys and key not in unused:
            known = {k for c in schedulers.classes() for k in
                     [*c.options.model_fields, *c.site_options.model_fields] if k != c.queue_key}
            known |= {*SchedulerOptions.model_fields}
            raise ValueError(f"{key}: not a setting of scheduler {scheduler} nor of another "
                             f"one: {suggest(key, sorted(known))}")
    made = []
    for model, keys in ((sched.options, job_keys), (sched.site_options, site_keys)):
        try:
            made.append(model.model_validate({k: v for k, v in given.items() if k in keys}))
        except ValidationError as exc:
            raise ValueError("; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                for e in exc.errors(include_url=False))) from None
    if len(_OWN) > 64:
        _OWN.clear()
    _OWN[id(options)] = (options, scheduler, made[0], made[1])
    return made[0], made[1]


class LauncherOptions(_Data):
    """How the site starts ranks: binding and launcher flags."""

    cpu_bind: str | None = Field(default=None, description="srun --cpu-bind / mpiexec --cpu-bind / "
                                 "mpirun --bind-to / flux run -o cpu-affinity value")
    depth: int | None = Field(default=None, ge=1, description="mpiexec --depth: cores per rank")
    gpu_bind: str | None = Field(default=None, description="srun --gpu-bind value (e.g. closest); "
                                 "flux run -o gpu-affinity value (e.g. per-task)")
    gpus_per_task: int | None = Field(
        default=None, ge=1, description="srun / flux run --gpus-per-task")
    mpi: str | None = Field(default=None, description="srun --mpi plugin (e.g. pmix)")
    gpu_wrapper: str | None = Field(
        default=None, description="per-rank wrapper that sets the rank's visible GPU (ALCF style)"
    )
    extra_args: list[str] = Field(default_factory=list, description="more launcher arguments")
    torchrun_via: Annotated[str, _one_of("starter", launchers.starters)] | None = Field(
        default=None, json_schema_extra=_listed(launchers.starters, None),
        description="launcher: torchrun: what starts one torchrun agent per node")


class ContainerSite(_Data):
    """What a container runtime needs on this site: the options and binds every
    container takes (GPU flags, the fabric and MPI libraries, the launcher's daemon
    sockets) and shell lines before the launch (APPTAINERENV_* exports, module loads)."""

    options: list[str] = Field(default_factory=list,
                               description="options of the runtime's launch command")
    binds: list[str] = Field(default_factory=list, description="host directories to bind, "
                             "SRC[:DST]")
    setup: list[str] = Field(default_factory=list,
                             description="shell lines before the launch (copied as written)")
    source: str = Field("", description="where these settings come from")


class SystemProfile(_Data):
    """One machine: how jobs are queued, how ranks start, what a node has."""

    name: Name = Field(description="profile name used in `system:`")
    description: str = Field("", description="one line about the machine")
    docs: list[str] = Field(default_factory=list,
                            description="the user-guide pages the facts come from")
    scheduler: Annotated[str, _one_of("scheduler", schedulers.names)] = Field(
        description="how a job is queued", json_schema_extra=_listed(schedulers.names))
    launcher: Annotated[str, _one_of("launcher", launchers.names)] = Field(
        description="how ranks are started", json_schema_extra=_listed(launchers.names))
    gpus_per_node: int = Field(0, ge=0, description="GPUs per node (0: CPU ranks)")
    gpu_api: Literal["cuda", "xpu"] = Field(
        "cuda", description="how PyTorch reaches the GPUs: cuda (NVIDIA, and AMD through "
        "ROCm's torch.cuda) or xpu (Intel GPUs); the bundled benchmark runs on cuda")
    cores_per_node: int | None = Field(None, ge=1, description="CPU cores; null: detect")
    threads_per_rank: int | None = Field(
        None, ge=1, description="OMP_NUM_THREADS per rank; null: the node's cores / its ranks"
    )
    max_nodes: int = Field(1, ge=1, description="the most nodes a run may ask for")
    default_ranks_per_node: int | None = Field(
        None, ge=1, description="ranks per node of a grid that names none; null: "
        "gpus_per_node on a GPU system, 1 on a CPU one")
    gpu_binding: str = Field("", description="how each rank gets its GPU, in words")
    master_addr_suffix: str = Field(
        "", pattern=r"^[A-Za-z0-9.-]*$",
        description="appended to the first node's name for the rendezvous address "
        "(JUWELS: `i`, the InfiniBand name)",
    )
    python: str | None = Field(
        None, description="the Python on compute nodes; null: the one running scalestudy"
    )
    shared_filesystems: list[str] = Field(
        default_factory=list, description="path prefixes the login and compute nodes share "
        "(preflight checks that the jobs' Python and its venv's base are under one)")
    local_storage: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9_./${}-]+$",
        description="node-local storage `data_stage: local` copies a rank's shards to "
        "(exported as SCALESTUDY_LOCAL_STORAGE; $VARIABLES expand on the node); null: the "
        "workload uses $TMPDIR, else /tmp")
    helpers: dict[str, str] = Field(
        default_factory=dict, description="commands the job script calls that the site does "
        "not install everywhere, each with where to get it (preflight looks for them)")
    peak_tflops: dict[Literal["fp32", "bf16", "fp16"], Annotated[
        float, Field(gt=0, allow_inf_nan=False)] | Literal["measure"]] = Field(
        default_factory=dict,
        description="dense peak TFLOP/s of one GPU (one rank's device) per precision, the "
        "denominator of MFU; `measure`: time a large matmul on the rank's device instead")
    peak_source: str = Field("", description="where the peak figures come from")
    scheduler_options: SchedulerOptions = Field(default_factory=SchedulerOptions)
    launcher_options: LauncherOptions = Field(default_factory=LauncherOptions)
    env: dict[EnvName, str] = Field(default_factory=dict, description="default environment")
    setup: list[str] = Field(default_factory=list, description="shell lines before the launch")
    containers: dict[Annotated[str, _one_of("container runtime", runtime_names)],
                     ContainerSite] = Field(
        default_factory=dict, description="per container runtime (apptainer, charliecloud, "
        "podman-hpc, pyxis, shifter, singularity), what its containers need here")

    @field_validator("scheduler_options")
    @classmethod
    def _scheduler_options_are_its_own(cls, value: SchedulerOptions,
                                       info: ValidationInfo) -> SchedulerOptions:
        """Each key of scheduler_options beside the shared ones is the scheduler's own."""
        if "scheduler" in info.data:  # else its own error says why
            scheduler_own(value, info.data["scheduler"])
        return value

    @model_validator(mode="after")
    def _mpiexec_has_a_host_file(self) -> SystemProfile:
        """mpiexec (PALS, MPICH) is given the job's host file, which only a scheduler that
        writes one has (PBS's $PBS_NODEFILE); elsewhere it would die at launch."""
        starts = {self.launcher, self.launcher_options.torchrun_via}
        if "mpiexec" in starts and schedulers.get(self.scheduler).in_job.hostfile is None:
            raise ValueError(
                f"launcher mpiexec reads the job's host file, and scheduler "
                f"{self.scheduler} writes none: use launcher srun or mpirun on Slurm, "
                "flux on Flux (mpiexec is for PBS Pro, e.g. Polaris and Aurora)")
        return self

    @model_validator(mode="after")
    def _scheduler_starts_its_launcher(self) -> SystemProfile:
        """The launcher (or what starts torchrun's agents) is one the scheduler's jobs
        can start ranks with: srun outside Slurm, or flux outside Flux, dies at launch."""
        scheduler = schedulers.get(self.scheduler)
        start = (self.launcher_options.torchrun_via if self.launcher == "torchrun"
                 else self.launcher)
        if (scheduler.launchers is not None and start in launchers.STARTERS
                and start not in scheduler.launchers):
            usable = " or ".join(sorted(scheduler.launchers))
            raise ValueError(f"launcher {start} does not start ranks in scheduler "
                             f"{self.scheduler}'s jobs: use {usable}")
        return self


def available() -> list[str]:
    """Names of the profiles shipped with scalestudy."""
    return sorted(p.name.removesuffix(".yaml") for p in files(SYSTEMS).iterdir()
                  if p.name.endswith(".yaml"))


def load_system(name: str) -> SystemProfile:
    """A shipped profile by name, or a profile file by path (`*.yaml`)."""
    if name.endswith((".yaml", ".yml")):
        path = Path(name)
        if not path.is_file():
            raise SpecError(f"system: profile file {name} not found")
        text, source = path.read_text(encoding="utf-8"), str(path)
    elif name in available():
        resource = files(SYSTEMS) / f"{name}.yaml"
        text, source = resource.read_text(encoding="utf-8"), f"profile {name}"
    else:
        raise SpecError(
            f"system: unknown system {name!r}; valid systems: {', '.join(available())} "
            "(or the path of a profile .yaml)"
        )
    try:
        system = SystemProfile.model_validate(yaml.safe_load(text))
    except ValidationError as exc:
        raise SpecError("\n".join(validation_messages(exc, SystemProfile, source, {}))) from None
    for key, owners in unused_keys(system.scheduler_options, system.scheduler).items():
        note_once(f"note: {source}: scheduler_options.{key} is not used by scheduler "
                  f"{system.scheduler} (it is {' and '.join(owners)}'s): remove it")
    return system
