"""A study spec as Pydantic models: data only (loading from YAML is core.load).

The models hold data; the grid, rendering and execution live in the modules that
use them. Names that reach a shell script are validated here (identifier-like
patterns); free-text values are shell-quoted where they are rendered.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    StringConstraints,
    create_model,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from scalestudy.core import containers
from scalestudy.core.errors import Loc, where
from scalestudy.core.failures import Failures
from scalestudy.core.specbase import (
    OPTION_AXES,
    Model,
    OptionOverrides,
    PosInt,
    as_list,
    sections_apart,
    sections_inline,
    unique,
)
from scalestudy.core.target import Target

# The workload kinds live in core.workloads; importers of the spec find them here too.
from scalestudy.core.workloads import LR_FIELDS as LR_FIELDS
from scalestudy.core.workloads import CommandWorkload as CommandWorkload
from scalestudy.core.workloads import SyntheticWorkload, Workload
from scalestudy.workload.names import MODEL_NAMES as MODEL_NAMES
from scalestudy.workload.options import BACKENDS, OPTIONS

Name = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"),
    Field(description="letters, digits, `.`, `_`, `-`; starts with a letter or digit"),
]
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
#: A variable's name, or a prefix of names ending in `*` (job.record_env).
EnvPattern = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*\*?$")]
Scalar = str | int | float | bool


class _GridBase(Model):
    """Axes of the grid; the runs are their cross product (minus `exclude`)."""

    nodes: Annotated[list[PosInt], BeforeValidator(as_list), Field(min_length=1)] = Field(
        default=[1], description="node counts"
    )
    ranks_per_node: (
        Annotated[list[PosInt], BeforeValidator(as_list), Field(min_length=1)] | None) = (
        Field(default=None, description="ranks (GPUs) per node; default: the system's GPUs "
              "per node (its `default_ranks_per_node`, 1 on a CPU system)"))
    batch_size: Annotated[list[PosInt], BeforeValidator(as_list), Field(min_length=1)] | None = (
        Field(default=None,
              description="weak scaling: per-GPU batches (each rank's; default [32])"))
    global_batch: Annotated[list[PosInt], BeforeValidator(as_list), Field(min_length=1)] | None = (
        Field(default=None, description="strong scaling: global batches, split over the ranks"))
    backend: Annotated[
        list[Literal[BACKENDS]], BeforeValidator(as_list), Field(min_length=1)  # type: ignore[valid-type]
    ] = Field(default=["ddp"], description="training backends: " + ", ".join(BACKENDS))
    tuning: Annotated[list[Name], BeforeValidator(as_list), Field(min_length=1)] = Field(
        default=["default"], description="names of tuning variants (`default`: no changes)"
    )
    container: (
        Annotated[list[containers.Entry], BeforeValidator(as_list), Field(min_length=1)]
        | None) = Field(
        default=None, description="containers the ranks run in, as an axis: `none` (bare), "
        "`runtime:image`, or {runtime, image, options, binds, name, python}")

    @field_validator("*")
    @classmethod
    def _no_dupes(cls, value: list[Any] | None) -> list[Any] | None:
        return value if value is None else unique(value)

    def option_axes(self) -> dict[str, list[Any]]:
        """The training options that are axes of this grid, with their values."""
        return {o.name: getattr(self, o.name) for o in OPTIONS
                if getattr(self, o.name) is not None}


if TYPE_CHECKING:
    # Its option axes are built from the table at run time; the code reads them by name
    # (`option_axes()`), so a type checker needs only the fixed axes of the base.
    Grid = _GridBase
else:
    Grid = create_model("Grid", __base__=_GridBase, **OPTION_AXES)


class Tuning(Model):
    """A named variant: environment variables (NCCL_*, OMPI_MCA_*, ...) and backend options."""

    description: str = Field("", description="what this variant changes")
    env: dict[EnvName, str | int | float | bool] = Field(
        default_factory=dict, description="environment variables set in the job script"
    )
    options: OptionOverrides = Field(
        default_factory=OptionOverrides,
        description="training options of the bundled benchmark this variant changes",
    )

    def option_values(self) -> dict[str, Any]:
        """The options this variant sets (unset ones left out)."""
        return self.options.model_dump(exclude_none=True)


#: What a directive value may hold (it goes into `#SBATCH`/`#PBS` lines unquoted).
TOKEN_PATTERN = r"^[A-Za-z0-9_.,:@%+=/&|!()*\[\]-]+$"
Token = Annotated[
    str,
    StringConstraints(pattern=TOKEN_PATTERN),
    Field(description="a directive value: no spaces, quotes or newlines"),
]
HostName = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$"),
    Field(description="a host name, e.g. nid001234"),
]
DirectiveLine = Annotated[
    str,
    StringConstraints(pattern=r"^[^\n\r\x00]+$", min_length=1),
    Field(description="one directive, without #SBATCH/#PBS, e.g. --mail-type=END"),
]


#: The flat `job:` keys of earlier releases, now options of one scheduler's own section
#: (`job.qos` -> `job.slurm.qos`): still read, mapped by site.joboptions.
LEGACY_KEYS = ("partition", "qos", "constraint", "queue", "filesystems")
_OLD = "old form of job.<scheduler>.{}, still read: "


class Job(Model):
    """How each run's job is queued and run (values a site profile may default). Each
    scheduler's own options go in a section named after it: `slurm: {qos: high}`."""

    account: Token | None = Field(default=None, description="project to charge (-A)")
    sections: SkipJsonSchema[dict[str, dict[str, Any]]] = Field(
        default_factory=dict, description="the schedulers' own options by scheduler "
        "(`slurm: {partition: gpu, qos: high}`, `pbs: {queue: prod}`), written as keys of "
        "job: each is checked by its scheduler when the study is planned")
    queue: Token | list[Token] | None = Field(
        default=None, description=_OLD.format("queue") + "PBS (or Flux) queue (-q); "
        "several: each run goes to the first whose documented limits take it")
    partition: Token | list[Token] | None = Field(
        default=None, description=_OLD.format("partition") + "Slurm partition (-p)")
    qos: Token | None = Field(default=None, description=_OLD.format("qos") +
                              "Slurm quality of service (-q)")
    constraint: Token | None = Field(default=None, description=_OLD.format("constraint") +
                                     "Slurm node constraint (-C)")
    filesystems: Token | None = Field(
        default=None, description=_OLD.format("filesystems") + "PBS -l filesystems")
    extra_directives: list[DirectiveLine] = Field(
        default_factory=list, description="more directive lines, written after the prefix"
    )
    exclude_nodes: list[HostName] = Field(
        default_factory=list, description="nodes the jobs must not run on (Slurm --exclude, "
        "Flux --requires=-host:), e.g. the slow ones `history nodes` names"
    )
    submit: Literal["native", "submitit"] = Field(
        default="native", description="native: sbatch/qsub the rendered script; submitit: Slurm "
        "through submitit's executor"
    )
    template_dir: str | None = Field(
        default=None, description="a directory of your own job templates (slurm.sh.j2, pbs.sh.j2, "
        "flux.sh.j2, local.sh.j2, or _job.sh.j2, the script they all extend), relative to the "
        "spec file; the shipped ones fill the gaps"
    )
    walltime: str = Field(
        default="00:30:00",
        description="time limit per run, [D-]HH:MM:SS; a local run is stopped then",
    )
    setup: list[str] = Field(
        default_factory=list,
        description="shell lines run before the launch (module load, conda activate): "
        "they are commands by design and are copied as written",
    )
    record_env: list[EnvPattern] = Field(
        default_factory=list,
        description="more environment variables to record in each run's env.txt, beside "
        "the ones that shape performance (NCCL_*, FI_*, OMP_*, the scheduler's...): names, "
        "or prefixes ending in `*`; a name that looks secret (TOKEN, PASSWORD, KEY...) is "
        "still redacted")
    python: str | None = Field(
        default=None, pattern=r"^/[^\x00-\x1f]*$",
        description="absolute path of the Python the jobs start (a venv on a filesystem the "
        "compute nodes share); default: the profile's `python`, else the one running "
        "scalestudy")
    pack: bool = Field(
        default=False, description="run the study's runs as steps of one allocation (or a few, "
        "split by the queue's limits) instead of one job per run: one queue wait")
    pack_engine: Literal["steps", "flux"] = Field(
        default="steps", description="what runs the steps of a packed allocation: `steps`, "
        "scalestudy's step runner (srun steps, host-file subsets); `flux`, a Flux instance "
        "started in the allocation that schedules each run as a Flux job (Slurm; `flux` "
        "on PATH when the study is submitted)")
    share_gpus: bool = Field(
        default=False, description="allow more ranks per node than the system has GPUs: ranks "
        "share GPUs (e.g. under MPS); without it such a grid is an error")

    # Editors (the JSON Schema) take a scheduler's section as any other mapping key.
    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra={
        "additionalProperties": {"type": "object", "description": "a scheduler's own "
                                 "options, e.g. slurm: {qos: high}"}})

    @model_validator(mode="before")
    @classmethod
    def _scheduler_sections(cls, data: Any) -> Any:
        return sections_apart(data, cls.model_fields)

    @model_serializer(mode="wrap")
    def _sections_as_written(self, handler: SerializerFunctionWrapHandler) -> Any:
        return sections_inline(handler(self))

    @field_validator("walltime")
    @classmethod
    def _walltime(cls, value: str) -> str:
        walltime_seconds(value)
        return value


def walltime_seconds(value: str) -> int:
    """`[D-]HH:MM:SS` -> seconds; ValueError that says the format otherwise."""
    match = re.fullmatch(r"(?:(\d+)-)?(\d{1,3}):([0-5]\d):([0-5]\d)", value)
    if not match:
        raise ValueError(f"walltime {value!r} is not [D-]HH:MM:SS (e.g. 00:30:00 or 1-12:00:00)")
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total == 0:
        raise ValueError("walltime must be longer than 0 seconds")
    return total


EXCLUDE_KEYS = ("nodes", "ranks_per_node", "batch_size", "backend", "tuning",
                "world_size", "global_batch", "container", *(o.name for o in OPTIONS))


class Reference(Model):
    """A value the results must meet, with tolerances as fractions (ReFrame style):
    pass when value x (1 + lower) <= measured <= value x (1 + upper)."""

    metric: Literal["throughput", "efficiency"] = Field(
        description="throughput: img/s over all GPUs (median over repeats); efficiency: "
        "parallel efficiency against the group's baseline (1.0 = ideal)"
    )
    value: float = Field(gt=0, allow_inf_nan=False, description="the reference value")
    lower: float = Field(-0.1, ge=-1, le=0, description="accepted deviation below `value`, "
                         "a fraction: -0.1 = down to 10 % below")
    upper: float | None = Field(None, ge=0, description="accepted deviation above `value`, "
                                "a fraction; omitted = no upper limit")
    system: str | None = Field(None, description="the system it holds on; omitted = any")
    where: dict[str, Scalar] = Field(
        default_factory=dict, description="the parameters of the points it applies to, "
        "e.g. {nodes: 4, batch_size: 64, backend: ddp}; omitted = every point"
    )


class Study(Model):
    """A scaling study: what to run, on which system, over which grid."""

    name: Name = Field(description="the study's name; results go to results/<name>/")
    description: str = Field("", description="what the study asks")
    system: str = Field(
        "local", description="site profile name (`scalestudy systems` lists them), or the "
        "path of your own profile .yaml, relative to this file"
    )
    scaling: Literal["weak", "strong"] = Field(
        "weak",
        description="weak: the per-GPU batch is fixed (grid.batch_size); strong: the global "
        "batch is fixed (grid.global_batch) and split over the ranks",
    )
    workload: Workload = Field(default_factory=SyntheticWorkload, description="what runs")
    grid: Grid = Field(default_factory=Grid, description="the axes of the study")
    exclude: list[dict[str, Annotated[list[Scalar], BeforeValidator(as_list)]]] = Field(
        default_factory=list,
        description="drop the grid points that match every key of a rule, e.g. "
        "{nodes: 8, batch_size: [8, 16]} (batch_size is the per-GPU batch, global_batch the "
        "global one, in both scaling modes); keys: " + ", ".join(EXCLUDE_KEYS),
    )
    tuning: dict[Name, Tuning] = Field(
        default_factory=dict, description="named tuning variants used by grid.tuning"
    )
    repeats: int = Field(1, ge=1, le=100, description="times each grid point runs")
    container: containers.Entry | None = Field(
        None, description="the container every run's ranks run in: `runtime:image` "
        "(charliecloud:/scratch/img, apptainer:/soft/pytorch.sif) or {runtime, image, "
        "options, binds, name, python}; `grid.container` makes it an axis instead")
    job: Job = Field(default_factory=Job, description="job options")
    target: Target | None = Field(
        None, description="what one training run is (samples, epochs, how epochs grow "
        "with the global batch): the report prices each scale by it; without it, per "
        "million samples. Measured: {metric, value, eval_every, max_steps}: the bundled "
        "benchmark trains each run to the held-out metric")
    failures: Failures | None = Field(
        None, description="the system's failure rate while the results store is young "
        "({per_node_hour, queue_wait_s}): the report's wall clock with checkpoints and "
        "failures (docs/goodput.md)")
    references: list[Reference] = Field(
        default_factory=list, description="reference values the report checks "
        "(`scalestudy report --check` exits 1 when one fails)"
    )
    tags: list[Name] = Field(
        default_factory=list, description="free tags the results store keeps with every "
        "run of the study (`scalestudy history --tag`); `run --tag` adds more")

    _source: Path | None = PrivateAttr(default=None)
    _lines: dict[Loc, int] = PrivateAttr(default_factory=dict)
    # `system` as the spec wrote it, where that was a profile file: a run's id keeps
    # depending on it (ids stay stable), while `system` becomes the profile's name.
    _system_written: str | None = PrivateAttr(default=None)
    _system_file: Path | None = PrivateAttr(default=None)

    @field_validator("system")
    @classmethod
    def _system(cls, value: str) -> str:
        if value.endswith((".yaml", ".yml")) and "\n" not in value and "\x00" not in value:
            return value
        if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", value):
            return value
        raise ValueError(f"{value!r} is neither a profile name nor a .yaml profile file")

    @field_validator("exclude")
    @classmethod
    def _exclude_keys(cls, rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for i, rule in enumerate(rules):
            if not rule:
                raise ValueError(f"rule [{i}] is empty: it would exclude every run")
            for key in rule:
                if key not in EXCLUDE_KEYS:
                    raise ValueError(
                        f"rule [{i}]: unknown key {key!r}; valid keys: {', '.join(EXCLUDE_KEYS)}"
                    )
        return rules

    @model_validator(mode="after")
    def _one_container_place(self) -> Study:
        if self.container is not None and self.grid.container is not None:
            raise ValueError("container: give it at the top (every run) or as grid.container "
                             "(an axis), not both")
        labels = [containers.label(e) for e in self.grid.container or []]
        repeated = sorted({str(x) for x in labels if labels.count(x) > 1})
        if repeated:
            raise ValueError(f"grid.container: {', '.join(repeated)} named twice: give each "
                             "entry its own `name`")
        return self

    def target_problems(self) -> list[tuple[Loc, str]]:
        """What a measured target cannot work with in this study (core.load's cross
        checks report them at the target's line)."""
        target = self.target
        if target is None or not target.measured:
            return []
        loc: Loc = ("target", "metric")
        if not self.workload.bundled:
            return [(loc, "a measured target is trained by the bundled benchmark; remove "
                     "metric/value/eval_every/max_steps for a `command` workload")]
        axis = self.grid.option_axes().get("data")
        if not (all(axis) if axis else self.workload.option_values().get("data")):
            return [(loc, "a measured target needs workload.data (a token or image dataset "
                     "with a held-out split: random tensors cannot be learned); see "
                     "docs/benchmark.md#datasets")]
        if target.metric == "val_accuracy" and self.workload.language_model:
            return [(loc, f"val_accuracy is for classifiers; "
                     f"{self.workload.run_fields()['model']} is a language model: use "
                     "val_loss")]
        w = self.workload
        least = (getattr(w, "warmup_iters", 0) + 1) * getattr(w, "batches_per_iter", 1)
        if int(target.max_steps or 0) < least:
            return [(("target", "max_steps"), f"{target.max_steps} leaves no timed iteration "
                     "after the warm-up: give at least (warmup_iters + 1) x "
                     f"batches_per_iter = {least}")]
        return []

    @property
    def cost_target(self) -> Target | None:
        """The target the cost section prices (None: none, or a measured one only)."""
        return self.target if self.target is not None and self.target.priced else None

    def container_entries(self) -> list[containers.Container | str | None]:
        """The container axis: the grid's entries, else the one at the top, else [None]
        (no container: runs carry no container parameter)."""
        if self.grid.container is not None:
            return list(self.grid.container)
        return [self.container] if self.container is not None else [None]

    def container_named(self, label: str | None) -> containers.Container | None:
        """The container of a run's `container` parameter (None: a bare run)."""
        for entry in self.container_entries():
            if isinstance(entry, containers.Container) and entry.label == label:
                return entry
        return None

    @property
    def source(self) -> Path | None:
        """The file the study was loaded from."""
        return self._source

    @property
    def lines(self) -> dict[Loc, int]:
        """The line of each key path in the file it was loaded from (for messages)."""
        return self._lines

    def located(self, source: str | Path, lines: dict[Loc, int]) -> Study:
        """This study, told the file it came from and the line of each key (for messages)."""
        self._source = Path(source)
        self._lines = dict(lines)
        return self

    def on_system(self, name: str, found: Path | None) -> Study:
        """This study with `system` as the profile's own name; `found`: the profile file a
        path in `system` led to (kept beside the name, never instead of it)."""
        if found is None or name == self.system:
            return self
        study = self.model_copy(update={"system": name})
        study._system_written, study._system_file = self.system, found
        return study

    @property
    def system_file(self) -> Path | None:
        """Where the profile was found, when the spec gave a file instead of a name."""
        return self._system_file

    @property
    def system_identity(self) -> str:
        """`system` as the spec wrote it: what a run's id depends on."""
        return self._system_written or self.system

    def line_of(self, loc: Loc) -> str:
        """`file:line: key` for messages about this study (best effort)."""
        return where(self._source or "<study>", loc, self._lines)
