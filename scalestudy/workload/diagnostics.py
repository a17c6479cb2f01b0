"""Communication diagnostics: compute-only timing and an allreduce probe.

The formulas are those of nccl-tests: for an allreduce of S bytes taking t seconds on
n ranks, algbw = S / t and busbw = algbw x 2(n-1)/n (the bytes each rank's link carries
in a ring). Pure apart from `allreduce_probe`, which drives the backend's allreduce
through callables, so every backend (torch.distributed, Horovod) uses the same code.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from .timing import mean


class TrainConfig(Protocol):
    """What the summary reads of train.TrainConfig (this module imports nothing of train)."""

    @property
    def iters(self) -> int: ...
    @property
    def batches_per_iter(self) -> int: ...
    @property
    def diagnostics(self) -> bool: ...
    @property
    def units_per_step(self) -> float: ...


class TrainResult(Protocol):
    """What the summary reads of one rank's train.TrainResult."""

    @property
    def iter_times(self) -> list[float]: ...
    @property
    def compute_iter_times(self) -> list[float] | None: ...
    @property
    def probe_times(self) -> list[float] | None: ...
    @property
    def num_params(self) -> int: ...
    @property
    def grad_bytes(self) -> int: ...

FLOAT_BYTES = 4
SMALLEST_MESSAGE = 4 << 10  # 4 KiB
GB = 1e9  # bandwidths in GB/s (10^9 bytes), as nccl-tests prints them


def bus_factor(world_size: int) -> float:
    """nccl-tests' allreduce bus-bandwidth factor 2(n-1)/n (0 for one rank)."""
    if world_size < 1:
        raise ValueError(f"world size must be >= 1, got {world_size}")
    return 2 * (world_size - 1) / world_size


def algbw(size_bytes: int, seconds: float) -> float:
    """Algorithm bandwidth in GB/s: bytes / time."""
    return size_bytes / seconds / GB if seconds > 0 else math.nan


def busbw(size_bytes: int, seconds: float, world_size: int) -> float:
    """Bus bandwidth in GB/s: algbw x 2(n-1)/n."""
    return algbw(size_bytes, seconds) * bus_factor(world_size)


def message_sizes(grad_bytes: int, smallest: int = SMALLEST_MESSAGE) -> list[int]:
    """Powers of 4 from `smallest` (bytes, multiples of 4) up to the gradient size, which
    is always the last size (rounded down to whole fp32 elements)."""
    top = max(FLOAT_BYTES, grad_bytes - grad_bytes % FLOAT_BYTES)
    sizes = []
    size = min(smallest, top)
    while size < top:
        sizes.append(size)
        size *= 4
    sizes.append(top)
    return sizes


def repetitions(size_bytes: int) -> int:
    """Timed allreduces per size: more for small messages, whose times are noisy."""
    if size_bytes <= 1 << 20:
        return 10
    if size_bytes <= 16 << 20:
        return 5
    return 3


def time_allreduces(
    allreduce: Callable[[int], Callable[[], object]],
    sizes: Sequence[int],
    sync: Callable[[], object] = lambda: None,
) -> list[float]:
    """This rank's mean seconds per allreduce of each size.

    `allreduce(size)` returns a function that allreduces one buffer of `size` bytes,
    allocated once outside the timing. Every rank must call this with the same sizes.
    """
    means: list[float] = []
    for size in sizes:
        run = allreduce(size)
        run()  # warm-up: connections, buffers
        sync()
        times = []
        for _ in range(repetitions(size)):
            start = time.perf_counter()
            run()
            sync()
            times.append(time.perf_counter() - start)
        means.append(mean(times))
    return means


def probe_table(sizes: Sequence[int], seconds: Sequence[float],
                world_size: int) -> dict[str, list[float]]:
    """The probe's table from the slowest rank's mean time per size."""
    pairs = list(zip(sizes, seconds, strict=True))
    return {
        "bytes": [int(s) for s in sizes],
        "time_s": [round(t, 9) for t in seconds],
        "algbw_GBps": [round(algbw(s, t), 6) for s, t in pairs],
        "busbw_GBps": [round(busbw(s, t, world_size), 6) for s, t in pairs],
    }


def comm_summary(
    step_times: Sequence[float], compute_times: Sequence[float], global_batch: float
) -> dict[str, float]:
    """From each rank's mean seconds per step with and without gradient sync: the
    compute-only throughput over all ranks and comm_overhead = 1 - t_compute / t_step."""
    t_step, t_compute = mean(step_times), mean(compute_times)
    per_rank_batch = global_batch / len(compute_times)
    return {
        "step_time_s": round(t_step, 9),
        "compute_time_s": round(t_compute, 9),
        "compute_throughput": math.fsum(per_rank_batch / t for t in compute_times),
        "comm_overhead": round(1 - t_compute / t_step, 6),
    }


def probe_summary(probe: dict[str, list[float]]) -> dict[str, float]:
    """The probe's headline numbers: bus bandwidth at the largest message, latency at
    the smallest."""
    return {
        "allreduce_busbw_GBps": probe["busbw_GBps"][-1],
        "allreduce_latency_s": probe["time_s"][0],
    }


def compute_iters(cfg: TrainConfig) -> int:
    """Timed compute-only iterations: a few are enough (it is a ratio, not the result)."""
    return max(1, min(cfg.iters, 3))


def summarize(results: Sequence[TrainResult], cfg: TrainConfig, world_size: int
              ) -> dict[str, object]:
    """The diagnostics part of the record, from every rank's measurements."""
    first = results[0]
    out: dict[str, object] = {"num_params": first.num_params, "grad_bytes": first.grad_bytes,
                           "diagnostics": cfg.diagnostics}
    if first.compute_iter_times is not None:
        steps = [mean(r.iter_times) / cfg.batches_per_iter for r in results]
        computes = [mean(r.compute_iter_times or [0.0]) / cfg.batches_per_iter
                    for r in results]
        out.update(comm_summary(steps, computes, cfg.units_per_step * world_size))
        out["compute_iters"] = compute_iters(cfg)
        out["rank_compute_s"] = [round(t, 9) for t in computes]
    if first.probe_times is not None:
        sizes = message_sizes(first.grad_bytes)
        slowest = [max(r.probe_times[i] for r in results if r.probe_times)
                   for i in range(len(sizes))]
        probe = probe_table(sizes, slowest, world_size)
        out["allreduce_probe"] = probe
        out.update(probe_summary(probe))
    return out
