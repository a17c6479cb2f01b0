"""What every backend shares: the model and synthetic batch, the training step in each
precision, the learning-rate schedule, and the timed phases (training, compute only,
allreduce probe).

Two kinds of model: the CNNs train on random images (img/s); the transformers on random
token ids, next-token loss (tokens/s). Every step returns its loss; the last one is
kept for the record (it is what shows that a parallel layout trains the same model).

A backend (ddp.py, horovod_backend.py, deepspeed_backend.py) supplies how the model is
wrapped, how a step synchronises gradients, how to allreduce and how to gather; `run`
does the rest in the same way for all of them, so their numbers compare.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar, cast

import torch
from torch import nn

from . import checkpoint, checkpointer, diagnostics, energy, transformer
from .data.stats import DataStats
from .layout import Layout
from .models import build_model, num_parameters, shard_units
from .names import is_transformer
from .optimizers import factor, make, warmup_steps
from .options import Value
from .timing import time_iterations
from .totarget import Goal

if TYPE_CHECKING:
    from .data.feed import Feeder
    from .totarget import Outcome

#: The learning-rate schedule stepped once per optimizer step.
LRScheduler = torch.optim.lr_scheduler.LRScheduler
T = TypeVar("T")

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
COMPRESSED_BYTES = {"fp16": 2, "bf16": 2}  # bytes per gradient element on the wire


class WorkloadError(Exception):
    """A setting this machine cannot run; reported in one line, exit status 2."""


@dataclass(frozen=True)
class TrainConfig:
    """What to train, how, and how to time it."""

    model: str
    image_size: int
    num_classes: int
    batch_size: int
    precision: str
    warmup_iters: int
    iters: int
    batches_per_iter: int
    seed: int
    channels_last: bool = False
    compile: bool = False
    diagnostics: bool = True
    lr: float = 0.01  # the learning rate used (scaled by lr_rule, see optimizers.py)
    base_lr: float | None = None  # warm-up starts here (default: lr)
    lr_warmup_iters: int = 0
    optimizer: str = "sgd"
    weight_decay: float = 0.0
    lr_rule: str = "none"  # how lr was scaled from the given one (none: lr as given)
    lr_reference_batch: int = 0
    lr_warmup: float = 0.0  # steps (>= 1) or a fraction of total_steps
    lr_decay: str = "none"
    lr_given: float | None = None  # the learning rate before lr_rule scaled it
    target: Goal | None = None  # a measured target (totarget.py), else the timed loop
    options: dict[str, Value] = field(default_factory=dict)  # backend-specific options
    seq_len: int = 1024  # transformer models: tokens per sequence
    activation_checkpointing: bool = False
    layout: Layout = field(default_factory=Layout)
    data: str = ""  # a dataset directory ("": synthetic tensors); see workload/data/
    data_workers: int = 2
    data_prefetch: int = 2
    data_stage: str = "none"
    data_seed: int = 0
    checkpoint: checkpoint.Settings | None = None  # save and resume (checkpoint.py)

    @property
    def total_steps(self) -> int:
        """Optimizer steps of the run, what the schedule spans: max_steps with a target,
        else the warm-up and timed iterations' steps."""
        if self.target is not None:
            return self.target.max_steps
        return (self.warmup_iters + self.iters) * self.batches_per_iter

    @property
    def warmup_steps(self) -> int:
        """Steps of the learning-rate warm-up (lr_warmup_iters, else lr_warmup)."""
        if self.lr_warmup_iters > 0:
            return self.lr_warmup_iters
        return warmup_steps(self.lr_warmup, self.total_steps)

    @property
    def unit(self) -> str:
        """What the throughput counts: "img" or "tokens"."""
        return "tokens" if is_transformer(self.model) else "img"

    @property
    def units_per_step(self) -> float:
        """This rank's share of the images or tokens of one optimizer step: a
        data-parallel replica's batch, split over the tp x pp ranks that train it (so the
        sum over ranks is the global figure, never counted twice)."""
        per_replica = self.batch_size * (self.seq_len if self.unit == "tokens" else 1)
        return per_replica / self.layout.model_parallel

    @property
    def units_per_iter(self) -> float:
        """This rank's share of the images or tokens of one timed iteration."""
        return self.units_per_step * self.batches_per_iter


@dataclass
class Batch:
    """The synthetic images and labels every step trains on."""

    data: torch.Tensor
    target: torch.Tensor


def lr_factor(step: int, cfg: TrainConfig) -> float:
    """Multiplier of cfg.lr at optimizer step `step`: a linear ramp over the warm-up
    (from base_lr with the spec's lr policy, Goyal et al.; else from lr / warm-up
    steps), then the decay (optimizers.factor)."""
    warm = cfg.warmup_steps
    if cfg.lr_warmup_iters > 0:
        start = (cfg.base_lr if cfg.base_lr is not None else cfg.lr) / cfg.lr
    else:
        start = 1.0 / warm if warm > 0 else 1.0
    return factor(step, warm, cfg.total_steps, cfg.lr_decay, start)


def make_optimizer(params: Iterable[nn.Parameter], cfg: TrainConfig) -> torch.optim.Optimizer:
    """The run's optimizer (sgd with momentum 0.9, adamw, lars, lamb) at its learning
    rate; biases and norm weights without weight decay (optimizers.make)."""
    return make(cfg.optimizer, params, cfg.lr, cfg.weight_decay)


def make_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig) -> LRScheduler:
    """The warm-up schedule, stepped once per optimizer step."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, cfg))


def build(cfg: TrainConfig, device: torch.device) -> tuple[nn.Module, Batch]:
    """The model on its device (channels_last when asked) and one synthetic batch; every
    rank builds the same (same seed), so tensor and pipeline shards cut one model."""
    torch.manual_seed(cfg.seed)
    if is_transformer(cfg.model):
        with torch.device(device):
            lm = transformer.build(cfg.model, cfg.seq_len, cfg.activation_checkpointing)
        data, target = transformer.synthetic_tokens(
            cfg.batch_size, cfg.seq_len, lm.cfg.vocab_size, device)
        return lm, Batch(data, target)
    model = build_model(cfg.model, cfg.num_classes).to(device)
    shape = (cfg.batch_size, 3, cfg.image_size, cfg.image_size)
    data = torch.randn(shape, device=device)
    if cfg.channels_last:
        # torch's stubs type Module.to without memory_format, which it takes at run time.
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        data = data.contiguous(memory_format=torch.channels_last)
    target = torch.randint(0, cfg.num_classes, (cfg.batch_size,), device=device)
    return model, Batch(data, target)


def grad_bytes(model: nn.Module, wire: str = "none") -> int:
    """Bytes of gradients allreduced per step (fp32, or 2 per element when compressed)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if wire in COMPRESSED_BYTES:
        return sum(p.numel() for p in params) * COMPRESSED_BYTES[wire]
    return sum(p.numel() * p.element_size() for p in params)


def autocast(cfg: TrainConfig, device: torch.device) -> contextlib.AbstractContextManager[object]:
    """Autocast in bf16/fp16, nothing in fp32."""
    dtype = AMP_DTYPES.get(cfg.precision)
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)


def plain_step(model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: LRScheduler,
               cfg: TrainConfig, device: torch.device, batch: Batch,
               context: Callable[[], contextlib.AbstractContextManager[object]] | None = None,
               ) -> Callable[[], torch.Tensor]:
    """One training step: forward (autocast), backward (GradScaler in fp16), step; it
    returns the (detached) loss.

    `context` wraps forward and backward (DDP's `no_sync` for compute-only timing).
    """
    loss_fn = nn.CrossEntropyLoss()
    scaler = torch.amp.GradScaler(device.type) if cfg.precision == "fp16" else None
    context = context or contextlib.nullcontext

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        with context():
            with autocast(cfg, device):
                loss = loss_fn(model(batch.data), batch.target)
            if scaler is None:
                loss.backward()
            else:
                scaler.scale(loss).backward()
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)
            scaler.update()
        scheduler.step()
        return loss.detach()

    return step


class Backend(Protocol):
    """How one training backend wraps the model and talks to the other ranks."""

    name: str
    #: True: time compute-only steps on the bare model before wrapping (Horovod and
    #: DeepSpeed hook into the parameters); False: `compute_step` after training (DDP).
    bare_compute: bool
    wire: str  # gradient compression on the wire: none, fp16, bf16

    def wrap(self, model: nn.Module, cfg: TrainConfig, device: torch.device,
             batch: Batch) -> Callable[[], torch.Tensor | None]:
        """The synchronising training step of the wrapped model; it returns the loss
        (None on a rank that does not compute it: a pipeline stage before the last)."""
        ...

    def compute_step(self) -> Callable[[], object]:
        """A step without gradient synchronisation (only when not bare_compute)."""
        ...

    def allreduce(self, size_bytes: int, device: torch.device) -> Callable[[], object]:
        """A function that allreduces one prepared buffer of `size_bytes`."""
        ...

    def gather(self, obj: T) -> list[T]:
        """Every rank's `obj`, in rank order."""
        ...

    def describe(self) -> dict[str, object]:
        """What the record says about this backend (versions, settings in effect)."""
        ...

    def shutdown(self, device: torch.device) -> None:
        """Wait for every rank, then leave the job's process group (before the
        interpreter exits: gloo aborts otherwise)."""
        ...


@dataclass
class TrainResult:
    """One rank's measurements."""

    iter_times: list[float]
    compute_iter_times: list[float] | None
    probe_times: list[float] | None
    num_params: int
    grad_bytes: int
    final_loss: float | None = None  # the last step's loss (None: not on this rank)
    local_params: int | None = None  # parameters this rank holds after wrapping
    energy: energy.Reading | None = None  # energy.Reading of the timed iterations
    first_step_at: float | None = None  # wall-clock time its first (warm-up) step began
    data: DataStats | None = None  # the input's measurements (None: synthetic tensors)
    target: Outcome | None = None  # the run to a measured target (None: none)
    first_step_s: float | None = None  # the first step's own time (compile, allocation)
    checkpoint: checkpoint.Stats | None = None  # saves and the load (None: no checkpoints)
    #: wall-clock times start-up passed: process start, imports done, ranks joined
    phases: dict[str, float] = field(default_factory=dict)


def local_parameters(model: nn.Module) -> int:
    """Parameter elements this rank holds: a DTensor's local shard (tensor parallel,
    FSDP), a ZeRO-3 partition, else the whole tensor (a pipeline stage: its layers)."""
    total = 0
    for p in model.parameters():
        shard = getattr(p, "ds_tensor", None)  # DeepSpeed ZeRO-3
        local = p.to_local() if hasattr(p, "to_local") else shard if shard is not None else p
        total += local.numel()
    return total


def _sync_fn(device: torch.device) -> Callable[[], None]:
    """What the timers call before each clock read: torch.cuda/torch.xpu.synchronize."""
    from . import accel

    if accel.is_gpu(device):
        return lambda: accel.synchronize(device)
    return lambda: None


def _time_compute(step: Callable[[], object], cfg: TrainConfig, sync: Callable[[], None],
                  cold: bool) -> list[float]:
    """Compute-only iterations; `cold` (before training: the bare model) gets the same
    warm-up as training, a warm model (after training) one untimed step."""
    iters = diagnostics.compute_iters(cfg)
    if cold:
        return time_iterations(step, warmup_iters=max(1, cfg.warmup_iters), iters=iters,
                               batches_per_iter=cfg.batches_per_iter, sync=sync)
    step()  # allocations of the no-sync path
    return time_iterations(step, warmup_iters=0, iters=iters,
                           batches_per_iter=cfg.batches_per_iter, sync=sync)


def compile_model(model: nn.Module, per_unit: bool) -> nn.Module:
    """torch.compile: the whole model (DDP, Horovod, DeepSpeed wrap it afterwards), or each
    unit FSDP2 shards (blocks, ResNet stages) in place, so that FSDP2's gathers and
    reduce-scatters run between compiled units (torchtitan's order); the embeddings,
    head and loss then run eagerly."""
    if not per_unit:
        return cast(nn.Module, torch.compile(model))
    for parent, name in shard_units(model):
        setattr(parent, name, torch.compile(getattr(parent, name)))
    return model


def tune_backends(device: torch.device) -> None:
    """What every timed phase sets first: on CUDA, cuDNN times its convolution algorithms
    for each new shape (in the warm-up) and keeps the fastest."""
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True


def run(backend: Backend, cfg: TrainConfig, device: torch.device,
        on_iter: Callable[[int, float], object] | None = None, rank: int = 0) -> TrainResult:
    """Build the model, time training (and, with diagnostics, compute-only steps and an
    allreduce probe up to the gradient size); returns this rank's measurements. With
    `cfg.data`, each training step first loads its batch from the dataset (staged before
    the warm-up when asked); a data.DataError says what is wrong with it."""
    tune_backends(device)
    sync = _sync_fn(device)
    model, batch = build(cfg, device)
    try:
        found = checkpoint.agreed_latest(cfg.checkpoint, backend.gather)
    except ValueError as exc:
        raise WorkloadError(str(exc)) from None
    feeder = None
    if cfg.data:
        from .data.feed import model_vocab, open_feeder

        feeder = open_feeder(cfg, batch, rank, model_vocab(model),
                             start_step=found[0] if found else 0)
    try:
        result = _run(backend, cfg, device, on_iter, sync, model, batch, feeder, rank, found)
    finally:
        if feeder is not None:
            feeder.close()
    if feeder is not None:
        result.data = feeder.stats
    return result


def _run(backend: Backend, cfg: TrainConfig, device: torch.device,
         on_iter: Callable[[int, float], object] | None, sync: Callable[[], None],
         model: nn.Module, batch: Batch, feeder: Feeder | None, rank: int = 0,
         found: tuple[int, dict[str, object]] | None = None) -> TrainResult:
    """`run`'s phases on a built model; `found`: the checkpoint to resume from."""
    params = num_parameters(model)
    wire_bytes = grad_bytes(model, backend.wire)
    if cfg.compile:
        model = compile_model(model, per_unit=getattr(backend, "dp_wrapper", "") == "fully_shard")
    compute_times = None
    if cfg.diagnostics and backend.bare_compute:
        optimizer = make_optimizer(model.parameters(), cfg)
        bare = plain_step(model, optimizer, make_scheduler(optimizer, cfg), cfg, device, batch)
        compute_times = _time_compute(bare, cfg, sync, cold=True)
        del optimizer, bare
    step = backend.wrap(model, cfg, device, batch)
    local = local_parameters(model)
    saver = checkpointer.for_backend(cfg.checkpoint, backend, device, sync, rank,
                                     cfg.total_steps - cfg.batches_per_iter)
    restored = saver.resume(found) if saver is not None else None
    last: list[torch.Tensor | None] = [None]
    done, first = [found[0] if found else 0], [0.0]  # steps trained, the first's seconds

    def tracked() -> None:
        began = time.perf_counter() if first[0] == 0.0 else 0.0
        if feeder is not None:
            feeder.load()
        last[0] = step()
        done[0] += 1
        if began:
            sync()
            first[0] = time.perf_counter() - began
        if saver is not None and cfg.target is None:
            saver.after_step(done[0])

    meter = energy.open_meter(device)

    def before_timed() -> None:
        meter.start()
        if feeder is not None:
            feeder.start_timing()

    first_step_at = time.time()  # the first (warm-up) step starts: start-up ends here
    outcome = None
    if cfg.target is not None:
        from .totarget import run_to_target

        if feeder is None:
            raise WorkloadError("a measured target trains on a dataset: give --data")
        times, outcome = run_to_target(cfg, cfg.target, feeder.stats.kind, tracked, model,
                                       backend.gather, device, lambda: autocast(cfg, device),
                                       sync, before_timed, on_iter, rank, restored,
                                       saver.after_step if saver is not None else None)
    else:
        warm, iters = checkpoint.remaining(done[0], cfg.warmup_iters, cfg.iters,
                                           cfg.batches_per_iter)
        times = time_iterations(tracked, warmup_iters=warm, iters=iters,
                                batches_per_iter=cfg.batches_per_iter, sync=sync,
                                on_iter=on_iter, before_timed=before_timed,
                                paused=saver.blocked if saver is not None else lambda: 0.0)
    if saver is not None:
        saver.finish()  # the async save in flight completes before the record
    reading = meter.stop()
    final_loss = None if last[0] is None else float(last[0])
    if cfg.diagnostics and not backend.bare_compute:
        compute_times = _time_compute(backend.compute_step(), cfg, sync, cold=False)
    probe = None
    if cfg.diagnostics:
        sizes = diagnostics.message_sizes(wire_bytes)
        probe = diagnostics.time_allreduces(
            lambda size: backend.allreduce(size, device), sizes, sync)
    return TrainResult(iter_times=times, compute_iter_times=compute_times,
                       probe_times=probe, num_params=params, grad_bytes=wire_bytes,
                       final_loss=final_loss, energy=reading, local_params=local,
                       first_step_at=first_step_at, target=outcome, first_step_s=first[0],
                       checkpoint=saver.stats if saver is not None else None)

