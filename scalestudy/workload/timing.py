"""Per-rank timing of training iterations, and the statistics over ranks (as Horovod's)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import TypedDict

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
    paused: Callable[[], float] = lambda: 0.0,
) -> list[float]:
    """Run ``warmup_iters`` untimed then ``iters`` timed iterations of ``batches_per_iter`` steps.

    ``sync`` waits for the device (torch.cuda.synchronize on CUDA) before each clock read.
    Returns the seconds of each timed iteration; ``on_iter(i, seconds)`` is called after each;
    ``before_timed()`` once between warm-up and the first timed iteration (device synced);
    ``paused()``: seconds spent so far outside the steps (checkpoint saves), left out.
    """
    for _ in range(warmup_iters * batches_per_iter):
        step()
    times: list[float] = []
    for i in range(iters):
        sync()
        if i == 0:
            before_timed()
        start, left_out = time.perf_counter(), paused()
        for _ in range(batches_per_iter):
            step()
        sync()
        times.append(time.perf_counter() - start - (paused() - left_out))
        if on_iter is not None:
            on_iter(i, times[-1])
    return times



class Stats(TypedDict):
    """Throughput statistics over ranks (`aggregate`): the record's headline fields."""

    throughput: float
    throughput_ci: float
    throughput_mean_of_rates: float
    throughput_estimator: str
    throughput_per_rank_min: float
    throughput_per_rank_mean: float
    throughput_per_rank_max: float
    iter_time_mean: float
    iter_time_std: float
    rank_seconds: list[float]
    units_per_rank: float


def aggregate(
    per_rank_times: Sequence[Sequence[float]], batch_size: float, batches_per_iter: int
) -> Stats:
    """Throughput statistics over ranks from each rank's iteration times (seconds).

    ``batch_size``: what one rank trains per step, in the throughput's unit (images, or
    its share of the tokens when tp x pp ranks train one replica's batch).

    ``throughput`` is work over time: each rank's samples (or tokens) of the timed
    iterations over their summed seconds, summed over ranks. A mean of per-iteration
    rates (Horovod's convention, kept as ``throughput_mean_of_rates``) is larger
    whenever iteration times vary, and the more so the more they vary. Its band,
    ``throughput_ci``, is 1.96 x the coefficient of variation of all timed iterations,
    times the throughput: the spread of one iteration's rate around the headline figure.
    ``rank_seconds`` and ``units_per_rank`` let a reader recompute the figure.
    """
    if not per_rank_times or not all(per_rank_times):
        raise ValueError("every rank needs at least one timed iteration")
    images = batch_size * batches_per_iter
    seconds = [math.fsum(times) for times in per_rank_times]
    rank_rates = [images * len(times) / total for times, total in zip(per_rank_times, seconds,
                                                                        strict=True)]
    pooled_times = [t for times in per_rank_times for t in times]
    throughput = math.fsum(rank_rates)
    return {
        "throughput": throughput,
        "throughput_ci": throughput * CI_Z * std(pooled_times) / mean(pooled_times),
        "throughput_mean_of_rates": math.fsum(mean(rates(times, images))
                                              for times in per_rank_times),
        "throughput_estimator": "work over time",
        "throughput_per_rank_min": min(rank_rates),
        "throughput_per_rank_mean": mean(rank_rates),
        "throughput_per_rank_max": max(rank_rates),
        "iter_time_mean": mean(pooled_times),
        "iter_time_std": std(pooled_times),
        "rank_seconds": [round(s, 9) for s in seconds],
        "units_per_rank": images * len(per_rank_times[0]),
    }
