"""Per-rank timing of training iterations, and the statistics over ranks (as Horovod's)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

CI_Z = 1.96  # 95 % half-width = 1.96 x std, as Horovod's synthetic benchmarks print it


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean; ValueError when empty."""
    if not values:
        raise ValueError("mean of no values")
    return math.fsum(values) / len(values)


def std(values: Sequence[float]) -> float:
    """Population standard deviation (numpy.std's default, ddof=0)."""
    centre = mean(values)
    return math.sqrt(math.fsum((v - centre) ** 2 for v in values) / len(values))


def ci95(values: Sequence[float]) -> float:
    """Horovod's 95 % half-width: 1.96 x population std."""
    return CI_Z * std(values)


def rates(iter_times: Sequence[float], images_per_iter: float) -> list[float]:
    """img/s (or tokens/s) of each iteration."""
    return [images_per_iter / t for t in iter_times]


def time_iterations(
    step: Callable[[], object],
    *,
    warmup_iters: int,
    iters: int,
    batches_per_iter: int,
    sync: Callable[[], object] = lambda: None,
    on_iter: Callable[[int, float], object] | None = None,
    before_timed: Callable[[], object] = lambda: None,
) -> list[float]:
    """Run ``warmup_iters`` untimed then ``iters`` timed iterations of ``batches_per_iter`` steps.

    ``sync`` waits for the device (torch.cuda.synchronize on CUDA) before each clock read.
    Returns the seconds of each timed iteration; ``on_iter(i, seconds)`` is called after each;
    ``before_timed()`` once between warm-up and the first timed iteration (device synced).
    """
    for _ in range(warmup_iters * batches_per_iter):
        step()
    times: list[float] = []
    for i in range(iters):
        sync()
        if i == 0:
            before_timed()
        start = time.perf_counter()
        for _ in range(batches_per_iter):
            step()
        sync()
        times.append(time.perf_counter() - start)
        if on_iter is not None:
            on_iter(i, times[-1])
    return times


def aggregate(
    per_rank_times: Sequence[Sequence[float]], batch_size: float, batches_per_iter: int
) -> dict[str, float]:
    """Throughput statistics over ranks from each rank's iteration times (seconds).

    ``batch_size``: what one rank trains per step, in the throughput's unit (images, or
    its share of the tokens when tp x pp ranks train one replica's batch).

    ``throughput`` is the sum of each rank's own mean img/s; its CI is 1.96 x the std of
    the per-rank img/s over all timed iterations of all ranks, times the world size.
    """
    if not per_rank_times or not all(per_rank_times):
        raise ValueError("every rank needs at least one timed iteration")
    images = batch_size * batches_per_iter
    per_rank = [rates(times, images) for times in per_rank_times]
    rank_means = [mean(r) for r in per_rank]
    pooled_rates = [r for rank in per_rank for r in rank]
    pooled_times = [t for times in per_rank_times for t in times]
    world = len(per_rank_times)
    return {
        "throughput": math.fsum(rank_means),
        "throughput_ci": ci95(pooled_rates) * world,
        "throughput_per_rank_min": min(rank_means),
        "throughput_per_rank_mean": mean(rank_means),
        "throughput_per_rank_max": max(rank_means),
        "iter_time_mean": mean(pooled_times),
        "iter_time_std": std(pooled_times),
    }
