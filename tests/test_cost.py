"""Cost of a scale: time to solution, node-hours, energy where measured, the Pareto front
(checked against a brute-force non-dominated filter), deadline and budget picks, and
the target's epochs-per-batch rules."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scalestudy.core.errors import SpecError
from scalestudy.core.load import parse_study
from scalestudy.core.target import Target
from scalestudy.report.sections import cost_cells
from scalestudy.results.analysis.cost import (
    CostBasis,
    cheapest_within,
    cost_table,
    costs_of,
    fastest_within,
    first_to_finish,
    hours,
    pareto_front,
    parse_duration,
    pick_sentences,
)


def brute_force(t: list[float], c: list[float]) -> set[int]:
    return {i for i in range(len(t))
            if not any(t[j] <= t[i] and c[j] <= c[i] and (t[j] < t[i] or c[j] < c[i])
                       for j in range(len(t)))}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 20), st.integers(1, 20)), min_size=1, max_size=25))
def test_pareto_front_is_the_non_dominated_set(points: list[tuple[int, int]]) -> None:
    t, c = [float(p[0]) for p in points], [float(p[1]) for p in points]
    assert set(pareto_front(t, c).tolist()) == brute_force(t, c)


def table(throughputs: dict[int, float], gpus_per_node: int = 4,
          per_gpu: int = 32) -> pd.DataFrame:
    rows = []
    for nodes, thr in throughputs.items():
        size = nodes * gpus_per_node
        rows.append({"group": "g", "nodes": nodes, "ranks_per_node": gpus_per_node,
                     "world_size": size, "batch_size": per_gpu,
                     "global_batch": per_gpu * size, "throughput_median": thr,
                     "throughput_min": thr * 0.9, "throughput_max": thr * 1.1})
    return pd.DataFrame(rows)


# A known table: 1 M samples; 1 node 1,000/s; 2 nodes 1,900/s; 4 nodes 3,000/s;
# 8 nodes 2,900/s (slower than 4: dominated on both axes).
KNOWN = table({1: 1000.0, 2: 1900.0, 4: 3000.0, 8: 2900.0})


def test_a_known_table_priced_per_million_samples() -> None:
    costs = cost_table(KNOWN, CostBasis(None, 128))
    assert costs["time_s"].tolist() == pytest.approx([1000, 1e6 / 1900, 1e6 / 3000,
                                                      1e6 / 2900])
    assert costs["node_hours"].tolist() == pytest.approx(
        [1000 / 3600, 2 * 1e6 / 1900 / 3600, 4 * 1e6 / 3000 / 3600, 8 * 1e6 / 2900 / 3600])
    assert costs["gpu_hours"].tolist() == pytest.approx((costs["node_hours"] * 4).tolist())
    assert costs["pareto"].tolist() == [True, True, True, False]
    # the repeat band: the fastest repeat gives the short end
    assert costs.loc[0, "time_s_low"] == pytest.approx(1e6 / 1100)
    assert costs.loc[0, "time_s_high"] == pytest.approx(1e6 / 900)
    assert costs["energy_kwh"].isna().all() and costs["energy_source"].isna().all()


def test_deadline_and_budget_pick_the_cheapest_and_the_fastest() -> None:
    costs = cost_table(KNOWN, CostBasis(None, 128))
    assert cheapest_within(costs, 600)["nodes"] == 2  # 526 s for 0.29 node-h
    assert cheapest_within(costs, 400)["nodes"] == 4
    assert cheapest_within(costs, 100) is None
    assert fastest_within(costs, 0.3)["nodes"] == 2  # 0.29 node-h; 4 nodes need 0.37
    assert fastest_within(costs, 10)["nodes"] == 4
    assert fastest_within(costs, 0.1) is None


def test_a_deadline_counts_the_queue_wait_and_names_the_first_to_finish() -> None:
    """4 nodes run in 333 s but wait 10 min in the queue; 2 nodes run in 526 s and start
    at once: within 15 min, 2 nodes are the cheapest, and they finish first too; the
    cost table shows each wait."""
    table = KNOWN
    costs = costs_of(table, None, table.iloc[0:0], {2: 0.0, 4: 600.0, 8: 1200.0})
    assert costs["finish_s"].tolist() == pytest.approx(
        [1000, 1e6 / 1900, 1e6 / 3000 + 600, 1e6 / 2900 + 1200])
    assert cheapest_within(costs, 600)["nodes"] == 2
    assert cheapest_within(costs, 400) is None  # without the wait, 4 nodes met it
    assert first_to_finish(costs)["nodes"] == 2
    said = pick_sentences(costs, 900, None)
    assert "the cheapest point that meets it is 2 nodes" in said[0]
    assert "in the queue" in said[0] and len(said) == 1  # it finishes first as well
    assert "first to finish, 2 nodes" in pick_sentences(costs, 60, None)[0]
    headers, rows = cost_cells(costs)
    assert "queue wait" in headers
    assert rows[0][headers.index("queue wait")] == "not known"  # 1 node: no estimate
    assert "queue wait" not in cost_cells(costs_of(table, None, table.iloc[0:0]))[0]


def test_epochs_grow_with_the_batch_past_the_critical_batch() -> None:
    target = Target(samples_per_epoch=1000, epochs=10, critical_batch=1024,
                    reference_batch=128)
    assert target.samples(128, 128) == pytest.approx(10_000)
    assert target.samples(1024, 128) == pytest.approx(10_000 * 2 / (1 + 128 / 1024))
    costs = cost_table(KNOWN, CostBasis(target, 128))
    # more samples at a larger global batch: time-to-solution grows faster than 1/throughput
    assert costs["samples"].is_monotonic_increasing
    assert costs.loc[3, "time_s"] / costs.loc[2, "time_s"] > 3000 / 2900


def test_a_table_of_epochs_is_interpolated_and_never_extrapolated() -> None:
    target = Target(samples_per_epoch=100, epochs_per_batch={256: 90, 1024: 110})
    assert target.samples(256, 0) == pytest.approx(9000)
    assert target.samples(512, 0) == pytest.approx(100 * 100)  # halfway in log2
    assert target.samples(2048, 0) is None
    costs = cost_table(table({1: 1000.0, 2: 1900.0, 4: 3000.0, 8: 2900.0}, per_gpu=64),
                       CostBasis(target, 256))
    assert costs["nodes"].tolist() == [1, 2, 4]  # 8 nodes: global batch 2048, beyond it
    assert "log-linear" in target.describe()


def test_energy_is_priced_only_where_measured() -> None:
    measured = KNOWN.assign(energy_j_per_sample=[2.0, 2.2, np.nan, np.nan],
                            energy_source=["nvml", "nvml", None, None],
                            job_power_w=[np.nan, np.nan, 1200.0, np.nan])
    costs = cost_table(measured, CostBasis(None, 128))
    assert costs.loc[0, "energy_kwh"] == pytest.approx(2.0 * 1e6 / 3.6e6)
    assert costs.loc[0, "energy_source"] == "nvml"
    assert costs.loc[2, "energy_kwh"] == pytest.approx(1200 * costs.loc[2, "time_s"] / 3.6e6)
    assert "accounting" in costs.loc[2, "energy_source"]
    assert math.isnan(costs.loc[3, "energy_kwh"])


def test_predictions_extend_the_front_marked_as_such() -> None:
    preds = pd.DataFrame([{"group": "g", "factor": 2, "nodes": 16, "world_size": 64,
                           "batch_size": 32, "global_batch": 2048,
                           "throughput_predicted": 9000.0, "efficiency_predicted": 0.7,
                           "comm_share": 0.3, "low": 8000.0, "high": 9500.0}])
    costs = cost_table(KNOWN, CostBasis(None, 128), preds)
    last = costs.iloc[-1]
    assert bool(last["predicted"]) and last["nodes"] == 16 and bool(last["pareto"])
    # the forecast's interval is its cost's band: the slow end from the low figure
    assert last["time_s_high"] == pytest.approx(1e6 / 8000.0)
    assert last["time_s_low"] == pytest.approx(1e6 / 9500.0)
    assert cheapest_within(costs, 1) is None  # a prediction is never picked


def test_target_spec_errors_are_located() -> None:
    study = parse_study("name: t\ntarget: {total_samples: 1.2e8, critical_batch: 4096}\n")
    assert study.target is not None and study.target.total_samples == 1.2e8
    with pytest.raises(SpecError, match=r"t.yaml:2: target: give total_samples or "
                                        "samples_per_epoch with epochs, not both"):
        parse_study("name: t\ntarget: {total_samples: 10, samples_per_epoch: 5, epochs: 1}\n",
                    "t.yaml")


@pytest.mark.parametrize(("text", "seconds"), [("6h", 21600), ("90min", 5400), ("45m", 2700),
                                               ("2d", 172800), ("30s", 30), ("1:30:00", 5400)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_a_bare_number_asks_for_its_unit() -> None:
    # `--deadline 6` was read as 6 seconds; a user meant 6 hours.
    with pytest.raises(ValueError, match=r"'6' has no unit: write 6h, 6min, 6d or 6s"):
        parse_duration("6")


def test_bad_durations_and_hours() -> None:
    for bad in ("soon", "-3h", "0", "h"):
        with pytest.raises(ValueError, match="not a duration"):
            parse_duration(bad)
    assert hours(3.1 * 3600) == "3.1 h" and hours(42) == "42 s" and hours(450) == "7.5 min"


def two_groups() -> pd.DataFrame:
    """Batch 8 and batch 16 of one model: batch 16 is faster and cheaper at every scale,
    so no batch-8 point belongs on the front (the example study's case)."""
    small = table({1: 1000.0, 2: 1800.0}, per_gpu=8).assign(group="batch_size=8",
                                                            model="resnet18")
    large = table({1: 1500.0, 2: 2900.0}, per_gpu=16).assign(group="batch_size=16",
                                                             model="resnet18")
    return pd.concat([small, large], ignore_index=True)


def test_one_front_across_groups_that_do_the_same_work(tmp_path) -> None:
    from matplotlib.figure import Figure

    from scalestudy.report.plots import plot_cost
    from scalestudy.report.sections import cost_cells, front_sentences

    costs = cost_table(two_groups(), CostBasis(None, 32))
    by = {(r.group, r.nodes): r for r in costs.itertuples()}
    # the CSV: no batch-8 point is on the front; each is on its own group's
    assert [by["batch_size=8", n].pareto for n in (1, 2)] == [False, False]
    assert [by["batch_size=16", n].pareto for n in (1, 2)] == [True, True]
    assert all(costs["pareto_group"]) and set(costs["work"]) == {"resnet18"}
    costs.to_csv(tmp_path / "cost.csv", index=False)
    csv = pd.read_csv(tmp_path / "cost.csv")
    assert csv.loc[csv["group"] == "batch_size=8", "pareto"].tolist() == [False, False]
    # the words: one front, naming the dominated points of the other group
    (sentence,) = front_sentences(costs)
    assert sentence.startswith("One front across the 2 groups of resnet18: 4 GPUs on 1 "
                               "node (batch_size=16) finishes in")
    assert ("4 GPUs on 1 node (batch_size=8), 2 nodes (8 GPUs) (batch_size=8) are "
            "dominated") in sentence
    headers, rows = cost_cells(costs)
    assert [r[headers.index("front")] for r in rows] == [
        "dominated", "dominated", "on the front", "on the front"]
    # the plot: batch-8 points grey (dominated), batch-16 points filled in their colour
    ax = Figure().add_subplot()
    plot_cost(costs, ax)
    faces = [(line.get_markerfacecolor(), len(line.get_xdata())) for line in ax.lines
             if line.get_marker() == "o"]
    assert faces[0] == ("0.75", 2) and len(faces) == 2 and faces[1][0] != "0.75"
    assert faces[1][1] == 2
    labels = [t.get_text() for t in ax.texts]
    assert labels == ["1 node", "2 nodes", "1 node", "2 nodes"]


def test_points_on_one_node_are_labelled_by_their_gpus() -> None:
    from matplotlib.figure import Figure

    from scalestudy.report.plots import plot_cost

    one_node = pd.DataFrame([{"group": "g", "nodes": 1, "ranks_per_node": r, "world_size": r,
                              "batch_size": 8, "global_batch": 8 * r,
                              "throughput_median": 100.0 * r} for r in (1, 2, 4)])
    ax = Figure().add_subplot()
    plot_cost(cost_table(one_node, CostBasis(None, 8)), ax)
    assert [t.get_text() for t in ax.texts] == ["1 GPU", "2 GPUs", "4 GPUs"]


def test_a_transformer_is_priced_per_million_tokens() -> None:
    from scalestudy.report.sections import cost_cells
    from scalestudy.results.analysis.cost import cost_basis

    gpt = table({1: 8192.0, 2: 16000.0}, per_gpu=8).assign(throughput_unit="tokens/s",
                                                            seq_len=1024)
    basis = cost_basis(gpt, None)
    assert basis.unit() == "per million tokens"
    costs = cost_table(gpt, basis)
    assert costs["time_s"].tolist() == pytest.approx([1e6 / 8192, 1e6 / 16000])
    assert costs["units"].tolist() == pytest.approx([1e6, 1e6])
    assert set(costs["unit"]) == {"tokens"}
    headers, _ = cost_cells(costs)
    assert "tokens" in headers and "samples" not in headers
    # a target counts samples (sequences): its time is the same in either unit
    target = Target(total_samples=1e5)
    timed = cost_table(gpt, CostBasis(target, 32, "tokens"))
    assert timed["time_s"].tolist() == pytest.approx([1e5 * 1024 / 8192, 1e5 * 1024 / 16000])


def test_a_dense_cost_plot_labels_the_front_only_and_says_so() -> None:
    from matplotlib.figure import Figure

    from scalestudy.report.plots import LABEL_EVERY_POINT, plot_cost

    nodes = [2 ** k for k in range(11)]
    frame = pd.concat([table({n: b * n * 0.97 ** i for i, n in enumerate(nodes)}, per_gpu=b)
                       .assign(group=f"batch_size={b}", batch_size=b)
                       for b in (8, 16, 32, 64, 128, 256)], ignore_index=True)
    costs = cost_table(frame, CostBasis(None, 32))
    assert len(costs) > LABEL_EVERY_POINT
    ax = Figure().add_subplot()
    plot_cost(costs, ax)
    assert 0 < len(ax.texts) == int(costs["pareto"].sum()) < len(costs)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert f"{len(costs)} points: only those on the front are labelled" in legend


def test_an_implausible_point_is_flagged_and_decides_no_front() -> None:
    """One point 125 % efficient (a slow baseline repeat): flagged `superlinear`, left
    out of the front with the reason, never the front's conclusion; a point measured once
    is named so."""
    from scalestudy.report.sections import front_sentences
    from scalestudy.results.analysis.efficiency import scaling_table
    from tests.test_efficiency import frame, run

    rows = [run(1, 1, 100.0, repeat=r) for r in range(3)]
    rows += [run(1, 2, 250.0, repeat=r) for r in range(3)]  # 125 % efficient
    rows += [run(1, 4, 360.0, repeat=0)]  # 90 %, one repeat
    t = scaling_table(frame(rows), "weak")
    flags = dict(zip(t["world_size"], t["flags"], strict=True))
    assert flags[2] == "superlinear" and flags[4] == "" and flags[1] == ""
    costs = cost_table(t, CostBasis(None, 16))
    by = costs.set_index("world_size")
    assert not by.loc[2, "pareto"] and by.loc[2, "doubt"] == "superlinear"
    [sentence] = front_sentences(costs)
    assert "2 GPUs on 1 node is left out of the front: its efficiency is above 100 %" \
        in sentence
    assert "2 GPUs on 1 node saves" not in sentence and "2 GPUs on 1 node finishes" \
        not in sentence
    assert "4 GPUs on 1 node (measured once: not a conclusion)" in sentence
