"""PyTorch DistributedDataParallel training on synthetic data (like Horovod's benchmark)."""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from .env import DistEnv
from .models import build_model, num_parameters
from .timing import time_iterations

TIMEOUT_ENV = "SCALESTUDY_DIST_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 300.0
_AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class WorkloadError(Exception):
    """A setting this machine cannot run; reported in one line, exit status 2."""


@dataclass(frozen=True)
class TrainConfig:
    """What to train and how to time it."""

    model: str
    image_size: int
    num_classes: int
    batch_size: int
    precision: str
    warmup_iters: int
    iters: int
    batches_per_iter: int
    seed: int


def select_device(env: DistEnv, wanted: str = "auto") -> torch.device:
    """The GPU of this local rank when CUDA is available, else the CPU.

    `wanted="cuda"` (a GPU system's job) makes a missing GPU an error instead of a
    silent CPU run whose numbers would mean nothing.
    """
    if wanted == "cuda" and not torch.cuda.is_available():
        raise WorkloadError(
            "this job expects CUDA GPUs but torch sees none (torch "
            f"{torch.__version__}, CUDA build: {torch.version.cuda or 'no'}); load the "
            "site's CUDA or ROCm PyTorch in the profile's setup (Intel XPU devices, as on "
            "Aurora, are not supported by the bundled benchmark yet)"
        )
    if wanted == "cpu":
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda", env.local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def resolve_dist_backend(requested: str, device: torch.device) -> str:
    """``auto`` -> nccl on CUDA, gloo on CPU; nccl without CUDA is an error."""
    if requested == "auto":
        return "nccl" if device.type == "cuda" else "gloo"
    if requested == "nccl" and device.type != "cuda":
        raise WorkloadError("--dist-backend nccl needs CUDA GPUs; use gloo (or auto) on CPU")
    return requested


def check_precision(precision: str, device: torch.device) -> None:
    """fp16 needs CUDA (autocast + GradScaler); bf16 and fp32 run anywhere."""
    if precision == "fp16" and device.type != "cuda":
        raise WorkloadError("--precision fp16 needs a CUDA GPU; use bf16 or fp32 on CPU")


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
    if device.type == "cuda":
        torch.cuda.set_device(device)
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


def train(
    cfg: TrainConfig, device: torch.device, on_iter: Callable[[int, float], object] | None = None
) -> tuple[list[float], int]:
    """Build, wrap and time the model; returns (seconds per timed iteration, parameters).

    Everything heavy is local, so it is released when this returns (clean shutdown).
    """
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = True
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, cfg.num_classes).to(device)
    params = num_parameters(model)
    ddp_model = DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    shape = (cfg.batch_size, 3, cfg.image_size, cfg.image_size)
    data = torch.randn(shape, device=device)
    target = torch.randint(0, cfg.num_classes, (cfg.batch_size,), device=device)
    amp_dtype = _AMP_DTYPES.get(cfg.precision)
    scaler = torch.amp.GradScaler("cuda") if cfg.precision == "fp16" else None

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = loss_fn(ddp_model(data), target)
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    times = time_iterations(
        step,
        warmup_iters=cfg.warmup_iters,
        iters=cfg.iters,
        batches_per_iter=cfg.batches_per_iter,
        sync=sync,
        on_iter=on_iter,
    )
    return times, params


def gather(obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order (all_gather_object)."""
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def shutdown(device: torch.device) -> None:
    """Barrier, drop garbage, destroy the group: avoids gloo aborts at interpreter exit."""
    if not dist.is_initialized():
        return
    if dist.get_backend() == "nccl":
        dist.barrier(device_ids=[device.index])
    else:
        dist.barrier()
    gc.collect()
    dist.destroy_process_group()
