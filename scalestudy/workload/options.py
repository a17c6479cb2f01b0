"""Training options of the bundled benchmark: one table read by the spec, the renderer
and the workload's command line (importable without torch).

Each option is a key of `workload:` (its base value), of a tuning variant's `options:`
(an override) and of `grid:` (an axis). An option applies to some backends only;
elsewhere it is ignored, and a grid axis over it does not multiply the other backends'
runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

BACKENDS: tuple[str, ...] = ("ddp", "fsdp", "horovod", "deepspeed")
MODEL_PARALLEL: tuple[str, ...] = ("ddp", "fsdp")  # the backends tp and pp combine with
#: The timing loop's defaults, the same for a spec's `workload:` and the benchmark's flags.
TIMING: dict[str, int] = {"warmup_iters": 2, "iters": 10, "batches_per_iter": 5}
PRECISIONS: tuple[str, ...] = ("fp32", "bf16", "fp16")
#: The optimizers and learning-rate rules (workload/optimizers.py implements them).
OPTIMIZERS: tuple[str, ...] = ("sgd", "adamw", "lars", "lamb")
LR_RULES: tuple[str, ...] = ("none", "linear", "sqrt")
DECAYS: tuple[str, ...] = ("none", "cosine", "step")


#: An option's value, as the spec and the command line give it.
Value = bool | int | float | str | None


@dataclass(frozen=True)
class Option:
    """One training option: its type, default, where it applies and what it does."""

    name: str
    kind: type  # bool, int, float or str
    default: Value
    help: str
    backends: tuple[str, ...] = BACKENDS
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    #: A word the option also takes instead of a number (`peak_tflops: measure`).
    keyword: str | None = None

    @property
    def flag(self) -> str:
        """The workload's command-line flag, e.g. `--bucket-cap-mb`."""
        return "--" + self.name.replace("_", "-")

    def applies(self, backend: str) -> bool:
        """Whether this option means anything to `backend`."""
        return backend in self.backends


OPTIONS: tuple[Option, ...] = (
    Option("precision", str, "fp32", "fp32; bf16 (autocast); fp16 (autocast + GradScaler, "
           "CUDA only)", choices=PRECISIONS),
    Option("channels_last", bool, False, "NHWC memory format for the model and the images"),
    Option("compile", bool, False, "torch.compile the model before wrapping it"),
    Option("bucket_cap_mb", float, 25.0, "DDP gradient bucket size in MB",
           backends=("ddp",), minimum=0.001, maximum=65536),
    Option("gradient_as_bucket_view", bool, False,
           "DDP: gradients are views into the allreduce buckets (saves a copy)",
           backends=("ddp",)),
    Option("static_graph", bool, False, "DDP: the graph is the same every step",
           backends=("ddp",)),
    Option("comm_hook", str, "none", "DDP gradient compression hook: none, fp16 or bf16",
           backends=("ddp",), choices=("none", "fp16", "bf16")),
    Option("sim_latency_ms", float, 0.0, "DDP: a simulated network's latency alpha (ms): "
           "every allreduce also waits alpha·log2 P (known truth for the scaling model)",
           backends=("ddp",), minimum=0, maximum=60_000),
    Option("sim_ns_per_byte", float, 0.0, "DDP: a simulated network's cost per byte beta "
           "(ns): every allreduce of S bytes also waits beta·2(P−1)/P·S",
           backends=("ddp",), minimum=0, maximum=1e9),
    Option("compression", str, "none", "Horovod gradient compression: none or fp16",
           backends=("horovod",), choices=("none", "fp16")),
    Option("backward_passes_per_step", int, 1,
           "Horovod: local gradient accumulation steps per allreduce",
           backends=("horovod",), minimum=1, maximum=1024),
    Option("adasum", bool, False, "Horovod: Adasum reduction instead of averaging",
           backends=("horovod",)),
    Option("zero_stage", int, 0, "DeepSpeed ZeRO stage (0-3)", backends=("deepspeed",),
           minimum=0, maximum=3),
    Option("reshard_after_forward", bool, True,
           "FSDP2: free the gathered parameters after forward (gather again for backward)",
           backends=("fsdp",)),
    Option("param_dtype", str, "fp32",
           "FSDP2: the dtype parameters are gathered and computed in: fp32 (autocast casts "
           "each op) or compute (the run's precision, MixedPrecisionPolicy; gradients "
           "reduced in fp32)", backends=("fsdp",), choices=("fp32", "compute")),
    Option("seq_len", int, 1024, "transformer models: tokens per sequence",
           minimum=1, maximum=1 << 20),
    Option("tp", int, 1, "transformer models: tensor-parallel degree (world = dp x tp x pp)",
           backends=MODEL_PARALLEL, minimum=1, maximum=1 << 16),
    Option("pp", int, 1, "transformer models: pipeline-parallel degree (stages)",
           backends=MODEL_PARALLEL, minimum=1, maximum=1 << 16),
    Option("microbatches", int, 0, "transformer models with pp > 1: micro-batches per "
           "optimizer step (0: pp of them)", backends=MODEL_PARALLEL, minimum=0,
           maximum=1 << 16),
    Option("pp_schedule", str, "1f1b", "transformer models with pp > 1: pipeline schedule",
           backends=MODEL_PARALLEL, choices=("gpipe", "1f1b")),
    Option("activation_checkpointing", bool, False,
           "transformer models: recompute each block's activations in backward"),
    Option("peak_tflops", float, 0.0, "peak TFLOP/s per GPU for MFU (transformer models); "
           "0: none, measure: time a large matmul on each rank", minimum=0, maximum=1e9,
           keyword="measure"),
    Option("data", str, "", "a dataset directory (tokens: train.bin + meta.json; images: "
           "train-NNNNNN.tar WebDataset shards); empty: synthetic tensors"),
    Option("data_workers", int, 2, "real data: loader worker processes per rank (0: the "
           "training process reads)", minimum=0, maximum=64),
    Option("data_prefetch", int, 2, "real data: batches prefetched per loader worker",
           minimum=1, maximum=64),
    Option("data_stage", str, "none", "real data: copy the rank's files first to node-local "
           "storage (local) or /dev/shm (shm); the copy is timed apart",
           choices=("none", "local", "shm")),
    Option("data_seed", int, 0, "real data: the shuffle seed", minimum=0, maximum=2**62),
    Option("lr", float, 0.01, "learning rate (at lr_reference_batch when lr_rule scales "
           "it)", minimum=1e-12, maximum=1e6),
    Option("optimizer", str, "sgd", "sgd (momentum 0.9), adamw, lars (You et al. 2017) or "
           "lamb (You et al. 2019)", choices=OPTIMIZERS),
    Option("weight_decay", float, 0.0, "weight decay (not of biases and norm weights)",
           minimum=0, maximum=10),
    Option("lr_rule", str, "none", "scale the learning rate with the global batch B: "
           "linear (lr x B/B_ref), sqrt (lr x sqrt(B/B_ref)) or none", choices=LR_RULES),
    Option("lr_reference_batch", int, 0, "B_ref: the global batch at which the learning "
           "rate is the one given (lr_rule linear or sqrt)", minimum=0, maximum=1 << 40),
    Option("lr_warmup", float, 0.0, "linear learning-rate warm-up: optimizer steps (>= 1) "
           "or a fraction of the run's steps (below 1; of max_steps with a target)",
           minimum=0, maximum=1 << 40),
    Option("lr_decay", str, "none", "after the warm-up: cosine (to 0 at the run's last "
           "step), step (x0.1 at 1/2 and 3/4 of the run) or none", choices=DECAYS),
    Option("diagnostics", bool, True,
           "compute-only timing (no gradient sync) and an allreduce probe after the run"),
    Option("mllog", bool, False, "print MLPerf-style :::MLLOG lines"),
)
BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}
DEFAULTS: dict[str, Value] = {o.name: o.default for o in OPTIONS}


@cache
def _names_for(backend: str) -> tuple[str, ...]:
    return tuple(o.name for o in OPTIONS if o.applies(backend))


def applicable(options: Mapping[str, Value], backend: str) -> dict[str, Value]:
    """The options that mean something to `backend`, in table order."""
    return {name: options[name] for name in _names_for(backend) if name in options}


def to_args(options: Mapping[str, Value], backend: str) -> list[str]:
    """Workload arguments for the options of `backend` that differ from the default."""
    args: list[str] = []
    for name, value in applicable(options, backend).items():
        option = BY_NAME[name]
        if value == option.default:
            continue
        if option.kind is bool:
            args.append(option.flag if value else "--no-" + option.flag[2:])
        else:
            args += [option.flag, str(value)]
    return args
