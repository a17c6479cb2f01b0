"""results.analysis.hours and report.hours: where a point's wall clock went, on real
records (the previous release's runs and a record with checkpoint keys), the parts adding
up to the measured wall clock, and the section saying when they do not."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from scalestudy.report.hours import hours_blocks, plot_hours
from scalestudy.report.page import Heading, Image, Items, Para, Table
from scalestudy.results.analysis.collect import read_runs
from scalestudy.results.analysis.efficiency import scaling_table
from scalestudy.results.analysis.goodput import FailureInputs
from scalestudy.results.analysis.hours import PARTS, TOLERANCE, run_parts, where_hours_go

PREVIOUS = Path(__file__).parent / "data" / "previous-release" / "results" / "prev" / "runs.csv"
#: A real run of the checkpointing benchmark (gpt-tiny to a target, 2 CPU ranks, a save
#: every 10 steps), killed after step 50 and resumed by `run`: its second attempt.
RESUMED = Path(__file__).parent / "data" / "goodput" / "resumed-runs.csv"


def test_the_parts_of_real_runs_add_to_their_wall_clock_and_say_what_is_not_timed() -> None:
    runs = read_runs(PREVIOUS)
    hours = where_hours_go(runs, scaling_table(runs, "weak"), "weak")
    assert list(hours["world_size"]) == [1, 2]
    for (_, h), (_, r) in zip(hours.iterrows(), runs.iterrows(), strict=True):
        assert h["wall_s"] == r["elapsed_s"]  # the run's own wall clock
        steps = r["iter_time_mean"] * (r["iters"] + r["warmup_iters"])
        assert h["compute_s"] + h["communication_s"] == pytest.approx(steps)
        assert h["communication_s"] == pytest.approx(steps * r["comm_overhead"])
        assert sum(h[p] for p in PARTS if math.isfinite(h[p])) == pytest.approx(h["wall_s"])
        # a release before start-up was timed: most of these short runs is not timed
        assert math.isnan(h["startup_s"]) and h["unknown"] == "start-up"
        assert not h["adds_up"] and h["not_timed_s"] > TOLERANCE * h["wall_s"]
        assert math.isnan(h["expected_failures_s"])  # no rate given
    blocks = hours_blocks(hours, "")
    assert not any(isinstance(b, Items) for b in blocks)  # no start-up split recorded
    assert isinstance(blocks[0], Heading) and blocks[0].text == "Where the hours go"
    said = " ".join(b.text for b in blocks if isinstance(b, Para))
    assert "At 2 of 2 point(s) the timed parts do not add up" in said
    assert "Expected failures: not known" in said
    table = next(b for b in blocks if isinstance(b, Table))
    assert table.rows[0][-1] == "no (start-up not measured)"
    assert any(isinstance(b, Image) for b in blocks)


def test_a_real_resumed_attempt_counts_its_own_share_and_its_load_once() -> None:
    runs = read_runs(RESUMED)
    (h,) = (r for _, r in where_hours_go(runs, scaling_table(runs, "weak"), "weak",
                                         FailureInputs(0.01, "given")).iterrows())
    r = runs.iloc[0]
    assert (r["resumed_from_step"], r["steps_trained"]) == (50, 100)
    assert h["compute_s"] + h["input_wait_s"] == pytest.approx(r["train_s"] / 2)
    assert h["evaluation_s"] == pytest.approx(r["eval_s"] / 2)
    assert h["checkpoints_s"] == pytest.approx(r["checkpoints"] * r["checkpoint_save_s"])
    split = sum(r[k] for k in ("startup_launch_s", "startup_imports_s",
                               "startup_rendezvous_s", "startup_data_s"))
    assert h["startup_s"] == pytest.approx(split)  # the load is inside, counted once
    timed = sum(h[p] for p in PARTS if p != "not_timed_s" and math.isfinite(h[p]))
    assert timed + h["not_timed_s"] == pytest.approx(h["wall_s"])
    assert 0 < h["not_timed_s"] < 0.1 * h["wall_s"] and not h["adds_up"]


def checkpointed(nodes: int) -> dict[str, object]:
    """A run's runs.csv row as the checkpointing benchmark writes it: 30 min of wall
    clock, 40 s of start-up (a 20 s load inside), 4 saves of 12 s blocked, resumed
    halfway: the record's training and evaluation times are the whole run's."""
    return {"run_id": f"c{nodes}", "study": "c", "system": "polaris", "scaling": "weak",
            "nodes": nodes, "ranks_per_node": 4, "world_size": 4 * nodes, "batch_size": 8,
            "global_batch": 32 * nodes, "backend": "ddp", "tuning": "default",
            "repeat": 0, "model": "gpt-1.3b", "state": "completed", "throughput": 100.0,
            "elapsed_s": 1800.0, "startup_s": 40.0, "train_s": 3200.0,
            "steps_trained": 2000, "resumed_from_step": 1000,
            "comm_overhead": 0.25, "input_wait_fraction": 0.05, "checkpoints": 4,
            "checkpoint_save_s": 12.0, "checkpoint_every_s": 400.0,
            "checkpoint_load_s": 20.0, "eval_s": 120.0,
            "startup_launch_s": 5.0, "startup_imports_s": 15.0,
            "startup_rendezvous_s": 10.0, "startup_data_s": 10.0, "first_step_s": 3.0}


def test_a_checkpointed_run_adds_up_and_more_nodes_expect_more_failures() -> None:
    parts = run_parts(checkpointed(2))
    assert parts["communication_s"] == 400 and parts["input_wait_s"] == 80
    assert parts["compute_s"] == 1120 and parts["checkpoints_s"] == 4 * 12
    assert parts["evaluation_s"] == 60  # this attempt's half of the run's
    assert parts["not_timed_s"] == pytest.approx(1800 - 40 - 1600 - 48 - 60)
    runs = pd.DataFrame([checkpointed(2), checkpointed(16)])
    hours = where_hours_go(runs, scaling_table(runs, "weak"), "weak",
                           FailureInputs(0.01, "given", queue_wait_s=300.0))
    assert hours["adds_up"].all()  # 32 s of 1800 not timed: within 5 %
    assert hours["startup_imports_s"].tolist() == [15.0, 15.0]
    split = next(b for b in hours_blocks(hours, "given") if isinstance(b, Items))
    assert split.items[0] == ("batch 8 2n×4: launch 5 s, imports 15 s, rendezvous 10 s, "
                              "data 10 s, first step 3 s")
    small, large = hours["expected_failures_s"]
    assert 0 < small < large  # eight times the nodes, eight times the failures
    # 1760 s of work at M = 3600 / (0.01 · 2) = 180,000 s: a failure in ~1 % of such
    # runs, each costing the queue wait, start-up (its load inside) and half a 412 s
    # segment
    assert small == pytest.approx(1800 / 180_000 * (300 + 40 + 206), rel=0.1)


def test_the_plot_draws_a_bar_per_point() -> None:
    from matplotlib.figure import Figure

    runs = pd.DataFrame([checkpointed(2), checkpointed(16)])
    hours = where_hours_go(runs, scaling_table(runs, "weak"), "weak",
                           FailureInputs(0.01, "given"))
    ax = Figure().add_subplot()
    plot_hours(hours, ax)
    assert len(ax.get_xticks()) == 2
    assert {t.get_text() for t in ax.get_legend().get_texts()} >= {
        "start-up", "compute", "communication", "checkpoints", "expected failures"}


def test_past_48_points_the_plot_draws_each_groups_largest_and_says_so() -> None:
    from matplotlib.figure import Figure

    from scalestudy.report.hours import MAX_BARS

    one = where_hours_go(*(lambda r: (r, scaling_table(r, "weak")))(
        pd.DataFrame([checkpointed(2), checkpointed(16)])), "weak")
    many = pd.concat([one.assign(group=f"g{i}") for i in range(30)], ignore_index=True)
    ax = Figure().add_subplot()
    plot_hours(many, ax)
    assert len(ax.get_xticks()) == 30 <= MAX_BARS  # 60 points: each group's largest
    assert "30 of 60 points" in ax.get_title()
    assert all(t.get_text().endswith(f"{int(many['nodes'].max())}n×4")
               for t in ax.get_xticklabels())
