"""The torch.distributed side: device, process group, shutdown, and the DDP backend."""

from __future__ import annotations

import gc
import math
import os
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from . import accel, noise
from .env import DistEnv
from .options import Value
from .train import (
    Batch,
    LRScheduler,
    T,
    TrainConfig,
    WorkloadError,
    make_optimizer,
    make_scheduler,
    plain_step,
)

TIMEOUT_ENV = "SCALESTUDY_DIST_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 300.0


def select_device(env: DistEnv, wanted: str = "auto") -> torch.device:
    """The GPU of this local rank (CUDA, else Intel XPU) when torch sees one, else the CPU.

    `wanted="cuda"` or `"xpu"` (a GPU system's job) makes a missing GPU an error instead
    of a silent CPU run whose numbers would mean nothing.
    """
    if wanted == "cpu":
        return torch.device("cpu")
    if wanted == "cuda" and not accel.available("cuda"):
        raise WorkloadError(
            "this job expects CUDA GPUs but torch sees none (torch "
            f"{torch.__version__}, CUDA build: {torch.version.cuda or 'no'}); load the "
            "site's CUDA or ROCm PyTorch in the profile's setup"
        )
    if wanted == "xpu" and not accel.available("xpu"):
        raise WorkloadError(
            "this job expects Intel XPU devices but torch sees none (torch "
            f"{torch.__version__}, XPU build: {getattr(torch.version, 'xpu', None) or 'no'}); "
            "load the site's XPU PyTorch in the profile's setup (Aurora: `module load "
            "frameworks`) and keep ZE_FLAT_DEVICE_HIERARCHY=FLAT (one device per tile)"
        )
    for kind in ((wanted,) if wanted in accel.DIST_BACKENDS else ("cuda", "xpu")):
        if accel.available(kind):
            return torch.device(kind, env.local_rank % accel.count(kind))
    return torch.device("cpu")


def resolve_dist_backend(requested: str, device: torch.device) -> str:
    """``auto`` -> nccl on CUDA, xccl on XPU, gloo on CPU; a GPU backend on another
    device is an error, and so is xccl in a torch built without it."""
    wanted = accel.dist_backend(device) if requested == "auto" else requested
    needs = {v: k for k, v in accel.DIST_BACKENDS.items()}.get(wanted)
    if needs is not None and device.type != needs:
        raise WorkloadError(
            f"--dist-backend {wanted} needs {needs} devices, and this rank runs on "
            f"{device.type}; use {accel.dist_backend(device)} (or auto)")
    if wanted == "xccl" and not accel.xccl_available():
        raise WorkloadError(
            f"torch {torch.__version__} has no xccl backend "
            "(torch.distributed.is_xccl_available() is False): load a torch built for "
            "XPU with oneCCL (2.8 or later; Aurora: `module load frameworks`)")
    return wanted


def check_precision(precision: str, device: torch.device) -> None:
    """fp16 needs CUDA (autocast + GradScaler); bf16 and fp32 run anywhere (bf16
    autocasts on the device's own type: cuda, xpu or cpu)."""
    if precision == "fp16" and device.type != "cuda":
        raise WorkloadError(f"--precision fp16 needs a CUDA GPU; use bf16 or fp32 on "
                            f"{_named(device)}")


def _named(device: torch.device) -> str:
    """`CPU`, or the GPU's device type (xpu) as torch names it."""
    return "CPU" if device.type == "cpu" else device.type


def check_comm_hook(hook: str, device: torch.device) -> None:
    """torch's bf16 compression hook needs NCCL on CUDA; fp16 and none run anywhere."""
    if hook == "bf16" and device.type != "cuda":
        raise WorkloadError("--comm-hook bf16 needs CUDA GPUs with NCCL (torch's "
                            f"bf16_compress_hook); use fp16 on {_named(device)}")


def dist_timeout(environ: Mapping[str, str]) -> timedelta:
    """Timeout of process-group set-up and collectives, from SCALESTUDY_DIST_TIMEOUT_S."""
    raw = environ.get(TIMEOUT_ENV, "").strip() or str(DEFAULT_TIMEOUT_S)
    try:
        seconds = float(raw)
    except ValueError:
        raise WorkloadError(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds") from None
    if seconds <= 0:
        raise WorkloadError(f"{TIMEOUT_ENV} must be > 0, got {raw}")
    return timedelta(seconds=seconds)


def set_cpu_threads(env: DistEnv, environ: Mapping[str, str]) -> None:
    """Share this node's cores among its ranks unless OMP_NUM_THREADS or a binding says how."""
    if environ.get("OMP_NUM_THREADS"):
        return
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    usable = usable or 1
    bound = usable < (os.cpu_count() or usable)  # the launcher pinned us: use all we got
    torch.set_num_threads(usable if bound else max(1, usable // env.local_world_size))


def init_process_group(
    env: DistEnv, backend: str, timeout: timedelta, device: torch.device
) -> None:
    """Join the job's process group; a single process uses an in-memory store (no port)."""
    accel.set_device(device)  # torch.cuda/torch.xpu.set_device(local rank's device)
    if env.world_size == 1:
        store = dist.HashStore()
        dist.init_process_group(backend, store=store, rank=0, world_size=1, timeout=timeout)
        return
    # env:// lets torchrun's workers share the agent's store (TORCHELASTIC_USE_AGENT_STORE).
    os.environ["MASTER_ADDR"] = env.master_addr
    os.environ["MASTER_PORT"] = str(env.master_port)
    dist.init_process_group(
        backend,
        init_method="env://",
        rank=env.rank,
        world_size=env.world_size,
        timeout=timeout,
    )


#: What wrap() keeps for compute_step: optimizer, lr scheduler, config, device, batch.
_StepArgs = tuple[torch.optim.Optimizer, LRScheduler, TrainConfig, torch.device, Batch]
#: A DDP communication hook: (state, bucket) -> the bucket's reduced buffer, later.
Hook = Callable[[dist.ProcessGroup, dist.GradBucket], "torch.futures.Future[torch.Tensor]"]


class DDPBackend:
    """torch DistributedDataParallel over the job's process group."""

    name = "ddp"
    bare_compute = False

    def __init__(self, options: Mapping[str, Value]) -> None:
        self.options = dict(options)
        self.wire = str(self.options.get("comm_hook") or "none")
        self._model: DistributedDataParallel | None = None
        self._step_args: _StepArgs | None = None
        self._buckets = [0]  # allreduce buckets per step, counted by a simulated network
        self._noise: noise.NoiseMeter | None = None  # the gradient noise scale's hook
        self._noise_why = "not started"

    def wrap(self, model: nn.Module, cfg: TrainConfig, device: torch.device,
             batch: Batch) -> Callable[[], torch.Tensor]:
        """DDP with the run's bucket, view, static-graph and compression settings."""
        opts = self.options
        ddp = DistributedDataParallel(
            model,
            device_ids=[device.index] if accel.is_gpu(device) else None,
            bucket_cap_mb=float(opts.get("bucket_cap_mb") or 25.0),
            gradient_as_bucket_view=bool(opts.get("gradient_as_bucket_view", False)),
            static_graph=bool(opts.get("static_graph", False)),
        )
        hook = _COMM_HOOKS.get(self.wire)
        alpha_s = float(opts.get("sim_latency_ms") or 0.0) / 1e3
        beta_s = float(opts.get("sim_ns_per_byte") or 0.0) / 1e9
        if alpha_s > 0 or beta_s > 0:
            hook = simulated_network(alpha_s, beta_s, dist.get_world_size(),
                                     hook or default_hooks.allreduce_hook,
                                     2 if self.wire in ("fp16", "bf16") else None,
                                     self._buckets)
        world = dist.get_world_size()
        self._noise_why = noise.reason_not_measured(world, not cfg.data)
        if not self._noise_why:  # wraps the hook in use: compression, simulated network
            self._noise = noise.NoiseMeter(world)
            hook = self._noise.wrap(hook or default_hooks.allreduce_hook)
        if hook is not None:
            ddp.register_comm_hook(state=None, hook=hook)
        self._model = ddp
        optimizer = make_optimizer(ddp.parameters(), cfg)
        self._step_args = (optimizer, make_scheduler(optimizer, cfg), cfg, device, batch)
        self.trained = (ddp, optimizer, self._step_args[1])  # what a checkpoint saves
        return measured(plain_step(ddp, *self._step_args), self._noise)

    def compute_step(self) -> Callable[[], torch.Tensor]:
        """The same step under `no_sync()`: gradients stay local."""
        assert self._model is not None and self._step_args is not None, "wrap() first"
        return plain_step(self._model, *self._step_args, context=self._model.no_sync)

    def allreduce(self, size_bytes: int, device: torch.device) -> Callable[[], object]:
        """dist.all_reduce of one fp32 buffer on the job's process group."""
        return allreduce_buffer(size_bytes, device)

    def gather(self, obj: T) -> list[T]:
        """Every rank's `obj`, in rank order."""
        return gather(obj)

    def shutdown(self, device: torch.device) -> None:
        """Barrier, garbage collected, the process group destroyed."""
        shutdown(device)

    def describe(self) -> dict[str, object]:
        """The DDP settings in effect (and the buckets per step a simulated network saw)."""
        settings: dict[str, Value] = {k: self.options[k] for k in _DDP_KEYS if k in self.options
                    and not (k.startswith("sim_") and not self.options[k])}  # only when set
        if self._buckets[0]:
            settings["buckets"] = self._buckets[0]
        return {"ddp": settings, **self._noise_fields()}

    def _noise_fields(self) -> dict[str, object]:
        """The noise scale's record keys: B_small the per-rank batch, B_big the global
        one, over the steps after the warm-up."""
        if self._step_args is None:
            return noise.unavailable(self._noise_why)
        cfg = self._step_args[2]
        world = dist.get_world_size()
        return noise.fields(self._noise, self._noise_why, cfg.batch_size,
                            cfg.batch_size * world, cfg.warmup_iters * cfg.batches_per_iter)


_DDP_KEYS = ("bucket_cap_mb", "gradient_as_bucket_view", "static_graph", "comm_hook",
             "sim_latency_ms", "sim_ns_per_byte")
_COMM_HOOKS: dict[str, Hook] = {
    "fp16": default_hooks.fp16_compress_hook,
    "bf16": default_hooks.bf16_compress_hook,
}


def measured(step: Callable[[], torch.Tensor], meter: noise.NoiseMeter | None
             ) -> Callable[[], torch.Tensor]:
    """`step`, closing the noise meter's step after each (itself without a meter)."""
    if meter is None:
        return step

    def closed() -> torch.Tensor:
        loss = step()
        meter.end_step()
        return loss

    return closed


def simulated_delay(alpha_s: float, beta_s: float, world: int, nbytes: int) -> float:
    """Seconds a simulated network adds to one allreduce of `nbytes` among `world` ranks:
    the scaling model's own form, alpha·log2 P + beta·2(P−1)/P·S (0 on one rank)."""
    return alpha_s * math.log2(world) + beta_s * 2 * (world - 1) / world * nbytes


def simulated_network(alpha_s: float, beta_s: float, world: int, inner: Hook,
                      wire_item_bytes: int | None = None,
                      buckets: list[int] | None = None) -> Hook:
    """A DDP comm hook: wait `simulated_delay` for this bucket, then allreduce it with
    `inner` (the plain allreduce or a compression hook). The wait is in the backward
    pass, not hidden behind compute, so a fit of the step times meets alpha and beta
    as known truth (the testbed's own network adds its small share). `buckets[0]` counts
    the buckets of a step: alpha is paid once per bucket."""
    buckets = buckets if buckets is not None else [0]

    def hook(state: dist.ProcessGroup, bucket: dist.GradBucket
             ) -> torch.futures.Future[torch.Tensor]:
        buffer = bucket.buffer()
        nbytes = buffer.numel() * (wire_item_bytes or buffer.element_size())
        time.sleep(simulated_delay(alpha_s, beta_s, world, nbytes))
        buckets[0] = max(buckets[0], bucket.index() + 1)
        return inner(state, bucket)

    # DDP checks the annotations as objects; this module's are strings (future import)
    hook.__annotations__ = {"state": dist.ProcessGroup, "bucket": dist.GradBucket,
                            "return": torch.futures.Future[torch.Tensor]}
    return hook


def allreduce_buffer(size_bytes: int, device: torch.device) -> Callable[[], object]:
    """A function that allreduces one fp32 buffer of `size_bytes` (allocated here, once)
    on the job's torch.distributed group: the probe's unit of work."""
    buf = torch.ones(max(1, size_bytes // 4), dtype=torch.float32, device=device)
    return lambda: dist.all_reduce(buf)


def gather(obj: T) -> list[T]:
    """Every rank's ``obj``, in rank order (all_gather_object)."""
    out: list[T | None] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return cast("list[T]", out)


def shutdown(device: torch.device) -> None:
    """Barrier, drop garbage, destroy the group: avoids gloo aborts at interpreter exit."""
    if not dist.is_initialized():
        return
    if dist.get_backend() in accel.DIST_BACKENDS.values():
        dist.barrier(device_ids=[device.index])
    else:
        dist.barrier()
    gc.collect()
    dist.destroy_process_group()
