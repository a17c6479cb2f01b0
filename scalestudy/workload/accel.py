"""The GPU behind a torch.device, as one table: CUDA (NVIDIA, or AMD through ROCm) or XPU
(Intel, torch.xpu, as on Aurora): whether torch sees it, how many, its synchronize, its
memory counters and the process-group backend that runs collectives on it."""

from __future__ import annotations

from types import ModuleType

import torch
import torch.distributed as dist

#: Device types that are GPUs, and each one's process-group backend.
DIST_BACKENDS = {"cuda": "nccl", "xpu": "xccl"}


def is_gpu(device: torch.device) -> bool:
    """Whether `device` is a GPU (cuda or xpu) rather than the CPU."""
    return device.type in DIST_BACKENDS


def module(kind: str) -> ModuleType | None:
    """torch.cuda or torch.xpu (None: this torch has no such module, or `kind` is cpu)."""
    return getattr(torch, kind, None) if kind in DIST_BACKENDS else None


def available(kind: str) -> bool:
    """Whether torch sees a device of `kind` (cuda or xpu) on this node."""
    mod = module(kind)
    return bool(mod is not None and mod.is_available())


def count(kind: str) -> int:
    """How many devices of `kind` torch sees on this node (0 when none)."""
    mod = module(kind)
    return int(mod.device_count()) if mod is not None and available(kind) else 0


def set_device(device: torch.device) -> None:
    """Make `device` this process's current GPU (nothing on the CPU)."""
    mod = module(device.type)
    if mod is not None:
        mod.set_device(device)


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on `device` (nothing on the CPU)."""
    mod = module(device.type)
    if mod is not None:
        mod.synchronize(device)


def dist_backend(device: torch.device) -> str:
    """The process group's backend for `device`: nccl on CUDA, xccl on XPU, gloo on CPU."""
    return DIST_BACKENDS.get(device.type, "gloo")


def xccl_available() -> bool:
    """Whether this torch was built with the xccl backend (oneCCL; torch's XPU builds)."""
    check = getattr(dist, "is_xccl_available", None)
    return bool(check is not None and check())


def peak_memory(device: torch.device) -> int | None:
    """Bytes the allocator peaked at on `device` since the last reset (None: on the CPU)."""
    mod = module(device.type)
    return int(mod.max_memory_allocated(device)) if mod is not None else None


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak for `peak_memory` (nothing on the CPU)."""
    mod = module(device.type)
    if mod is not None:
        mod.reset_peak_memory_stats(device)


def empty_cache(device: torch.device) -> None:
    """Hand the allocator's cached blocks back (after an out-of-memory; nothing on CPU)."""
    mod = module(device.type)
    if mod is not None:
        mod.empty_cache()
