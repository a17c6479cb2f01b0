"""commmodel: fits recover known parameters, the hold-out point is predicted, too few
points are refused, predictions follow the formula."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from scalestudy.results.analysis.commmodel import (
    PREDICTION_RULE,
    model_study,
    prediction_verdict,
    qualified,
    ring_bounds,
)
from scalestudy.results.analysis.efficiency import scaling_table
from scalestudy.results.analysis.forecast_study import with_intervals
from scalestudy.results.analysis.modelfit import Params, fit_points, nnls
from tests.test_efficiency import frame, run

S = 100e6  # gradient bytes (a 25 M-parameter model in fp32)
TRUE = Params(a=0.002, c=1 / 10e9, alpha=50e-6, latency="log", grad_bytes=S)
SHAPES = [(1, 1), (1, 2), (1, 4), (2, 4), (4, 4), (8, 4)]


def comm_bound_runs(params: Params = TRUE, batch: int = 32, noise: float = 0.0,
                    with_diag: bool = True) -> pd.DataFrame:
    """Weak-scaling runs whose throughput the model gives exactly (times 1 + noise)."""
    rng = np.random.default_rng(7)
    rows = []
    for n, r in SHAPES:
        p = n * r
        t = params.step_time(np.array([p]), np.array([batch]))[0]
        rows.append(run(n, r, batch * p / t * (1 + noise * rng.standard_normal()),
                        batch=batch))
    runs = frame(rows)
    if with_diag:
        runs["grad_bytes"] = S
    return runs


def test_nnls_matches_lstsq_when_positive_and_clamps_otherwise() -> None:
    a = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, 2.0]])
    assert nnls(a, a @ np.array([2.0, 3.0])) == pytest.approx([2.0, 3.0])
    # The unconstrained slope is negative: NNLS keeps it at 0 and fits the mean.
    coef = nnls(a, np.array([3.0, 2.0, 1.0]))
    assert coef == pytest.approx([2.0, 0.0])


def test_fit_recovers_a_known_model_and_predicts_the_holdout() -> None:
    table = scaling_table(comm_bound_runs(), "weak")
    fits, points, preds = model_study(table, "weak")
    fit = fits.iloc[0]
    assert fit["status"] == "fitted"
    assert fit["terms"] == "compute+bandwidth+latency"
    assert fit["sec_per_image"] == pytest.approx(TRUE.a, rel=1e-6)
    assert fit["bandwidth_GBps"] == pytest.approx(10.0, rel=1e-6)
    assert fit["latency_s"] == pytest.approx(TRUE.alpha, rel=1e-4)
    assert fit["rms_residual"] < 1e-9
    assert fit["holdout_world_size"] == 32
    assert abs(fit["holdout_error"]) < 1e-6
    assert points["residual"].abs().max() < 1e-9
    # Predictions: 2x ... 1,024 nodes of 4 GPUs, efficiency from the formula.
    assert preds["nodes"].tolist() == [16, 32, 64, 128, 256, 512, 1024]
    p = preds["world_size"].to_numpy(float)
    t = TRUE.step_time(p, np.full_like(p, 32.0))
    per_gpu0 = 32 / TRUE.step_time(np.array([1.0]), np.array([32.0]))[0]
    assert preds["efficiency_predicted"].to_numpy() == pytest.approx(32 / t / per_gpu0)
    assert preds["efficiency_predicted"].is_monotonic_decreasing
    limited = model_study(table, "weak", max_nodes=64)[2]
    assert limited["nodes"].tolist() == [16, 32, 64]


def test_noisy_measurements_predict_the_holdout_within_five_percent() -> None:
    # 1 % noise per point: the stated error bound for the hold-out check is 5 %.
    fits = model_study(scaling_table(comm_bound_runs(noise=0.01), "weak"), "weak")[0]
    assert abs(fits.iloc[0]["holdout_error"]) < 0.05
    assert fits.iloc[0]["rms_residual"] < 0.02


def test_perfect_scaling_fits_no_communication() -> None:
    runs = frame([run(n, r, 100.0 * n * r) for n, r in SHAPES])
    fits, _, preds = model_study(scaling_table(runs, "weak"), "weak")
    assert fits.iloc[0]["latency_s"] == pytest.approx(0.0, abs=1e-12)
    assert np.isnan(fits.iloc[0]["bandwidth_GBps"])  # no grad_bytes: S unknown
    assert preds["efficiency_predicted"].to_numpy() == pytest.approx(1.0)


def test_strong_scaling_amdahl_like() -> None:
    # Compute splits over P, communication does not: t = a * G / P + c * 2(P-1)/P.
    a, c, g = 0.001, 0.05, 256
    sizes = [1, 2, 4, 8, 16]
    runs = frame([run(1, p, g / (a * g / p + c * 2 * (p - 1) / p), global_batch=g)
                  for p in sizes])
    fits, points, preds = model_study(scaling_table(runs, "strong"), "strong")
    assert fits.iloc[0]["sec_per_image"] == pytest.approx(a, rel=1e-6)
    assert abs(fits.iloc[0]["holdout_error"]) < 1e-6
    assert points["comm_share"].iloc[0] == pytest.approx(0.0)
    # Per-GPU batch halves with each doubling until it would fall below one image.
    assert preds["batch_size"].tolist() == [8.0, 4.0, 2.0, 1.0]


def test_too_few_points_are_not_fitted() -> None:
    runs = frame([run(1, p, 100.0 * p) for p in (1, 2)])
    fits, points, preds = model_study(scaling_table(runs, "weak"), "weak")
    assert fits.iloc[0]["status"].startswith("too few points: 2 world size(s) measured")
    assert points.empty and preds.empty
    three = frame([run(1, p, 90.0 * p) for p in (1, 2, 4)])
    fit = model_study(scaling_table(three, "weak"), "weak")[0].iloc[0]
    assert fit["terms"] == "compute+bandwidth"  # no latency term with three points
    assert np.isnan(fit["holdout_error"])  # two points left: no hold-out fit


def test_bandwidth_from_the_probe() -> None:
    runs = comm_bound_runs()
    runs["allreduce_busbw_GBps"] = 10.0
    fit = model_study(scaling_table(runs, "weak"), "weak", bandwidth="probe")[0].iloc[0]
    assert fit["terms"] == "compute+latency"
    assert fit["probe_busbw_GBps"] == 10.0
    assert fit["latency_s"] == pytest.approx(TRUE.alpha, rel=1e-4)
    params, why = fit_points(np.array([1.0, 2.0]), np.array([8.0, 8.0]),
                             np.array([1.0, 1.1]), None, bandwidth="probe")
    assert params is None and "no allreduce probe" in why


def test_ring_bound_from_the_probe() -> None:
    runs = comm_bound_runs()
    runs["allreduce_busbw_GBps"] = 10.0
    table = scaling_table(runs, "weak")
    fits = model_study(table, "weak")[0]
    bound = ring_bounds(table, fits).iloc[0]
    ring = 2 * 31 / 32 * S / 10e9
    compute = TRUE.a * 32  # from the fit: the runs carry no compute_time_s
    assert bound["world_size"] == 32 and bound["compute_source"] == "model"
    assert bound["ring_time_s"] == pytest.approx(ring)
    assert bound["efficiency_bound"] == pytest.approx(compute / (compute + ring), rel=1e-6)
    # The measured efficiency also pays the latency term: below the bound.
    assert bound["efficiency_measured"] < bound["efficiency_bound"]
    runs["compute_time_s"] = 0.05
    measured = ring_bounds(scaling_table(runs, "weak"), fits).iloc[0]
    assert measured["compute_source"] == "measured"
    assert measured["efficiency_bound"] == pytest.approx(0.05 / (0.05 + ring))
    assert ring_bounds(scaling_table(comm_bound_runs(), "weak"), fits).empty  # no probe


def verdicts(runs: pd.DataFrame, scaling: str = "weak") -> tuple[pd.DataFrame, pd.DataFrame]:
    table = scaling_table(runs, scaling)
    fits, _, preds = model_study(table, scaling)
    return with_intervals(table, fits, qualified(fits, preds), scaling)


def test_predictions_qualify_on_good_multi_node_data() -> None:
    fits, shown = verdicts(comm_bound_runs(noise=0.01))
    assert fits.iloc[0]["withheld"] == "" and fits.iloc[0]["node_counts"] == 4
    # up to 8× the largest measured scale (8 nodes), what the backtest supports
    assert shown["nodes"].tolist() == [16, 32, 64]
    assert not shown["above_measured"].any()  # the model's efficiency only falls
    # each with its interval, which widens with the distance
    assert (shown["low"] < shown["throughput_predicted"]).all()
    assert (shown["throughput_predicted"] < shown["high"]).all()
    width = (shown["high"] - shown["low"]) / shown["throughput_predicted"]
    assert width.is_monotonic_increasing and set(shown["level"]) == {0.9}


def test_predictions_withheld_from_single_node_runs() -> None:
    # A perfect fit, but every run is on one node: predictions in nodes would
    # extrapolate inter-node communication that was never measured.
    runs = frame([run(1, p, 100.0 * p / (1 + 0.05 * np.log2(p))) for p in (1, 2, 4, 8)])
    fits, shown = verdicts(runs)
    assert fits.iloc[0]["status"] == "fitted" and shown.empty
    assert fits.iloc[0]["withheld"].startswith("the runs span 1 node count (at least 2")


def test_a_poor_fit_or_throughput_falling_with_scale_forecasts_nothing() -> None:
    # Issue 46: a fit that fails its own checks is refused, with its figures, in the
    # report as in `predict` (the interval no longer carries that doubt alone).
    good_fits, good = verdicts(comm_bound_runs(noise=0.01))
    assert good_fits.iloc[0]["withheld"] == "" and len(good)
    runs = comm_bound_runs()
    runs["throughput"] *= [1.0, 1.3, 0.8, 1.25, 0.8, 1.0]  # far from any model
    fits, poor = verdicts(runs)
    assert poor.empty and fits.iloc[0]["withheld"].startswith(
        "no forecast (the fit fails its own checks: ")
    assert "RMS (at most 15%)" in fits.iloc[0]["withheld"] or "falls with scale" in \
        fits.iloc[0]["withheld"]
    runs = comm_bound_runs()
    runs.loc[runs.index[-1], "throughput"] *= 0.75  # the largest point falls off a cliff
    fits, cliff = verdicts(runs)
    assert cliff.empty and "it missed that scale by 33% (at most 25%)" in \
        fits.iloc[0]["withheld"]
    two = comm_bound_runs()[lambda r: r["world_size"].isin([8, 16])]
    fit = verdicts(two)[0].iloc[0]
    assert fit["withheld"].startswith("no fit (too few points")


def test_a_prediction_above_the_last_measured_efficiency_is_marked() -> None:
    # Flat, the last point 6 % low: the forecast (lean included) runs above it.
    effs = (1.0, 1.0, 1.0, 1.0, 1.0, 0.94)
    runs = frame([run(n, r, 100.0 * n * r * e) for (n, r), e in zip(SHAPES, effs, strict=True)])
    fits, shown = verdicts(runs)
    assert fits.iloc[0]["withheld"] == ""
    assert shown.iloc[0]["efficiency_predicted"] > 0.94 and shown.iloc[0]["above_measured"]


def test_prediction_verdict_reasons() -> None:
    base = {"status": "fitted", "node_counts": 3, "rms_residual": 0.02, "points": 5,
            "holdout_error": 0.03}
    assert prediction_verdict(base) == ""
    assert prediction_verdict({**base, "status": "too few points"}) == \
        "no fit (too few points)"
    assert prediction_verdict({**base, "holdout_error": 0.12}) == ""  # the interval widens
    assert prediction_verdict({**base, "node_counts": 1}).startswith("the runs span 1 node")
    assert "90 % interval" in PREDICTION_RULE and "2 node counts" in PREDICTION_RULE
    assert "backtest" in PREDICTION_RULE and "lowered by 2 % per doubling" in PREDICTION_RULE


def test_a_transformer_studys_step_time_is_the_records_own() -> None:
    # tokens/s with 8 sequences of 1,024 tokens per GPU: the model's measured step time
    # is tokens per step over tokens/s, the step the record timed (not 1,024x shorter).
    seq, batch = 1024, 8
    runs = comm_bound_runs(batch=batch)
    step = runs["global_batch"] / runs["throughput"]  # seconds per step of the fake runs
    runs["throughput"] = runs["global_batch"] * seq / step
    runs["throughput_unit"] = "tokens/s"
    runs["seq_len"] = seq
    runs["step_time_s"] = step
    table = scaling_table(runs, "weak")
    fits, points, preds = model_study(table, "weak")
    merged = points.merge(table[["world_size", "step_time_s"]], on="world_size")
    assert merged["step_time_measured"].tolist() == pytest.approx(
        merged["step_time_s"].tolist())
    assert fits.iloc[0]["sec_per_image"] == pytest.approx(TRUE.a / seq, rel=1e-6)  # per token
    assert fits.iloc[0]["bandwidth_GBps"] == pytest.approx(10.0, rel=1e-6)
    # predictions: tokens/s, with their own step time
    assert (preds["step_time_fitted"] * preds["throughput_predicted"]).tolist() == \
        pytest.approx((preds["global_batch"] * seq).tolist())
