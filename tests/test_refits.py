"""results.analysis.refits: many fits solved together give each row the answer fit_points gives it
alone (the forecast's bootstrap relies on it), feasible or not, degenerate or not."""

from __future__ import annotations

import numpy as np
import pytest

from scalestudy.results.analysis.modelfit import design, fit_points
from scalestudy.results.analysis.refits import coefficients, fit_many


@pytest.mark.parametrize("latency", ["log", "ring"])
def test_each_row_is_fit_points_answer(latency: str) -> None:
    rng = np.random.default_rng(7)
    infeasible = 0
    for _ in range(60):
        p = np.array([1, 2, 4, 8, 16, 32.0])[: rng.integers(3, 7)]
        b = np.full(len(p), 32.0)
        t = (0.1 + rng.uniform(0, 0.05) * 2 * (p - 1) / p
             + rng.uniform(-0.01, 0.02) * np.log2(p))
        times = t * (1 + rng.normal(0, 0.05, size=(40, len(p))))
        d = design(p, b, None, latency=latency)
        assert not isinstance(d, str)
        many = fit_many(d, times)
        coef = coefficients(d, times)
        infeasible += int((coef <= 0).any(axis=1).sum())
        for row, got in zip(times, many, strict=True):
            one, _ = fit_points(p, b, row, None, latency=latency)
            assert one is not None
            for field in ("a", "c", "alpha"):
                assert getattr(got, field) == pytest.approx(getattr(one, field), rel=1e-8,
                                                            abs=1e-12)
    assert infeasible > 100  # the subset search was exercised, not only the full solve


def test_a_degenerate_column_falls_back_row_by_row() -> None:
    """An internode column of zeros (no ring leaves a node) cannot be solved in a batch:
    each row is nnls's answer, the term at 0."""
    p = np.array([1, 2, 4.0])
    b = np.full(3, 8.0)
    d = design(p, b, None, terms=("compute", "internode"), gpus_per_node=8)
    assert not isinstance(d, str)
    times = np.array([[0.1, 0.12, 0.13], [0.1, 0.11, 0.125]])
    got = fit_many(d, times)
    for row, params in zip(times, got, strict=True):
        one, _ = fit_points(p, b, row, None, terms=("compute", "internode"), gpus_per_node=8)
        assert one is not None
        assert (params.a, params.c_inter) == pytest.approx((one.a, one.c_inter))
        assert params.c_inter == 0.0


def test_step_times_of_many_solutions_match_params() -> None:
    p = np.array([1, 2, 4, 8.0])
    b = np.full(4, 16.0)
    d = design(p, b, None, latency="log")
    assert not isinstance(d, str)
    times = np.array([[0.1, 0.13, 0.15, 0.17], [0.1, 0.12, 0.14, 0.15]])
    coef = coefficients(d, times)
    at_p, at_b = np.array([16.0, 64.0]), np.array([16.0, 16.0])
    want = np.array([d.params(c).step_time(at_p, at_b) for c in coef])
    assert d.step_times(coef, at_p, at_b) == pytest.approx(want)
