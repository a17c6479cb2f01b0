"""Timing loop and statistics of the benchmark (pure functions)."""

from __future__ import annotations

import math

import pytest

from scalestudy.workload import timing
from scalestudy.workload.timing import CI_Z, aggregate, mean, rates, std, time_iterations


def test_mean_std_ci_match_numpy_conventions():
    values = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]
    assert mean(values) == 5.0
    assert std(values) == 2.0  # population std (ddof=0), like numpy.std
    assert CI_Z * std(values) == pytest.approx(3.92)  # Horovod's 95 % half-width
    assert std([3.0]) == 0.0


def test_empty_values_are_an_error():
    with pytest.raises(ValueError):
        mean([])


def test_rates():
    assert rates([0.5, 2.0], 32) == [64.0, 16.0]


def test_time_iterations_counts_steps_and_syncs(monkeypatch):
    clock = iter(float(t) for t in range(100))
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(clock))
    steps, syncs, seen = [], [], []
    times = time_iterations(
        lambda: steps.append(1),
        warmup_iters=2,
        iters=3,
        batches_per_iter=4,
        sync=lambda: syncs.append(len(steps)),
        on_iter=lambda i, s: seen.append((i, s)),
    )
    assert len(steps) == 2 * 4 + 3 * 4
    assert times == [1.0, 1.0, 1.0]  # one fake tick between start and end reads
    assert seen == [(0, 1.0), (1, 1.0), (2, 1.0)]
    # synchronised before the clock starts and before it stops, after warm-up
    assert syncs == [8, 12, 12, 16, 16, 20]


def test_time_iterations_measures_real_time():
    import time

    times = time_iterations(lambda: time.sleep(0.01), warmup_iters=0, iters=2, batches_per_iter=2)
    assert len(times) == 2
    assert all(0.015 < t < 0.5 for t in times)


def test_aggregate_single_rank():
    stats = aggregate([[1.0, 2.0]], batch_size=8, batches_per_iter=2)
    # 16 images per iteration: 32 images in 3 s, where the mean of 16 and 8 img/s is 12
    assert stats["throughput"] == pytest.approx(32 / 3)
    assert stats["throughput_mean_of_rates"] == 12.0
    assert stats["throughput_per_rank_min"] == stats["throughput_per_rank_max"] == \
        pytest.approx(32 / 3)
    assert stats["throughput_ci"] == pytest.approx(32 / 3 * 1.96 * 0.5 / 1.5)
    assert stats["iter_time_mean"] == 1.5
    assert stats["iter_time_std"] == 0.5


def test_uneven_iterations_pin_work_over_time_below_the_mean_of_rates():
    # One slow iteration among fast ones (a shared node, a checkpoint, jitter): the work
    # done over the time taken, not the mean of the iterations' rates.
    times = [0.1, 0.1, 0.1, 0.4]
    stats = aggregate([times, times], batch_size=10, batches_per_iter=1)
    assert stats["throughput"] == pytest.approx(2 * 40 / 0.7)  # 114.3 img/s
    assert stats["throughput_mean_of_rates"] == pytest.approx(2 * (100 + 100 + 100 + 25) / 4)
    assert stats["throughput_mean_of_rates"] / stats["throughput"] == pytest.approx(1.421875)
    # The figure is recomputable from the record's own times.
    assert stats["throughput"] == pytest.approx(
        sum(stats["units_per_rank"] / s for s in stats["rank_seconds"]))
    steady = aggregate([[0.1] * 4], batch_size=10, batches_per_iter=1)
    assert steady["throughput"] == pytest.approx(steady["throughput_mean_of_rates"])


def test_aggregate_sums_each_ranks_work_over_time():
    # rank 0: 20 images in 2 s; rank 1: 20 images in 0.75 s
    stats = aggregate([[1.0, 1.0], [0.5, 0.25]], batch_size=5, batches_per_iter=2)
    assert stats["throughput"] == pytest.approx(10 + 80 / 3)
    assert stats["throughput_per_rank_min"] == 10.0
    assert stats["throughput_per_rank_max"] == pytest.approx(80 / 3)
    assert stats["throughput_mean_of_rates"] == 40.0  # Horovod's: 10 + (20 + 40) / 2
    assert stats["iter_time_mean"] == pytest.approx(0.6875)
    assert stats["rank_seconds"] == [2.0, 0.75] and stats["units_per_rank"] == 20
    assert set(stats) == {
        "throughput", "throughput_ci", "throughput_mean_of_rates", "throughput_estimator",
        "throughput_per_rank_min", "throughput_per_rank_mean", "throughput_per_rank_max",
        "iter_time_mean", "iter_time_std", "rank_seconds", "units_per_rank",
    }
    assert all(math.isfinite(v) for v in stats.values() if isinstance(v, float))


@pytest.mark.parametrize("bad", [[], [[1.0], []]])
def test_aggregate_needs_iterations_from_every_rank(bad):
    with pytest.raises(ValueError):
        aggregate(bad, batch_size=1, batches_per_iter=1)
