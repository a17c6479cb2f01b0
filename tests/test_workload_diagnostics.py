"""The probe's formulas (nccl-tests' definitions) and the comm-overhead summary."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from scalestudy.workload import diagnostics as d


@pytest.mark.parametrize(("n", "factor"), [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75)])
def test_bus_factor_is_2_n_minus_1_over_n(n: int, factor: float) -> None:
    assert d.bus_factor(n) == pytest.approx(factor)


def test_busbw_follows_the_nccl_tests_formula() -> None:
    size, seconds = 64 << 20, 0.01
    algbw = size / seconds / 1e9
    assert d.algbw(size, seconds) == pytest.approx(algbw)
    for n in (2, 3, 4, 16):
        assert d.busbw(size, seconds, n) == pytest.approx(algbw * 2 * (n - 1) / n)


def test_message_sizes_grow_by_four_and_end_at_the_gradient_size() -> None:
    sizes = d.message_sizes(102_230_128)  # ResNet-50's fp32 gradients
    assert sizes[0] == 4096 and sizes[-1] == 102_230_128
    assert all(b == 4 * a for a, b in itertools.pairwise(sizes[:-1]))
    assert sizes[-2] < sizes[-1] <= 4 * sizes[-2]
    assert d.message_sizes(1000) == [1000]  # smaller than the smallest probe size
    assert d.message_sizes(4096) == [4096]


def test_time_allreduces_calls_each_size_warm_then_timed() -> None:
    calls: list[int] = []

    def allreduce(size: int) -> Callable[[], None]:
        return lambda: calls.append(size)

    means = d.time_allreduces(allreduce, [4096, 64 << 20])
    assert len(means) == 2 and all(m >= 0 for m in means)
    assert calls.count(4096) == 1 + d.repetitions(4096)
    assert calls.count(64 << 20) == 1 + d.repetitions(64 << 20)


def test_probe_table_and_summary() -> None:
    table = d.probe_table([4096, 1 << 20], [1e-4, 2e-3], world_size=4)
    assert table["algbw_GBps"][1] == pytest.approx((1 << 20) / 2e-3 / 1e9, rel=1e-5)
    assert table["busbw_GBps"][1] == pytest.approx(table["algbw_GBps"][1] * 1.5, rel=1e-5)
    summary = d.probe_summary(table)
    assert summary == {"allreduce_busbw_GBps": table["busbw_GBps"][1],
                       "allreduce_latency_s": 1e-4}


def test_comm_overhead_is_one_minus_compute_over_step() -> None:
    out = d.comm_summary(step_times=[0.10, 0.12], compute_times=[0.08, 0.08], global_batch=64)
    assert out["comm_overhead"] == pytest.approx(1 - 0.08 / 0.11, abs=1e-6)
    assert out["compute_throughput"] == pytest.approx(32 / 0.08 * 2)
    assert out["step_time_s"] == pytest.approx(0.11)
