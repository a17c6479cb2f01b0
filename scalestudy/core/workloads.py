"""The workload kinds (bundled benchmark, user command) and what each decides for a run.

Callers ask the workload (`bundled`, `language_model`, `option_values()`, `run_fields()`,
`data_parallel()`, `program_args()`, `placeholders()`, `record_pattern`) instead of
branching on its `kind`: each kind answers for itself here.
"""

from __future__ import annotations

import re
import shlex
import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Literal, Protocol, TypedDict

from pydantic import BeforeValidator, ConfigDict, Field, field_validator, model_validator

from scalestudy.core.specbase import LRPolicy, Model, TrainOptions
from scalestudy.workload import layout
from scalestudy.workload.names import MODEL_NAMES, is_transformer
from scalestudy.workload.options import DEFAULTS, OPTIONS, TIMING, Value, to_args

LR_FIELDS = ("lr", "base_lr", "lr_warmup_iters")
# What a `command` workload may use in its arguments, e.g. `--batch-size {batch_size}`.
COMMAND_FIELDS = (
    "batch_size", "global_batch", "world_size", "nodes", "ranks_per_node",
    *dict.fromkeys(("repeat", "run_id", "run_dir", "backend", "tuning", *LR_FIELDS,
                    *(o.name for o in OPTIONS))),
)
# Horovod's synthetic benchmark line (and the bundled workload's).
DEFAULT_THROUGHPUT_REGEX = r"Total img/sec on \d+ GPU\(s\): (?P<throughput>[0-9.eE+-]+)"



#: A site's peak TFLOP/s of one GPU by precision, or `measure` (SystemProfile.peak_tflops).
Peaks = Mapping[Literal["fp32", "bf16", "fp16"], float | Literal["measure"]]



class RunFields(TypedDict):
    """What a Run records of its workload."""

    workload: str
    model: str | None
    image_size: int | None


class RunValues(Protocol):
    """What a workload reads of a run (core.grid.Run, which imports this module's kinds)."""

    @property
    def batch_size(self) -> int:
        """The per-GPU batch."""
        ...

    @property
    def backend(self) -> str:
        """The training backend."""
        ...

    def params(self) -> dict[str, Value]:
        """The run's parameters by name."""
        ...


class Checkpoint(Model):
    """Checkpoints of the bundled benchmark (torch.distributed.checkpoint), resumed from
    when a run starts again; docs/checkpoints.md."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    every_steps: Annotated[int, Field(ge=1, strict=True)] | None = Field(
        default=None, description="save every this many optimizer steps")
    every_seconds: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = Field(
        default=None, description="save every this many seconds of training (decided on "
        "rank 0; after the first save, every the steps it took)")
    path: str | None = Field(
        default=None, description="a directory (a parallel file system or node-local "
        "storage shared by the run's nodes) under which each run saves in <path>/<run_id>/; "
        "default: the run's directory, <run_dir>/checkpoint")
    asynchronous: bool = Field(
        default=False, alias="async", description="save in the background "
        "(dcp.async_save): the loop waits only for the copy to host memory")

    @model_validator(mode="after")
    def _one_interval(self) -> Checkpoint:
        given = [k for k in ("every_steps", "every_seconds") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give one of every_steps, every_seconds, e.g. `checkpoint: "
                             "{every_steps: 500}`" if not given else
                             "every_steps and every_seconds both set: keep one")
        if self.path is not None and not self.path.strip():
            raise ValueError("path is empty: give a directory, or leave path out (the "
                             "run's directory)")
        return self

    def directory(self, run_dir: Path) -> Path:
        """Where one run saves: <path>/<run_id>, or <run_dir>/checkpoint."""
        if self.path is None:
            return run_dir / "checkpoint"
        return Path(self.path) / run_dir.name

    def args(self, run_dir: Path) -> list[str]:
        """The benchmark's `--checkpoint-*` arguments for the run in `run_dir`."""
        every = (["--checkpoint-every-steps", str(self.every_steps)]
                 if self.every_steps is not None else
                 ["--checkpoint-every-seconds", repr(self.every_seconds)])
        return ["--checkpoint-dir", str(self.directory(run_dir)), *every,
                *(["--checkpoint-async"] if self.asynchronous else [])]


class SyntheticWorkload(TrainOptions):
    """The bundled benchmark: DDP, Horovod or DeepSpeed training on synthetic images."""

    kind: Literal["synthetic"] = Field(default="synthetic", description="the bundled benchmark")
    model: str = Field(default="resnet50", description=f"one of {', '.join(MODEL_NAMES)}")
    image_size: int = Field(default=224, ge=8, le=4096,
                            description="input height and width (pixels)")
    num_classes: int = Field(default=1000, ge=2, description="classifier outputs")
    warmup_iters: int = Field(default=TIMING["warmup_iters"], ge=0,
                              description="untimed iterations first")
    iters: int = Field(default=TIMING["iters"], ge=1, description="timed iterations")
    batches_per_iter: int = Field(default=TIMING["batches_per_iter"], ge=1,
                                  description="batches (steps) per timed iteration")
    lr: LRPolicy | Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = Field(
        default=None, description="the learning rate (a number; also a grid axis and a "
        "tuning option), or a policy {base, reference_batch, scaling, warmup_iters} "
        "(default: 0.01)")
    checkpoint: Checkpoint | None = Field(
        default=None, description="save checkpoints {every_steps | every_seconds, path, "
        "async} and resume from them when a run starts again (ddp and fsdp backends, "
        "data parallel only)")

    @property
    def record_pattern(self) -> str | None:
        """None: the benchmark writes its own record (no regex reads its output)."""
        return None

    @property
    def bundled(self) -> bool:
        """True: scalestudy's own benchmark runs on the ranks (in the jobs' Python)."""
        return True

    @property
    def language_model(self) -> bool:
        """Whether the model is a transformer (dp x tp x pp, batches of sequences)."""
        return is_transformer(self.model)

    def option_values(self) -> dict[str, Value]:
        """The training options this workload sets (every one: it has a field for each;
        `lr` a number, else its default: a policy passes its own)."""
        values = {o.name: getattr(self, o.name) for o in OPTIONS}
        values["lr"] = self.lr if isinstance(self.lr, float) else DEFAULTS["lr"]
        return values

    def run_fields(self) -> RunFields:
        """What a Run records of its workload."""
        return {"workload": self.kind, "model": self.model, "image_size": self.image_size}

    def placeholders(self) -> set[str]:
        """The run values its arguments name: none (scalestudy passes them as options)."""
        return set()

    def data_parallel(self, backend: str, world: int, batch: int,
                      options: Mapping[str, Value]) -> int:
        """Data-parallel replicas at `world` ranks: world / (tp x pp) for a transformer
        split over ranks (workload.layout's rules); ValueError says why a split cannot work."""
        return layout.plan(model=self.model, backend=backend, world_size=world,
                           batch_size=batch, tp=int(options.get("tp") or 1),
                           pp=int(options.get("pp") or 1),
                           microbatches=int(options.get("microbatches") or 0),
                           pp_schedule=str(options.get("pp_schedule") or "1f1b"),
                           precision=str(options.get("precision") or "fp32"),
                           activation_checkpointing=bool(
                               options.get("activation_checkpointing", False)),
                           compile=bool(options.get("compile", False)),
                           channels_last=bool(options.get("channels_last", False))).dp

    def program_args(self, run: RunValues, options: Mapping[str, Value],
                     lr: Mapping[str, float | None], run_dir: Path, gpus: bool = False,
                     extra: Sequence[str] = (), peaks: Peaks | None = None,
                     device: str = "cuda") -> list[str]:
        """The arguments of `-m scalestudy.workload` for a run: `options` its training
        options, `lr` its learning-rate values; on a GPU system (`gpus`) the benchmark must
        find a GPU (of type `device`: cuda, or xpu on Intel GPUs) rather than fall back to
        CPU; `extra`: more arguments (the batch-size
        probe's); `peaks`: the system's peak TFLOP/s per precision (MFU's denominator)."""
        lm = is_transformer(self.model)
        precision = str(options["precision"])
        rest = {k: v for k, v in options.items() if k != "precision"}
        if lm and not options.get("peak_tflops"):
            peak = next((v for k, v in (peaks or {}).items() if k == precision), None)
            if peak is not None:
                rest["peak_tflops"] = peak
        images = [] if lm else [  # a GPT reads tokens, not images
            "--image-size", str(self.image_size), "--num-classes", str(self.num_classes)]
        return [
            "--model", self.model, *images, "--batch-size", str(run.batch_size),
            "--precision", precision, "--warmup-iters", str(self.warmup_iters),
            "--iters", str(self.iters), "--batches-per-iter", str(self.batches_per_iter),
            "--backend", run.backend, "--metrics", str(run_dir / "metrics.jsonl"),
            *to_args(rest, run.backend),
            *(["--lr", repr(lr["lr"]), "--lr-warmup-iters", str(lr["lr_warmup_iters"])]
              if lr else []),
            *(["--device", device] if gpus else []),
            *(self.checkpoint.args(run_dir) if self.checkpoint is not None else []),
            *extra,
        ]

    @model_validator(mode="before")
    @classmethod
    def _data_mapping(cls, value: object) -> object:
        """`data: {path, workers, prefetch, stage, seed}` -> the options `data`,
        `data_workers`, ...; `data: PATH` is the option `data` as it is."""
        if isinstance(value, dict) and isinstance(value.get("data"), dict):
            value = {**{k: v for k, v in value.items() if k != "data"},
                     **flatten_data(value["data"], value)}
        if isinstance(value, dict) and "lr_scaling" in value:
            value = {**{k: v for k, v in value.items() if k != "lr_scaling"},
                     **flatten_lr_scaling(value["lr_scaling"], value)}
        return value

    @model_validator(mode="after")
    def _one_lr_scaling(self) -> SyntheticWorkload:
        rule = getattr(self, "lr_rule", "none")
        if rule != "none" and int(getattr(self, "lr_reference_batch", 0)) < 1:
            raise ValueError(f"lr_scaling: rule {rule} needs reference_batch (the global "
                             "batch at which lr holds), e.g. `lr_scaling: {rule: linear, "
                             "reference_batch: 256}`")
        if rule != "none" and isinstance(self.lr, LRPolicy) and self.lr.scaling != "none":
            raise ValueError("lr.scaling and lr_scaling both scale the learning rate: keep "
                             "one (lr: {scaling: none} with lr_scaling, or no lr_scaling)")
        return self

    @field_validator("lr", mode="before")
    @classmethod
    def _positive_lr(cls, value: object) -> object:
        if isinstance(value, int | float) and not isinstance(value, bool) and not value > 0:
            raise ValueError(f"a learning rate is > 0, got {value}")
        return value

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if value not in MODEL_NAMES:
            raise ValueError(f"unknown model {value!r}; valid models: {', '.join(MODEL_NAMES)}")
        return value


class CommandWorkload(Model):
    """The user's own program, launched on every rank; a pattern extracts the throughput."""

    kind: Literal["command"] = Field(description="run your own program")
    command: list[str] = Field(
        min_length=1,
        description="program and arguments (a string is split like a shell would); may use "
        + ", ".join("{" + f + "}" for f in COMMAND_FIELDS),
    )
    throughput_regex: str = Field(
        DEFAULT_THROUGHPUT_REGEX,
        description="regex over the job's stdout; the last match's group `throughput` "
        "(or group 1) is images/s over all ranks",
    )
    lr: LRPolicy | None = Field(
        None, description="learning-rate policy, passed as {lr}, {base_lr}, {lr_warmup_iters}"
    )

    @property
    def record_pattern(self) -> str | None:
        """The regex scalestudy reads the program's throughput from stdout.log with."""
        return self.throughput_regex

    @property
    def bundled(self) -> bool:
        """False: the user's program runs on the ranks, with nothing of scalestudy's."""
        return False

    @property
    def language_model(self) -> bool:
        """False: scalestudy knows no model of a command (no dp x tp x pp split)."""
        return False

    def option_values(self) -> dict[str, Value]:
        """None set here (the defaults apply; tuning variants and axes may set them)."""
        return {}

    def run_fields(self) -> RunFields:
        """What a Run records of its workload (no model scalestudy knows)."""
        return {"workload": self.kind, "model": None, "image_size": None}

    def placeholders(self) -> set[str]:
        """The `{fields}` its command uses."""
        return {f for arg in self.command for _, f, _, _ in string.Formatter().parse(arg) if f}

    def data_parallel(self, backend: str, world: int, batch: int,
                      options: Mapping[str, Value]) -> int:
        """Every rank is a data-parallel replica (scalestudy splits no model of a command)."""
        return world

    def program_args(self, run: RunValues, options: Mapping[str, Value],
                     lr: Mapping[str, float | None], run_dir: Path, gpus: bool = False,
                     extra: Sequence[str] = (), peaks: Peaks | None = None,
                     device: str = "cuda") -> list[str]:
        """The command's argv, its `{placeholders}` filled with the run's values (`gpus`,
        `extra`, `peaks` and `device` are the bundled benchmark's: a command reads none)."""
        values = {**DEFAULTS, **options, **lr, **run.params(), "run_dir": str(run_dir)}
        return [arg.format(**values) for arg in self.command]

    @field_validator("command", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                return shlex.split(value)
            except ValueError as exc:
                raise ValueError(f"cannot split the command like a shell: {exc}") from None
        return value

    @field_validator("command")
    @classmethod
    def _fields(cls, value: list[str]) -> list[str]:
        for arg in value:
            try:
                names = [f for _, f, _, _ in string.Formatter().parse(arg) if f is not None]
            except ValueError as exc:
                msg = f"bad `{{...}}` in {arg!r}: {exc} (write {{{{ for a brace)"
                raise ValueError(msg) from None
            for name in names:
                if name not in COMMAND_FIELDS:
                    raise ValueError(
                        f"unknown placeholder {{{name}}} in {arg!r}; valid: "
                        + ", ".join(COMMAND_FIELDS)
                    )
        return value

    @field_validator("throughput_regex")
    @classmethod
    def _regex(cls, value: str) -> str:
        try:
            pattern = re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        if pattern.groups == 0:
            raise ValueError("needs a group around the number, e.g. `(?P<throughput>[0-9.]+)`")
        return value


#: `workload.data`'s mapping keys and the options they set.
DATA_KEYS: dict[str, str] = {"path": "data", "workers": "data_workers",
                             "prefetch": "data_prefetch", "stage": "data_stage",
                             "seed": "data_seed"}


def flatten_data(mapping: Mapping[object, object],
                 workload: Mapping[object, object]) -> dict[str, object]:
    """`data: {path, workers, ...}` as the options it sets; ValueError names an unknown
    key, a missing `path`, or an option the workload also sets by its own name."""
    unknown = [str(k) for k in mapping if k not in DATA_KEYS]
    if unknown:
        raise ValueError(f"data: unknown key(s) {', '.join(unknown)}; valid: "
                         f"{', '.join(DATA_KEYS)}")
    if "path" not in mapping:
        raise ValueError("data: needs `path` (the dataset's directory), e.g. "
                         "`data: {path: data/tokens, workers: 4}`")
    twice = [f"data.{k} and {o}" for k, o in DATA_KEYS.items()
             if k in mapping and o in workload and o != "data"]
    if twice:
        raise ValueError(f"{'; '.join(twice)} set the same option: keep one")
    return {DATA_KEYS[str(k)]: v for k, v in mapping.items()}


#: `workload.lr_scaling`'s mapping keys and the options they set.
LR_SCALING_KEYS: dict[str, str] = {"rule": "lr_rule", "reference_batch": "lr_reference_batch"}


def flatten_lr_scaling(mapping: object, workload: Mapping[object, object]
                       ) -> dict[str, object]:
    """`lr_scaling: {rule, reference_batch}` as the options lr_rule and lr_reference_batch;
    ValueError names what is wrong."""
    if not isinstance(mapping, Mapping):
        raise ValueError("lr_scaling: give {rule: none | linear | sqrt, reference_batch: B}")
    unknown = [str(k) for k in mapping if k not in LR_SCALING_KEYS]
    if unknown:
        raise ValueError(f"lr_scaling: unknown key(s) {', '.join(unknown)}; valid: "
                         f"{', '.join(LR_SCALING_KEYS)}")
    twice = [f"lr_scaling.{k} and {o}" for k, o in LR_SCALING_KEYS.items()
             if k in mapping and o in workload]
    if twice:
        raise ValueError(f"{'; '.join(twice)} set the same option: keep one")
    return {LR_SCALING_KEYS[str(k)]: v for k, v in mapping.items()}


def _default_kind(value: object) -> object:
    """A workload without `kind` is the bundled benchmark."""
    if isinstance(value, dict) and "kind" not in value:
        return {"kind": "synthetic", **value}
    return value


Workload = Annotated[
    SyntheticWorkload | CommandWorkload,
    Field(discriminator="kind"),
    BeforeValidator(_default_kind),
]
