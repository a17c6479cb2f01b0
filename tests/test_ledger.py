"""results.history.ledger and `history predictions`: a forecast kept by `predict` is scored by a
later study of the same system that measures its scale."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from scalestudy.results.history.ledger import NO_MODEL, score, summary
from tests.conftest import run_cli

NOW = datetime(2026, 11, 1, tzinfo=timezone.utc)
FORECAST = {"made": NOW, "system": "polaris", "source": "s", "gpus": 64,
            "point": {"model": "resnet50", "batch_size": 32, "backend": "ddp",
                      "tuning": "default", "image_size": 224},
            "throughput": 9840.0, "low": 9310.0, "high": 10400.0, "level": 0.9,
            "unit": "img/s", "model": {}}


def attempt(thr: float, **kw) -> dict:
    return {"state": "completed", "throughput": thr, "system": "polaris", "world_size": 64,
            "ended": NOW + timedelta(days=3), "model": "resnet50", "batch_size": 32,
            "backend": "ddp", "tuning": "default", "params": {"image_size": 224}, **kw}


def test_a_forecast_is_scored_by_what_was_measured_after_it() -> None:
    [s] = score([FORECAST], [attempt(9500.0), attempt(9540.0),
                             attempt(1.0, ended=NOW - timedelta(days=1)),  # before it
                             attempt(1.0, system="aurora"),
                             attempt(1.0, params={"image_size": 64}),  # other work
                             attempt(1.0, world_size=32)])
    assert (s.measured, s.runs, s.inside) == (9520.0, 2, True)
    assert s.error == pytest.approx(9840 / 9520 - 1)
    assert s.line().endswith("measured 9,520 (2 run(s)): inside, +3.4%")
    [none] = score([FORECAST], [attempt(9500.0, tuning="tree")])
    assert none.measured is None and none.inside is None
    assert none.line().endswith("not measured yet")
    [total] = summary([s, none])
    assert total == {"system": "polaris", "forecasts": 2, "scored": 1, "unscorable": 0,
                     "coverage": 1.0, "median_abs_error": pytest.approx(9840 / 9520 - 1)}


def test_a_forecast_naming_no_model_is_not_scored() -> None:
    """Issue 46: a table's forecast kept with --system but no --model was scored against
    another model's runs (+2273.7 %) and its system's summary read "held 0 %"."""
    bare = {**FORECAST, "point": {"batch_size": 32}}
    [s] = score([bare], [attempt(400.0), attempt(420.0, model="small_cnn")])
    assert (s.measured, s.runs, s.inside, s.why) == (None, 0, None, NO_MODEL)
    assert s.line().endswith(": not scored: it names no model (keep a table's forecasts "
                             "with --model)")
    [total] = summary([s])
    assert (total["scored"], total["unscorable"], total["coverage"]) == (0, 1, None)
    # with its model named, only that model's runs score it
    [named] = score([{**bare, "point": {"model": "resnet50"}}],
                    [attempt(9500.0), attempt(1.0, model="small_cnn")])
    assert (named.measured, named.runs) == (9500.0, 1)


TABLE = """gpus,nodes,gpus_per_node,per_gpu_batch,throughput,unit
8,1,8,256,2400,images/s
16,2,8,256,4600,images/s
32,4,8,256,8900,images/s
64,8,8,256,17000,images/s
"""


@pytest.mark.slow
def test_the_same_predict_three_times_keeps_one_forecast(tmp_path: Path) -> None:
    table = tmp_path / "t.csv"
    table.write_text(TABLE)
    env = {"SCALESTUDY_STORE": str(tmp_path / "h.sqlite")}
    args = ("predict", str(table), "--gpus", "128,256", "--system", "polaris", "--model",
            "resnet50")
    said = [run_cli(*args, cwd=tmp_path, env_extra=env) for _ in range(3)]
    assert [d.returncode for d in said] == [0, 0, 0], said[0].stderr
    assert "kept 2 forecast(s) for system polaris in the ledger (2 new or updated)" in \
        said[0].stderr
    assert "already held: 2 forecast(s) for system polaris in the ledger, unchanged" in \
        said[2].stderr
    kept = json.loads(run_cli("history", "predictions", "--json", cwd=tmp_path,
                              env_extra=env).stdout)["forecasts"]
    assert sorted(k["gpus"] for k in kept) == [128, 256]
    # the same source, point and scale at another level: the one entry is updated
    again = run_cli(*args, "--level", "0.5", cwd=tmp_path, env_extra=env)
    assert "(2 new or updated)" in again.stderr
    kept = json.loads(run_cli("history", "predictions", "--json", cwd=tmp_path,
                              env_extra=env).stdout)["forecasts"]
    assert [k["level"] for k in kept] == [0.5, 0.5]
    # without --model: kept, and said to be never scored
    bare = run_cli("predict", str(table), "--gpus", "128", "--system", "polaris",
                   cwd=tmp_path, env_extra=env)
    assert bare.returncode == 0 and NO_MODEL in bare.stderr


SMALL = """name: small
system: local
workload: {kind: synthetic, model: small_cnn, image_size: 32, iters: 20}
grid: {nodes: [1], ranks_per_node: [1, 2, 4], batch_size: [16]}
"""
LARGE = SMALL.replace("name: small", "name: large").replace("[1, 2, 4]", "[8]")


MULTI = """name: multi
system: generic-slurm
workload: {kind: synthetic, model: small_cnn, image_size: 32, iters: 20}
grid: {nodes: [1, 2, 4], ranks_per_node: [4], batch_size: [16]}
"""


LATER = MULTI.replace("name: multi", "name: later").replace("[1, 2, 4]", "[8]")


@pytest.mark.slow  # a chain of CLI commands
def test_a_ledger_entry_made_by_one_study_is_scored_by_a_later_one(tmp_path: Path) -> None:
    from tests.test_report import finished_study

    env = {"SCALESTUDY_STORE": str(tmp_path / "h.sqlite")}
    first = tmp_path / "first"
    first.mkdir()
    spec = finished_study(first, {4: 100.0, 8: 98.0, 16: 95.0}, MULTI)
    assert run_cli("collect", str(spec), cwd=first).returncode == 0
    made = run_cli("predict", str(spec), "--gpus", "32", cwd=first, env_extra=env)
    assert made.returncode == 0, made.stderr
    assert "kept 1 forecast(s) for system generic-slurm" in made.stderr
    before = json.loads(run_cli("history", "predictions", "--json", cwd=tmp_path,
                                env_extra=env).stdout)
    assert before["systems"][0]["scored"] == 0
    later = tmp_path / "later"
    later.mkdir()
    finished_study(later, {32: 93.0}, LATER)
    assert run_cli("history", "ingest", "later/results", cwd=tmp_path,
                   env_extra=env).returncode == 0
    after = json.loads(run_cli("history", "predictions", "--json", cwd=tmp_path,
                               env_extra=env).stdout)
    [kept] = after["forecasts"]
    assert kept["gpus"] == 32 and kept["measured"] == 32 * 93.0
    assert kept["inside"] == (kept["low"] <= 2976.0 <= kept["high"])
    assert after["systems"][0]["scored"] == 1
    shown = run_cli("history", "predictions", cwd=tmp_path, env_extra=env).stdout
    assert "measured 2,976 (1 run(s))" in shown
    assert "generic-slurm: 1 forecast(s), 1 scored" in shown


@pytest.mark.slow
def test_predict_refuses_a_study_whose_report_gives_no_forecast(tmp_path: Path) -> None:
    """Issue 46: `predict studies/example.yaml` forecast 8 and 16 ranks of one host
    where its report refuses to; the same rule now answers both."""
    from tests.test_report import finished_study

    spec = finished_study(tmp_path, {1: 100.0, 2: 98.0, 4: 95.0}, SMALL)
    assert run_cli("collect", str(spec), cwd=tmp_path).returncode == 0
    done = run_cli("predict", str(spec), "--gpus", "8", cwd=tmp_path,
                   env_extra={"SCALESTUDY_STORE": str(tmp_path / "h.sqlite")})
    assert done.returncode == 2 and not done.stdout
    assert done.stderr.startswith("error: ") and "Traceback" not in done.stderr
    assert "no forecast, as its report gives none: the runs span 1 node count" in \
        done.stderr


@pytest.mark.slow  # two whole reports through the CLI
def test_the_forecasts_a_report_shows_are_kept_once(tmp_path: Path) -> None:
    from tests.test_report import finished_study

    env = {"SCALESTUDY_STORE": str(tmp_path / "h.sqlite")}
    spec = finished_study(tmp_path, {4: 100.0, 8: 96.0, 16: 93.0}, MULTI)
    done = run_cli("report", str(spec), cwd=tmp_path, env_extra=env)
    assert done.returncode == 0, done.stderr
    # 8, 16 and 32 nodes: up to 8× the largest measured scale (4 nodes)
    assert "ledger: 3 new forecast(s) of generic-slurm kept" in done.stderr
    shown = json.loads((tmp_path / "results/multi/report/summary.json").read_text())
    kept = json.loads(run_cli("history", "predictions", "--json", cwd=tmp_path,
                              env_extra=env).stdout)["forecasts"]
    # the ledger holds what the report shows, interval and all
    assert [(k["gpus"], k["low"], k["high"]) for k in kept] == [
        (p["world_size"], p["low"], p["high"]) for p in shown["model"]["predictions"]]
    assert {k["source"] for k in kept} == {"report multi, " + shown["model"]["predictions"][0]
                                           ["group"]}
    again = run_cli("report", str(spec), cwd=tmp_path, env_extra=env)
    assert again.returncode == 0 and "ledger:" not in again.stderr  # the same forecasts
    assert len(json.loads(run_cli("history", "predictions", "--json", cwd=tmp_path,
                                  env_extra=env).stdout)["forecasts"]) == len(kept)


@pytest.mark.slow  # two studies' reports through the CLI
def test_a_later_studys_report_scores_the_forecasts_of_its_scales(tmp_path: Path) -> None:
    from tests.test_report import finished_study

    env = {"SCALESTUDY_STORE": str(tmp_path / "h.sqlite")}
    first, later = tmp_path / "first", tmp_path / "later"
    first.mkdir()
    later.mkdir()
    spec = finished_study(first, {4: 100.0, 8: 96.0, 16: 93.0}, MULTI)
    assert run_cli("report", str(spec), cwd=first, env_extra=env).returncode == 0
    spec = finished_study(later, {32: 90.0}, MULTI.replace("name: multi", "name: big")
                          .replace("[1, 2, 4]", "[8]"))
    done = run_cli("report", str(spec), cwd=later, env_extra=env)
    assert done.returncode == 0, done.stderr
    md = (later / "results/big/report/index.md").read_text()
    assert "### Earlier forecasts of these scales" in md
    [line] = [ln for ln in md.splitlines() if ln.startswith("- generic-slurm: ")]
    assert "at 32 GPUs: predicted" in line and "from report multi, " in line
    assert "measured 2,880 (1 run(s))" in line and (": inside" in line or ": outside" in line)
    assert "1 of 1 inside" in md or "0 of 1 inside" in md
    summary = json.loads((later / "results/big/report/summary.json").read_text())
    assert summary["earlier_forecasts"][0] == line.lstrip("- ")
