"""results.analysis.goodput: the Poisson interval against table values, Young's and Daly's
checkpoint intervals against hand values, and the expected wall clock's limits."""

from __future__ import annotations

import math

import pytest

from scalestudy.results.analysis.goodput import (
    chi2_quantile,
    daly_interval,
    expected_wall,
    job_mtbf_s,
    lost_work_s,
    poisson_interval,
    young_interval,
)


@pytest.mark.parametrize(("p", "dof", "table"), [
    (0.95, 1, 3.841), (0.95, 2, 5.991), (0.05, 2, 0.1026), (0.95, 10, 18.307),
    (0.05, 10, 3.940), (0.975, 30, 46.979), (0.5, 2, 1.386), (0.99, 60, 88.379)])
def test_the_chi_square_quantile_matches_the_table(p: float, dof: int, table: float) -> None:
    assert chi2_quantile(p, dof) == pytest.approx(table, abs=1e-3)


@pytest.mark.parametrize(("count", "low", "high"), [
    (0, 0.0, 2.996), (1, 0.0513, 4.744), (2, 0.355, 6.296), (5, 1.970, 10.513),
    (10, 5.425, 16.962)])
def test_garwoods_90_percent_interval_matches_the_table(count: int, low: float,
                                                         high: float) -> None:
    assert poisson_interval(count, 0.90) == pytest.approx((low, high), abs=1e-3)


def test_young_and_daly_intervals_by_hand() -> None:
    day = 86_400.0
    assert young_interval(60, day) == pytest.approx(3219.94, abs=0.01)  # sqrt(2·60·86400)
    # sqrt(2CM) (1 + sqrt(C/2M)/3 + C/18M) − C = 3219.94 · 1.006249 − 60
    assert daly_interval(60, day) == pytest.approx(3180.06, abs=0.01)
    assert daly_interval(300, 100) == 100  # C >= 2M: the MTBF itself
    assert math.isinf(daly_interval(60, math.inf))
    assert job_mtbf_s(0.001, 64) == pytest.approx(3600 / 0.064)


def test_the_work_lost_per_failure_is_half_a_segment_at_first_order() -> None:
    assert lost_work_s(1000, 1e12) == pytest.approx(500)
    # M − L / (e^(L/M) − 1) at L = M: 1 − 1/(e − 1) of M
    assert lost_work_s(3600, 3600) == pytest.approx(3600 * (1 - 1 / (math.e - 1)))
    assert lost_work_s(1000, 3600) < 500  # failures strike a segment's start more often


def test_the_expected_wall_clock_adds_up_and_has_its_limits() -> None:
    never = expected_wall(36_000, save_s=60, mtbf_s=math.inf, restart_s=300,
                          interval_s=1200, startup_s=90)
    assert (never.checkpoints_s, never.failures_s) == (1800, 0)
    assert never.wall_s == 90 + 36_000 + 1800
    got = expected_wall(36_000, save_s=60, mtbf_s=4 * 3600, restart_s=300)
    tau = daly_interval(60, 4 * 3600)
    assert got.interval_s == tau
    exact = 4 * 3600 * math.exp(300 / 14_400) * math.expm1((tau + 60) / 14_400) * 36_000 / tau
    assert got.wall_s == pytest.approx(exact)
    # to first order each failure costs the restart and half a segment
    assert got.lost_per_failure_s == pytest.approx(300 + (tau + 60) / 2, rel=0.1)
    assert 0.85 < got.goodput < 0.92
    # Daly's interval is (near) the best one: a sweep finds none much better
    sweep = min(expected_wall(36_000, save_s=60, mtbf_s=14_400, restart_s=300,
                              interval_s=t).wall_s for t in range(200, 5000, 10))
    assert got.wall_s <= sweep * 1.001
    # free saves (C = 0), taken continuously: the limit τ → 0 of Daly's T, W e^(R/M)
    free = expected_wall(36_000, save_s=0, mtbf_s=14_400, restart_s=300)
    assert free.wall_s == pytest.approx(36_000 * math.exp(300 / 14_400))
    assert free.checkpoints_s == 0 and free.interval_s == 0
    # more failures, less goodput
    worse = expected_wall(36_000, save_s=60, mtbf_s=3600, restart_s=300, interval_s=tau)
    assert worse.goodput < got.goodput
