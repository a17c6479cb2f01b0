"""The batch-size probe: the largest per-GPU batch that fits, and the throughput curve
up to it, on one rank (one GPU of one node).

Powers of two from `--min-batch` until a batch does not fit (or `--max-batch`), then a
bisection between the last fit and the first failure down to 1/8 of the batch (or 1).
Each candidate trains the full step (DDP on a one-rank group, so its gradient buckets
count) and is timed briefly. "Does not fit" is the allocator's out-of-memory error on
a GPU. A CPU has no such wall (the host would rather kill the process), so there
`--memory-limit-gb` stands for the device's memory: a batch does not fit when the
process's peak resident memory while training it (VmHWM, reset before each batch)
exceeds what it held before the first batch by more than the limit. An address-space
cap a few GiB above that keeps a runaway batch from taking the host.
"""

from __future__ import annotations

import gc
import resource
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from . import accel
from .timing import mean, time_iterations
from .train import (
    Batch,
    TrainConfig,
    make_optimizer,
    make_scheduler,
    plain_step,
    tune_backends,
)

_OOM_TEXT = ("out of memory", "can't allocate memory", "cannot allocate memory")


def is_oom(exc: BaseException) -> bool:
    """Whether an exception is an allocator's out-of-memory error."""
    if isinstance(exc, (getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError),
                        torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and any(t in str(exc).lower() for t in _OOM_TEXT)


GIB = 1 << 30
SAFETY_MARGIN_GIB = 4.0


def _status_kib(field: str) -> int:
    """A field of /proc/self/status in KiB (VmRSS, VmHWM); 0 where there is none."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def resident_bytes() -> int:
    """This process's resident memory now."""
    return _status_kib("VmRSS") * 1024


def reset_peak_resident() -> int:
    """Reset the peak resident memory (VmHWM; Linux >= 4.0); returns the peak after."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass
    return _status_kib("VmHWM") * 1024


def peak_resident_bytes() -> int:
    """Peak resident memory since the last reset."""
    return _status_kib("VmHWM") * 1024


def limit_address_space(extra_gb: float) -> int:
    """Cap this process's address space at its current size + `extra_gb` GiB (bytes)."""
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[0])
    limit = pages * resource.getpagesize() + int(extra_gb * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    return limit


def candidates(min_batch: int, max_batch: int, fits: Callable[[int], bool]) -> int | None:
    """Search driver: doubling, then bisection. `fits(b)` trains batch b; returns the
    largest batch that fit (None when even `min_batch` does not)."""
    last_fit: int | None = None
    first_fail: int | None = None
    batch = min_batch
    while batch <= max_batch:
        if fits(batch):
            last_fit = batch
            if batch == max_batch:
                return last_fit
            batch = min(batch * 2, max_batch)
        else:
            first_fail = batch
            break
    if last_fit is None or first_fail is None:
        return last_fit
    low, high = last_fit, first_fail
    while high - low > max(1, low // 8):
        mid = (low + high) // 2
        if fits(mid):
            low = mid
        else:
            high = mid
    return low


@dataclass
class Point:
    """One candidate batch."""

    batch_size: int
    fits: bool
    throughput: float | None = None  # img/s of this one GPU
    peak_memory_bytes: int | None = None
    error: str | None = None


def _peak_memory(device: torch.device) -> int:
    peak = accel.peak_memory(device)  # the GPU's allocator (cuda, xpu)
    return peak if peak is not None else peak_resident_bytes()


def probe(wrap: Callable[[], torch.nn.Module], cfg: TrainConfig, device: torch.device,
          min_batch: int, max_batch: int, log: Callable[[str], None] = print,
          memory_limit_gb: float | None = None) -> tuple[list[Point], int | None]:
    """Train each candidate batch on a freshly wrapped model (`wrap()`: an allocation
    failure mid-backward leaves DDP's reducer unusable); returns the points in the order
    tried and the largest batch that fits. `memory_limit_gb`: the CPU's emulated device
    memory (see the module's doc)."""
    points: list[Point] = []
    cpu_limit = None
    if device.type == "cpu" and memory_limit_gb is not None:
        cpu_limit = resident_bytes() + int(memory_limit_gb * GIB)
        limit_address_space(memory_limit_gb + SAFETY_MARGIN_GIB)
    def sync() -> None:
        accel.synchronize(device)

    tune_backends(device)  # as train.run: each batch's throughput is what a run gets

    def fits(batch_size: int) -> bool:
        accel.reset_peak_memory(device)
        run_cfg = replace(cfg, batch_size=batch_size)
        model = wrap()
        optimizer = make_optimizer(model.parameters(), cfg)
        data = target = step = None
        reset_peak_resident()
        try:
            shape = (batch_size, 3, cfg.image_size, cfg.image_size)
            data = torch.randn(shape, device=device)
            if cfg.channels_last:
                data = data.contiguous(memory_format=torch.channels_last)
            target = torch.randint(0, cfg.num_classes, (batch_size,), device=device)
            step = plain_step(model, optimizer, make_scheduler(optimizer, cfg), run_cfg,
                              device, Batch(data, target))
            times = time_iterations(step, warmup_iters=1, iters=cfg.iters,
                                    batches_per_iter=cfg.batches_per_iter, sync=sync)
            peak = _peak_memory(device)
            point = Point(batch_size, True, batch_size * cfg.batches_per_iter / mean(times),
                          peak)
            if cpu_limit is not None and peak > cpu_limit:
                point = Point(batch_size, False, peak_memory_bytes=peak,
                              error=f"peak resident memory {peak / GIB:.2f} "
                              f"GiB is above the limit of {cpu_limit / GIB:.2f} GiB")
        except Exception as exc:  # only out-of-memory counts as "does not fit"
            if not is_oom(exc):
                raise
            point = Point(batch_size, False, error=str(exc).splitlines()[0][:200])
        finally:
            optimizer.zero_grad(set_to_none=True)
            del data, target, step, optimizer, model  # free all before the next batch
            gc.collect()
            accel.empty_cache(device)
        points.append(point)
        log(f"Batch {batch_size}: " + (f"{point.throughput:.1f} img/sec per GPU"
                                        if point.fits else "does not fit (out of memory)"))
        return point.fits

    best = candidates(min_batch, max_batch, fits)
    return points, best


def record(points: list[Point], best: int | None, cfg: TrainConfig, max_batch: int,
           device: torch.device) -> dict[str, object]:
    """The probe's metrics record."""
    tried = sorted(points, key=lambda p: p.batch_size)
    return {
        "schema": "scalestudy.batch-probe/1",
        "source": "batch_probe",
        "model": cfg.model,
        "image_size": cfg.image_size,
        "precision": cfg.precision,
        "channels_last": cfg.channels_last,
        "device": device.type,
        "max_batch_tried": max_batch,
        "largest_batch_that_fits": best,
        "points": [p.__dict__ for p in tried],
    }
