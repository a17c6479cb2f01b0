"""results.analysis.target_forecast and target_table: samples to the target against the
global batch, forecast with intervals; the law recovered from series that follow it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from scalestudy.core.errors import ScalestudyError
from scalestudy.results.analysis import target_forecast as tf
from scalestudy.results.analysis.target_table import read_target_table


def knee(batch: np.ndarray, s_min: float, b_crit: float, a: float) -> np.ndarray:
    return s_min * (1 + (np.asarray(batch, float) / b_crit) ** a) ** (1 / a)


def seeded_runs(batches: list[float], law: np.ndarray, seeds: int, noise: float,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    b = np.repeat(np.asarray(batches, float), seeds)
    return b, np.repeat(law, seeds) * np.exp(rng.normal(0, noise, len(b)))


def bent(batch: np.ndarray, s0: float, b0: float, slope: float, g: float) -> np.ndarray:
    x = np.log(np.asarray(batch, float) / b0)
    return s0 * np.exp(slope * x + g * x * x / 2)


def test_a_series_that_follows_the_default_law_is_recovered() -> None:
    batches = np.array([64, 128, 256], float)
    truth = bent(batches, 1e6, 256.0, 0.3, tf.DEFAULT_BEND)
    got = tf.forecast_to_target(batches, truth, [512, 1024, 2048])
    assert got.model["name"] == f"bend g={tf.DEFAULT_BEND:g}"
    # McCandlish's S_min (1 + B/B_crit) with the same slope (0.3) at the largest batch
    assert got.model["b_crit"] == pytest.approx(256 * 0.7 / 0.3, rel=1e-6)
    assert got.model["s_min"] == pytest.approx(0.7e6, rel=1e-6)
    assert "s = 0.300" in got.model["law"] and "S_min" in got.model["law"]
    for p, want in zip(got.predictions, bent(np.array([512, 1024, 2048]), 1e6, 256.0, 0.3,
                                             tf.DEFAULT_BEND), strict=True):
        assert p.value == pytest.approx(want, rel=1e-6)
        assert p.low < want < p.high


@pytest.mark.parametrize("g", [0.0, 0.2])
def test_the_slope_of_a_bent_law_is_recovered_whatever_the_bend(g: float) -> None:
    batches = np.array([10, 30, 50, 90], float)
    law = tf.fit_bend(batches, bent(batches, 400.0, 90.0, -0.1, g), g)
    assert (law.slope, law.bend, math.exp(law.log_knee)) == pytest.approx((-0.1, g, 90))
    assert law(np.array([360.0]))[0] == pytest.approx(bent(np.array([360.0]), 400.0, 90.0,
                                                           -0.1, g)[0])
    assert law.mccandlish() is None  # no B_crit where the samples fall with the batch


def test_with_five_batches_the_hold_out_picks_mccandlish_where_the_runs_follow_it() -> None:
    batches = np.array([32, 64, 128, 256, 512], float)
    truth = knee(batches, 2e5, 300.0, 1.0)  # McCandlish's S_min (1 + B/B_crit)
    got = tf.forecast_to_target(batches, truth, [2048])
    assert got.model["name"] == "knee a=1"
    assert "hold-out" in got.model["chosen_by"]
    assert got.model["b_crit"] == pytest.approx(300, rel=0.01)
    assert got.predictions[0].value == pytest.approx(knee(np.array([2048.0]), 2e5, 300.0,
                                                          1.0)[0], rel=0.005)


def test_the_90_percent_intervals_hold_noisy_seeded_series_about_as_often() -> None:
    rng = np.random.default_rng(7)
    held, total = 0, 0
    for _ in range(60):
        b_crit = float(np.exp(rng.uniform(np.log(50), np.log(2000))))
        batches = [32.0, 64.0, 128.0]
        b, v = seeded_runs(batches, knee(np.array(batches), 1e5, b_crit, 0.5), 5, 0.03,
                           rng)
        asked = [256.0, 512.0]
        got = tf.forecast_to_target(b, v, asked)
        for p, want in zip(got.predictions, knee(np.array(asked), 1e5, b_crit, 0.5),
                           strict=True):
            held += p.low <= want <= p.high
            total += 1
    assert 0.85 <= held / total <= 1.0


def test_intervals_widen_with_the_distance_beyond_the_largest_batch() -> None:
    rng = np.random.default_rng(1)
    batches = [100.0, 200.0, 400.0]
    b, v = seeded_runs(batches, knee(np.array(batches), 5e4, 800.0, 0.5), 4, 0.02, rng)
    got = tf.forecast_to_target(b, v, [200, 400, 800, 1600, 3200])
    width = [math.log(p.high / p.low) for p in got.predictions]
    assert width[0] == pytest.approx(width[1])  # within the measured batches: the noise
    assert width[1] < width[2] < width[3] < width[4]
    assert [p.extrapolation for p in got.predictions] == [0.5, 1, 2, 4, 8]
    wider = tf.forecast_to_target(b, v, [1600], level=0.99).predictions[0]
    assert wider.high / wider.low > got.predictions[3].high / got.predictions[3].low


def test_one_diverged_seed_does_not_move_a_batch_with_five_runs() -> None:
    assert tf.centre(np.array([10, 11, 10, 9, 90.0])) == pytest.approx(31 / 3)
    assert tf.centre(np.array([10, 12.0])) == 11


@pytest.mark.parametrize(("batches", "asked", "says"), [
    ([1, 1, 2, 2], [4], "2 distinct global batch(es)"),
    ([1, 2, 4], [33], "beyond 8× the largest measured global batch (4)"),
    ([1, 2, 4], [0], "give global batches above 0"),
])
def test_refusals_say_what_and_how_to_fix(batches: list[float], asked: list[float],
                                          says: str) -> None:
    with pytest.raises(ScalestudyError) as got:
        tf.forecast_to_target(np.array(batches, float), np.linspace(1, 2, len(batches)),
                              asked)
    assert says in str(got.value)


def test_past_the_limit_beyond_forecasts_and_flags_it() -> None:
    got = tf.forecast_to_target(np.array([1, 2, 4.0]), np.array([10, 11, 13.0]), [16, 64],
                                beyond=True)
    near, far = got.predictions
    assert near.limit == "" and "beyond" not in near.as_dict()
    assert far.limit == "16× the largest measured batch, past the 8× the backtest supports"
    assert far.as_dict()["beyond"].startswith("a rough guide: 16×")
    assert far.low < far.value < far.high


def test_a_table_of_runs_is_read_with_its_unit(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("# from our runs\nseed,global_batch,epochs_to_target\n0,8,12.5\n"
                    "1,8,13\n0,16,14\n\n0,32,17.1\n", encoding="utf-8")
    b, v, unit = read_target_table(path)
    assert unit == "epochs" and b.tolist() == [8, 8, 16, 32]
    assert v.tolist() == [12.5, 13, 14, 17.1]


def test_a_studys_runs_csv_leaves_out_runs_that_did_not_reach_the_target(tmp_path: Path
                                                                          ) -> None:
    path = tmp_path / "runs.csv"
    path.write_text("run_id,state,global_batch,target_reached,samples_to_target\n"
                    "a,completed,8,True,800\nb,completed,16,True,1200\n"
                    "c,failed,16,,\nd,completed,32,False,\ne,completed,32,True,2000\n"
                    "f,completed,64,True,3500\n", encoding="utf-8")
    b, v, unit = read_target_table(path)
    assert unit == "samples" and b.tolist() == [8, 16, 32, 64]
    assert v.tolist() == [800, 1200, 2000, 3500]


@pytest.mark.parametrize(("text", "says"), [
    ("global_batch,loss\n1,2\n", "t.csv:1: no samples_to_target or epochs_to_target"),
    ("batch,samples_to_target\n1,2\n", "t.csv:1: no global_batch column"),
    ("global_batch,samples_to_target\n1,2\n2,n/a\n", "t.csv:3: samples_to_target: 'n/a' "
     "is not a number"),
    ("global_batch,samples_to_target\n0,2\n", "t.csv:2: global_batch: 0 must be a number "
     "above 0"),
    ("global_batch,samples_to_target\n1,2\n2,3,4\n", "t.csv:3: 3 cells for 2 columns"),
    ("global_batch,samples_to_target\n1,2\n2,3\n", "2 distinct global batch(es)"),
])
def test_a_bad_table_names_its_row_and_column(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ScalestudyError) as got:
        read_target_table(path)
    assert says in str(got.value) and "\n" not in str(got.value)
