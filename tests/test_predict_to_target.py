"""`scalestudy predict TABLE.csv --to-target --batches B,B`: the samples to the target at
global batches not measured, as a table or as JSON; bad input is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scalestudy.core.errors import ScalestudyError
from scalestudy.study.predict import predict_to_target
from scalestudy.study.wall import WallAsk
from tests.conftest import run_cli

#: Llama 3.1 8B's reference runs (mlcommons/logging, training_5.1.0, Apache-2.0): the
#: first 4 seeds of its 3 smallest global batches.
RUNS = ("global_batch,samples_to_target,seed\n"
        "16,159744,0\n16,159744,1\n16,172032,2\n16,159744,3\n"
        "32,196608,0\n32,172032,1\n32,184320,2\n32,184320,3\n"
        "64,233472,0\n64,208896,1\n64,208896,2\n64,233472,3\n")


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "runs.csv"
    path.write_text(RUNS, encoding="utf-8")
    return path


def test_json_prints_the_predictions_in_the_shape_asked(table: Path) -> None:
    done = run_cli("predict", table.name, "--to-target", "--batches", "96,128", "--json",
                   cwd=table.parent)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    preds = got["predictions"]
    assert [p["global_batch"] for p in preds] == [96, 128]
    for p in preds:
        assert {"global_batch", "value", "low", "high", "level", "unit"} <= set(p)
        assert p["unit"] == "samples" and p["level"] == 0.9
        assert p["low"] < p["value"] < p["high"]
    # more samples at the larger batch, with a wider interval (farther out)
    assert preds[0]["value"] < preds[1]["value"]
    assert preds[0]["high"] / preds[0]["low"] < preds[1]["high"] / preds[1]["low"]
    assert got["model"]["b_crit"] > 0 and "S_min" in got["model"]["law"]


def test_beyond_forecasts_past_8x_flagged(table: Path) -> None:
    done = run_cli("predict", table.name, "--to-target", "--batches", "128,1024", "--beyond",
                   "--json", cwd=table.parent)
    assert done.returncode == 0, done.stderr
    near, far = json.loads(done.stdout)["predictions"]
    assert "beyond" not in near and far["beyond"].startswith("a rough guide: 16×")
    assert far["high"] / far["low"] > near["high"] / near["low"]


def test_the_use_case_and_the_table_agree(table: Path) -> None:
    got = predict_to_target(str(table), [96.0], level=0.8)
    assert got.predictions[0].level == 0.8
    assert got.model["source"] == f"table {table}"
    assert [p["runs"] for p in got.fitted_on] == [4, 4, 4]


@pytest.mark.slow  # the CLI twice
def test_without_json_a_small_table_and_epochs_where_the_table_gives_them(
        tmp_path: Path) -> None:
    (tmp_path / "e.csv").write_text("global_batch,epochs_to_target\n1632,35\n3264,35.2\n"
                                    "4096,40\n", encoding="utf-8")
    done = run_cli("predict", "e.csv", "--to-target", "--batches", "8192", cwd=tmp_path,
                   env_extra={"COLUMNS": "150"})
    assert done.returncode == 0, done.stderr
    assert "epochs to the target" in done.stdout and "8,192" in done.stdout
    assert "2×" in done.stdout
    as_json = run_cli("predict", "e.csv", "--to-target", "--batches", "8192", "--json",
                      cwd=tmp_path)
    assert json.loads(as_json.stdout)["predictions"][0]["unit"] == "epochs"


@pytest.mark.slow  # the CLI once per bad input
@pytest.mark.parametrize(("text", "args", "says"), [
    ("global_batch,loss\n1,2\n", ("--batches", "4"),
     "bad.csv:1: no samples_to_target or epochs_to_target column"),
    (RUNS, ("--batches", "0,64"), "--batches '0,64': give global batches above 0"),
    (RUNS, ("--batches", "-8"), "give global batches above 0"),
    ("global_batch,samples_to_target\n8,1\n16,2\n", ("--batches", "32"),
     "2 distinct global batch(es)"),
    ("global_batch,samples_to_target\n8,1\n16,two\n32,3\n", ("--batches", "32"),
     "bad.csv:3: samples_to_target: 'two' is not a number"),
    (RUNS, ("--batches", "1024"), "beyond 8× the largest measured global batch (64), "
     "which is as far as the backtest supports: ask at most 512, measure a larger batch, "
     "or add --beyond"),
    (RUNS, (), "give --to-target --batches B,B"),
    (RUNS, ("--batches", "32", "--checkpoint-save-s", "30"),
     "--checkpoint-save-s: give --nodes N,N and --throughput S,S (samples/s)"),
    (RUNS, ("--batches", "32,64", "--checkpoint-save-s", "30", "--nodes", "2",
            "--throughput", "20", "--failures-per-node-hour", "0.01"),
     "--nodes and --throughput: give one value per --batches entry (2)"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, text: str,
                                          args: tuple[str, ...], says: str) -> None:
    (tmp_path / "bad.csv").write_text(text, encoding="utf-8")
    done = run_cli("predict", "bad.csv", "--to-target", *args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_the_wall_clock_with_checkpoints_and_failures_at_each_batch(table: Path) -> None:
    from scalestudy.results.analysis.goodput import daly_interval, young_interval

    ask = WallAsk(nodes=[2, 8], throughput=[20.0, 60.0], save_s=30.0, per_node_hour=0.01,
                  startup_s=60.0, queue_wait_s=120.0)
    got = predict_to_target(str(table), [32.0, 128.0], wall=ask)
    small, large = got.model["wall_clock"]["scales"]
    for s, p, nodes in ((small, got.predictions[0], 2), (large, got.predictions[1], 8)):
        mtbf = 3600 / (0.01 * nodes)
        assert s["young_interval_s"] == pytest.approx(young_interval(30, mtbf))
        assert s["daly_interval_s"] == pytest.approx(daly_interval(30, mtbf))
        assert s["work_s"] == pytest.approx(p.value / s["throughput"])
        assert s["restart_s"] == 120 + 60 + 30  # queue wait + start-up + load (= save)
        parts = s["startup_s"] + s["work_s"] + s["checkpoints_s"] + s["failures_s"]
        assert s["wall_s"] == pytest.approx(parts)
        assert s["wall_low_s"] < s["wall_s"] < s["wall_high_s"]  # the samples' interval
        assert 0 < s["goodput_low"] <= s["goodput"] <= s["goodput_high"] < 1
    # four times the nodes: four times the failures per hour, a lower goodput
    assert large["goodput"] < small["goodput"]
    assert any("load = the save time" in a for a in got.model["wall_clock"]["assumed"])


def test_predict_prints_the_wall_clock_and_refuses_it_without_a_rate(table: Path) -> None:
    done = run_cli("predict", table.name, "--to-target", "--batches", "32,128",
                   "--checkpoint-save-s", "30", "--nodes", "2,8", "--throughput", "20,60",
                   "--failures-per-node-hour", "0.01", cwd=table.parent,
                   env_extra={"COLUMNS": "220"})
    assert done.returncode == 0, done.stderr
    assert "wall clock to the target with checkpoints and failures" in done.stdout
    assert "save every (Young / Daly)" in done.stdout
    assert "queue wait 0 s (not known" in done.stdout
    with pytest.raises(ScalestudyError, match="needs a failure rate"):
        predict_to_target(str(table), [32.0], wall=WallAsk([2], [20.0], 30.0))
