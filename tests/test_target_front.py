"""results/analysis/target_front.py: the front to the target of measured and forecast
points (a measured throughput whose runs missed the target, a throughput forecast, times
the samples to the target: forecast, or the priced rule's), both intervals carried; and
the report, summary.json and `report --deadline` that show it and its picks."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scalestudy.core.target import Target
from scalestudy.report.build import build_report
from scalestudy.results.analysis.cost import costs_of
from scalestudy.results.analysis.efficiency import scaling_table
from scalestudy.results.analysis.study import AnalysisOptions, analyse
from scalestudy.results.analysis.target_forecast import forecast_to_target
from scalestudy.results.analysis.target_front import FRONT_COLUMNS, _finished, target_front
from scalestudy.results.analysis.totarget import reached_runs, to_target

SECTION = "## Time and node-hours to the target"


def _runs(points: list[tuple[int, list[float | None]]]) -> pd.DataFrame:
    """(global batch, throughput per repeat, samples/s on 1 node of 2 ranks) per point; a
    repeat reaches the target with 100 samples per unit of batch (time = samples / rate),
    except at a batch of 128 or more, where it stops short."""
    rows = []
    for batch, rates in points:
        for repeat, rate in enumerate(rates):
            reached = batch < 128
            rows.append({
                "run_id": f"b{batch}r{repeat}", "study": "s", "system": "local",
                "scaling": "strong", "nodes": 1, "ranks_per_node": 2, "world_size": 2,
                "batch_size": batch // 2, "global_batch": batch, "backend": "ddp",
                "tuning": "default", "repeat": repeat, "workload": "synthetic",
                "model": "gpt-tiny", "state": "completed", "throughput": rate,
                "throughput_unit": "samples/s", "target_metric": "val_loss",
                "target_value": 2.6, "target_reached": str(reached),
                "steps_to_target": 100.0 if reached else None,
                "samples_to_target": 100.0 * batch if reached else None,
                "time_to_target_s": 100.0 * batch / float(rate or 1) if reached else None,
                "best_value": 2.5 if reached else 2.9})
    return pd.DataFrame(rows)


RUNS = _runs([(16, [100.0]), (32, [180.0, 200.0]), (64, [300.0]), (128, [400.0, 500.0])])


def test_a_point_that_missed_the_target_is_forecast_from_the_others() -> None:
    """Batch 128 never reached it: its measured throughput (450 [400, 500] samples/s)
    times the samples forecast from batches 16-64, the short end the fewest samples at
    the fastest repeat, the long end the most at the slowest."""
    table = scaling_table(RUNS, "strong")
    trained = to_target(RUNS, table, "strong")
    costs = costs_of(table, None, table.iloc[0:0])
    reached = reached_runs(RUNS, table, "strong")
    assert sorted(reached["global_batch"]) == [16, 32, 32, 64]
    got = target_front(costs, trained, reached, None,
                       repeats={(g, 1, 2): 2 for g in table["group"]}).points
    assert list(got["kind"]) == ["measured"] * 3 + ["forecast"]
    f = got.iloc[3]
    assert f["basis"] == "measured throughput × samples forecast"
    p = forecast_to_target(np.array([16.0, 32, 32, 64]), np.array([1600.0, 3200, 3200, 6400]),
                           [128.0], level=0.9).predictions[0]  # the same forecast, reused
    assert (f["samples"], f["samples_low"], f["samples_high"]) == pytest.approx(
        (p.value, p.low, p.high))
    assert f["time_to_target_s"] == pytest.approx(p.value / 450)
    assert (f["time_low"], f["time_high"]) == pytest.approx((p.low / 500, p.high / 400))
    assert f["node_hours_high"] == pytest.approx(p.high / 400 / 3600)
    assert f["level"] == pytest.approx(0.5)  # 2 repeats' min–max holds the median 50 %
    m = got.iloc[0]  # batch 16 trained to it: 1600 samples at 100/s
    assert (m["basis"], m["time_to_target_s"]) == ("trained to the target", 16.0)


def test_too_few_batches_reached_forecast_nothing_and_say_why() -> None:
    runs = _runs([(16, [100.0]), (32, [200.0]), (128, [400.0])])
    table = scaling_table(runs, "strong")
    got = target_front(costs_of(table, None, table.iloc[0:0]), to_target(runs, table, "strong"),
                       reached_runs(runs, table, "strong"), None)
    assert list(got.points["kind"]) == ["measured", "measured"]
    assert "it needs 3 or more; 1 point(s) left off the front" in got.notes[0]


def test_a_throughput_forecast_at_a_batch_that_reached_it_takes_its_measured_samples(
        ) -> None:
    """Strong scaling: batch 32 reached the target on 1 node (2 runs, 3200 samples each);
    its throughput forecast on 4 nodes, 700 [600, 800] samples/s, needs those samples,
    without a samples forecast (2 batches reached it: too few for one)."""
    runs = _runs([(16, [100.0]), (32, [180.0, 200.0])])
    table = scaling_table(runs, "strong")
    group = table["group"].iloc[1]
    predicted = pd.DataFrame([{"group": group, "nodes": 4, "world_size": 8, "batch_size": 4,
                               "global_batch": 32, "throughput_predicted": 700.0,
                               "low": 600.0, "high": 800.0, "level": 0.9}])
    got = target_front(costs_of(table, None, predicted), to_target(runs, table, "strong"),
                       reached_runs(runs, table, "strong"), None,
                       levels={(group, 4, 8): 0.9})
    f = got.points.iloc[2]
    assert (f["kind"], f["basis"]) == ("forecast",
                                       "throughput forecast × measured samples (2 runs)")
    assert (f["time_to_target_s"], f["time_low"], f["time_high"]) == pytest.approx(
        (3200 / 700, 3200 / 800, 3200 / 600))
    assert f["level"] == pytest.approx(0.5)  # the smaller: 2 runs' min–max, not the 90 %
    assert got.notes == ()


def test_a_priced_target_prices_measured_and_predicted_throughput_by_its_rule() -> None:
    runs = _runs([(16, [100.0, 120.0]), (32, [200.0])]).drop(columns=[
        "target_metric", "target_value", "target_reached", "steps_to_target",
        "samples_to_target", "time_to_target_s", "best_value"])
    table = scaling_table(runs, "strong")
    target = Target(total_samples=1e6)
    predicted = pd.DataFrame([{"group": table["group"].iloc[1], "nodes": 4, "world_size": 8,
                               "batch_size": 4, "global_batch": 32,
                               "throughput_predicted": 700.0, "low": 600.0, "high": 800.0,
                               "level": 0.9}])
    costs = costs_of(table, target, predicted)
    got = target_front(costs, to_target(runs, table, "strong"), reached_runs(
        runs, table, "strong"), target, repeats={(g, 1, 2): n for g, n in zip(
            table["group"], table["n_repeats"], strict=True)},
        levels={(predicted["group"].iloc[0], 4, 8): 0.9}, waits={4: 600.0}).points
    assert list(zip(got["kind"], got["basis"], strict=True)) == [
        ("measured", "measured throughput × the target's rule"),
        ("measured", "measured throughput (1 run) × the target's rule"),
        ("forecast", "throughput forecast × the target's rule")]
    assert list(got["time_to_target_s"]) == pytest.approx(list(costs["time_s"]))
    assert list(got["time_high"]) == pytest.approx(list(costs["time_s_high"]))
    # 2 repeats' min–max; 1 run at the exact rule: no interval; the forecast's 90 %
    assert list(got["level"]) == pytest.approx([0.5, math.nan, 0.9], nan_ok=True)
    assert got["finish_high_s"].iloc[2] == pytest.approx(1e6 / 600 + 600)


def test_the_report_and_summary_pick_on_the_front_with_forecasts(tmp_path: Path) -> None:
    options = AnalysisOptions(deadline_s=60.0, budget_node_hours=0.001)
    a = analyse("s", "strong", RUNS, options=options, generated="now")
    picks = a.summary["cost"]["target_picks"]
    # within a minute, batch 16 (16 s, 0.0044 node-h) is the cheapest; 0.001 node-hours
    # (3.6 s) no point fits: the cheapest is named
    assert [(p["option"], p["verdict"], p["point"]["global_batch"]) for p in picks] == [
        ("deadline", "meets", 16.0), ("budget", "does not meet", 16.0)]
    assert a.summary["cost"]["picks"] == [p["sentence"] for p in picks]
    front = a.summary["cost"]["target_front"]
    assert [p["kind"] for p in front["points"]] == ["measured"] * 3 + ["forecast"]
    assert "b_crit" in front["samples_forecast"]["gpt-tiny"]
    json.dumps(a.summary, allow_nan=False)
    page = build_report(tmp_path / "s", a).html.with_name("index.md").read_text()
    section = page.split(SECTION)[1].split("\n## ")[0]
    assert "### Forecast points to the target" in section
    assert "Deadline 1 min, to the target: the cheapest point that meets it" in section
    assert "measured throughput × samples forecast" in section
    assert "Deadline 1 min" not in page.split("## Cost")[1]  # said once, where the front is
    csv = pd.read_csv(tmp_path / "s" / "report" / "target_front.csv")
    assert list(csv["kind"]) == ["measured"] * 3 + ["forecast"]


def test_without_a_target_the_picks_are_the_throughputs() -> None:
    old = RUNS.drop(columns=["target_metric", "target_value", "target_reached",
                             "steps_to_target", "samples_to_target", "time_to_target_s",
                             "best_value"])
    a = analyse("s", "strong", old, options=AnalysisOptions(deadline_s=3 * 3600.0),
                generated="now")
    assert a.front is None and "target_picks" not in a.summary["cost"]
    assert a.picks[0].startswith("Deadline 3 h: the cheapest point that meets it")


SPEC = """name: tf
system: local
scaling: strong
workload: {kind: synthetic, model: gpt-tiny, seq_len: 32, iters: 20}
grid: {nodes: [1], ranks_per_node: [2], global_batch: [16, 32, 64, 128]}
"""


@pytest.mark.slow  # a whole report through the CLI
def test_report_deadline_picks_among_measured_and_forecast_points(tmp_path: Path) -> None:
    """A tiny study dir: batches 16-64 reached the target, 128 did not; `report
    --deadline` prints the pick on the front, and summary.json keeps it."""
    from scalestudy.study import make_plan
    from tests.conftest import run_cli

    spec = tmp_path / "study.yaml"
    spec.write_text(SPEC)
    plan = make_plan(spec, tmp_path / "results")
    for r in plan.runs:
        p = r.params()
        d = plan.run_dir(r)
        d.mkdir(parents=True, exist_ok=True)
        (d / "run.json").write_text(json.dumps(p))
        (d / "status.json").write_text(json.dumps({"state": "completed", "exit_code": 0}))
        batch = int(p["global_batch"])
        reached = batch < 128
        record = {"throughput": 3200.0 * batch ** 0.5, "iters": 20,
                  "throughput_unit": "tokens/s", "seq_len": 32, "device": "cpu",
                  "target_metric": "val_loss", "target_value": 2.6, "target_reached": reached,
                  "time_to_target_s": 500 * batch * 32 / (3200.0 * batch ** 0.5)
                  if reached else None,
                  "samples_to_target": 500 * batch if reached else None,
                  "best_value": 2.5 if reached else 2.8}
        (d / "metrics.jsonl").write_text(json.dumps(record) + "\n")
    done = run_cli("report", str(spec), "--results", "results", "--deadline", "1min",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Deadline 1 min, to the target: the cheapest point that meets it" in done.stdout
    summary = json.loads((tmp_path / "results/tf/report/summary.json").read_text())
    kinds = {p["global_batch"]: p["kind"] for p in summary["cost"]["target_front"]["points"]}
    assert kinds == {16: "measured", 32: "measured", 64: "measured", 128: "forecast"}
    assert summary["cost"]["target_picks"][0]["point"]["kind"] == "measured"
    md = (tmp_path / "results/tf/report/index.md").read_text()
    assert "### Forecast points to the target" in md.split(SECTION)[1]


def test_a_front_without_points_is_empty_with_its_columns() -> None:
    # no point reached the target and none could be forecast: nothing to pick from, and
    # the report still builds (an empty mask once picked columns instead of rows)
    empty = pd.DataFrame(columns=[c for c in FRONT_COLUMNS if c not in (
        "queue_wait_s", "finish_s", "finish_high_s", "pareto")])
    got = _finished(empty, {})
    assert got.empty and list(got.columns) == list(FRONT_COLUMNS)
