"""results/analysis/totarget.py: time and node-hours to a measured target per point, from
runs as collect reads them (repeats, a run that did not reach it, the front), and the
report's section, summary.json's key and the terminal's line that show them only when
the study measured a target."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from scalestudy.report.build import build_report
from scalestudy.report.page import markdown
from scalestudy.report.sections import to_target_blocks
from scalestudy.results.analysis.efficiency import scaling_table
from scalestudy.results.analysis.study import analyse
from scalestudy.results.analysis.totarget import measured, median_interval, sentence, to_target

SECTION = "## Time and node-hours to the target"


def _runs(points: list[tuple[int, int, list[float | None]]]) -> pd.DataFrame:
    """One row per run: (nodes, global batch, time to the target per repeat; None: the
    repeat did not reach it), 2 ranks per node, strong scaling (the group is the batch)."""
    rows = []
    for nodes, batch, times in points:
        for repeat, t in enumerate(times):
            rows.append({  # the parameters (run.json), then `state`, then the record's
                "run_id": f"n{nodes}b{batch}r{repeat}", "study": "s", "system": "local",
                "scaling": "strong", "nodes": nodes, "ranks_per_node": 2,
                "world_size": 2 * nodes, "batch_size": batch // (2 * nodes),
                "global_batch": batch, "backend": "ddp", "tuning": "default",
                "repeat": repeat, "workload": "synthetic", "model": "gpt-tiny",
                "state": "completed", "throughput": 1000.0 * nodes,
                "throughput_unit": "tokens/s", "target_metric": "val_loss",
                "target_value": 2.6, "target_reached": "True" if t is not None else "False",
                "steps_to_target": 100.0 * batch / 8 if t is not None else None,
                "samples_to_target": 100.0 * batch if t is not None else None,
                "time_to_target_s": t, "best_value": 2.5 if t is not None else 2.71})
    return pd.DataFrame(rows)


def _points(runs: pd.DataFrame) -> pd.DataFrame:
    return to_target(runs, scaling_table(runs, "strong"), "strong")


def test_repeats_give_a_median_with_its_interval_and_misses_are_counted_apart() -> None:
    runs = _runs([(1, 32, [100.0, 120.0, None, 110.0]),  # one repeat missed the target
                  (1, 8, [300.0] * 8 + [200.0, 400.0])])  # 10 repeats: order statistics
    got = _points(runs).set_index("global_batch")
    p = got.loc[32]
    assert (p["runs"], p["reached"], p["not_reached"]) == (4, 3, 1)
    assert p["time_to_target_s"] == 110.0  # the miss is not averaged in as max_steps
    assert (p["time_low"], p["time_high"], p["interval"]) == (100.0, 120.0, "min–max")
    assert p["coverage"] == pytest.approx(0.75)
    assert p["node_hours"] == pytest.approx(110.0 / 3600)
    assert p["best_not_reached"] == 2.71 and p["samples_to_target"] == 3200.0
    q = got.loc[8]
    assert q["interval"] == "order statistics" and q["coverage"] >= 0.90
    assert (q["time_low"], q["time_high"]) == (300.0, 300.0)  # the 2nd smallest, 2nd largest
    assert math.isnan(q["best_not_reached"])


def test_the_interval_of_the_median_comes_from_order_statistics() -> None:
    assert median_interval([5.0]) == (5.0, 5.0, 5.0, 0.0)
    median, low, high, cover = median_interval([float(v) for v in range(1, 11)])
    assert (median, low, high) == (5.5, 2.0, 9.0)  # k = 2: 1 - 2 * 11/1024 = 97.9 %
    assert cover == pytest.approx(1 - 2 * 11 / 1024)
    _, low, high, cover = median_interval([float(v) for v in range(1, 21)])
    assert (low, high) == (6.0, 15.0) and cover >= 0.90  # k = 6: 95.9 %, k = 7 is 88.5 %


def test_fastest_cheapest_and_the_front_of_time_against_node_hours() -> None:
    runs = _runs([(1, 32, [400.0, 400.0]),  # 0.111 node-hours: cheapest
                  (2, 32, [250.0]),  # 0.139 node-hours, faster: on the front
                  (4, 32, [240.0]),  # 0.267 node-hours, fastest: on the front
                  (4, 64, [300.0]),  # slower and dearer than 4 nodes at 32: dominated
                  (8, 64, [None, None])])  # never reached: counted, on no front
    got = _points(runs)
    by = {(int(r.nodes), int(r.global_batch)): r for r in got.itertuples()}
    assert [k for k, r in by.items() if r.pareto] == [(1, 32), (2, 32), (4, 32)]
    assert [k for k, r in by.items() if r.fastest] == [(4, 32)]
    assert [k for k, r in by.items() if r.cheapest] == [(1, 32)]
    assert by[(8, 64)].not_reached == 2 and math.isnan(by[(8, 64)].time_to_target_s)
    said = sentence(got)
    assert said.startswith("Fastest to the target: global batch 32 at 4 nodes (8 GPUs) "
                           "(4 min for 0.267 node-hours); cheapest: global batch 32 at "
                           "2 GPUs on 1 node (0.111 node-hours in 6.67 min)")
    text = markdown(to_target_blocks(got))
    assert "| global batch 64 | 8 | 16 | 64 | 0/2 | 2 (best 2.71) | not reached |" in text
    assert "| 4 min | 0.267 | 3,200 | fastest, on the front |" in text
    assert "dominated" in text


def test_no_point_reached_it_says_so() -> None:
    got = _points(_runs([(1, 32, [None]), (2, 32, [None, None])]))
    assert not got["pareto"].any() and not got["fastest"].any()
    assert sentence(got) == ("No point reached the target: 3 run(s), none of them "
                             "reached it.")


def test_a_study_without_a_measured_target_has_no_section(tmp_path: Path) -> None:
    old = _runs([(1, 32, [100.0]), (2, 32, [60.0])]).drop(
        columns=["target_metric", "target_value", "target_reached", "steps_to_target",
                 "samples_to_target", "time_to_target_s", "best_value"])
    assert not measured(old) and _points(old).empty
    a = analyse("s", "strong", old, generated="now")
    assert a.to_target.empty and "to_target" not in a.summary
    page = build_report(tmp_path / "old", a).html.with_name("index.md").read_text()
    assert SECTION not in page
    assert not (tmp_path / "old" / "report" / "to_target.csv").exists()


def test_the_report_and_summary_show_it_with_a_measured_target(tmp_path: Path) -> None:
    runs = _runs([(1, 32, [100.0, 120.0]), (2, 32, [70.0, None])])
    a = analyse("s", "strong", runs, generated="now")
    page = build_report(tmp_path / "s", a).html.with_name("index.md").read_text()
    assert SECTION in page and "min–max" in page
    section = page.split(SECTION)[1].split("\n## ")[0]
    assert "| global batch 32 | 2 | 4 | 32 | 1/2 | 1 (best 2.71) | 1.17 min |" in section
    assert "| global batch 32 | 1 | 2 | 32 | 2/2 | 0 | 1.83 min [1.67 min–2 min] |" in section
    summary = json.loads((tmp_path / "s" / "report" / "summary.json").read_text())
    assert summary["schema"] == "scalestudy.summary/2"  # one key more, old readers unchanged
    points = summary["to_target"]["points"]
    assert [(p["nodes"], p["reached"], p["not_reached"]) for p in points] == [
        (1, 2, 0), (2, 1, 1)]
    assert points[0]["node_hours_high"] == pytest.approx(120.0 / 3600)
    assert summary["to_target"]["sentence"].startswith("Fastest to the target: global "
                                                       "batch 32 at 2 nodes (4 GPUs)")
    csv = pd.read_csv(tmp_path / "s" / "report" / "to_target.csv")
    assert list(csv["reached"]) == [2, 1]


SPEC = """name: tt
system: local
scaling: strong
workload: {kind: synthetic, model: gpt-tiny, seq_len: 32, iters: 20}
grid: {nodes: [1], ranks_per_node: [2], global_batch: [16, 32, 64]}
"""


@pytest.mark.slow  # a whole report through the CLI
def test_report_prints_the_fastest_and_cheapest_line(tmp_path: Path) -> None:
    from scalestudy.study import make_plan
    from tests.conftest import run_cli

    spec = tmp_path / "study.yaml"
    spec.write_text(SPEC)
    plan = make_plan(spec, tmp_path / "results")
    seconds = {16: 60.0, 32: 40.0, 64: None}  # batch 64 never reached the target
    for r in plan.runs:
        p = r.params()
        d = plan.run_dir(r)
        d.mkdir(parents=True, exist_ok=True)
        (d / "run.json").write_text(json.dumps(p))
        (d / "status.json").write_text(json.dumps({"state": "completed", "exit_code": 0}))
        t = seconds[int(p["global_batch"])]
        record = {"throughput": 5000.0, "iters": 20, "throughput_unit": "tokens/s",
                  "device": "cpu", "target_metric": "val_loss", "target_value": 2.6,
                  "target_reached": t is not None, "time_to_target_s": t,
                  "samples_to_target": None if t is None else 500 * int(p["global_batch"]),
                  "best_value": 2.5 if t is not None else 2.8}
        (d / "metrics.jsonl").write_text(json.dumps(record) + "\n")
    done = run_cli("report", str(spec), "--results", "results", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert ("Fastest and cheapest to the target: global batch 32 at 2 GPUs on 1 node "
            "(40 s for 0.0111 node-hours).") in done.stdout
    md = (tmp_path / "results/tt/report/index.md").read_text()
    section = md.split(SECTION)[1].split("\n## ")[0]
    assert "| global batch 64 | 1 | 2 | 64 | 0/1 | 1 (best 2.8) | not reached |" in section
    assert "| nodes | ranks |" in section  # a CPU study counts ranks
