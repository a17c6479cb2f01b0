"""The adaptive rule with a target (results.analysis.adaptive_target) and its halving
within a rung (results.analysis.adaptive_rung), on tests/data/known_scaling.py's known
throughputs: batch 32 has the lowest img/s, yet with a target whose samples grow with the
global batch it trains soonest on 4 nodes and more, and the rule measures it there; a
one-node grid stops most repeats early; the journal keeps the halving and loads old lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scalestudy.core.target import Target
from scalestudy.results.analysis import adaptive_journal as journal_file
from scalestudy.results.analysis.adaptive import Point, decide
from scalestudy.results.analysis.adaptive_target import TO_TARGET, objective
from tests.test_adaptive import adapt, grid, truth

#: Samples to the target grow as (1 + B/64) from global batch 32: batch 32 trains soonest.
TARGET = Target(total_samples=1e6, critical_batch=64)


def to_target(points: list[Point]) -> dict[tuple[str, int], tuple[float, float]]:
    """The truth: each point's (time, node-hours) to the target, in seconds x nodes."""
    out = {}
    for p in points:
        time = float(TARGET.samples(p.global_batch, 32) or 0) / truth(p)
        out[p.key] = (time, time * p.nodes)
    return out


def front(cost: dict[tuple[str, int], tuple[float, float]]) -> set[tuple[str, int]]:
    return {k for k, (t, c) in cost.items()
            if not any(t2 <= t and c2 <= c and (t2, c2) != (t, c) for t2, c2 in cost.values())}


@pytest.mark.parametrize("seed", range(3))
def test_with_the_target_batch_32_is_measured_on_4_and_8_nodes(seed: int) -> None:
    points = grid()
    goal = objective(TARGET, {p.key: p.global_batch for p in points}, 32.0)
    truth_front = front(to_target(points))
    assert {("batch_size 32, tuning fp16-wire", n) for n in (4, 8)} <= truth_front
    measured, _, skipped, rounds = adapt(points, seed, objective=goal)
    fully = {k for k, v in measured.items() if len(v) == len(points[0].runs)}
    assert truth_front <= fully, (truth_front - fully, skipped)
    assert "front is known within the noise" in rounds[-1]
    spent = sum(p.node_hours / len(p.runs) * len(measured.get(p.key, ())) for p in points)
    assert spent <= 0.35 * sum(p.node_hours for p in points)
    # without the target the same rule never measures batch 32 beyond 2 nodes
    plain, *_ = adapt(points, seed)
    assert not [k for k in plain if k[0].startswith("batch_size 32,") and k[1] >= 4]


def test_a_one_node_grid_measures_a_third_of_its_points_fully() -> None:
    """Nodes [1], 3 batches x 2 tunings, 3 repeats: one repeat each, then the better half
    (and ties) goes on; 2 of the 6 points get every repeat, the best among them."""
    points = [Point(f"batch_size {b}, tuning {t}", 1, 1, float(b), float(b),
                    tuple(f"{b}-{t}-1-{r}" for r in range(3)), 1.5)
              for b in (32, 64, 128) for t in ("default", "fp16-wire")]
    measured, _, skipped, rounds = adapt(points, 0)
    fully = {k for k, v in measured.items() if len(v) == 3}
    assert len(fully) == 2 and len(measured) == 6
    assert max(points, key=truth).key in fully
    assert all("bottom half at 1 node(s) after" in skipped[k] for k in set(measured) - fully)
    runs = sum(len(v) for v in measured.values())
    assert runs == 6 + 3 + 2 and "front is known" in rounds[-1]


def test_a_batch_the_table_has_no_samples_for_keeps_throughput_and_says_why() -> None:
    table = Target(samples_per_epoch=1000, epochs_per_batch={32: 10, 64: 12})
    keys = {("batch_size 32", 1): 32.0, ("batch_size 64", 1): 64.0, ("batch_size 128", 1): 128.0}
    goal = objective(table, keys, 32.0)
    assert goal.unit(("batch_size 32", 1)) == TO_TARGET
    assert goal.unit(("batch_size 128", 1)) == "throughput"
    assert goal.notes and "global batch 128" in goal.notes[0]
    # the halving ranks the two objectives apart (a rate to the target and an img/s are
    # not comparable): batch 128 alone, 32 and 64 within the noise of each other
    points = [Point(a, 1, 1, b, b, (f"{a}-0", f"{a}-1"), 1.0) for a, b in
              (("batch_size 32", 32.0), ("batch_size 64", 64.0), ("batch_size 128", 128.0))]
    measured = {p.key: [truth_of(p)] for p in points}
    d = decide(points, measured, set(), {}, {}, None, {p.runs[0] for p in points}, goal)
    assert len(d.points) == 3 and d.halved == ()
    assert d.notes == goal.notes


def truth_of(p: Point) -> float:
    return float(p.global_batch) / ((p.global_batch + 16) / 1000)


def test_a_measured_target_forecasts_the_unmeasured_batches_with_its_interval() -> None:
    measured_target = Target(metric="val_loss", value=3.0, eval_every=10, max_steps=500)
    batches = {("b", n): 32.0 * n for n in (1, 2, 4, 8, 16)}
    samples = {("b", n): [1000 * (1 + 32 * n / 64) * f for f in (0.98, 1.02)]
               for n in (1, 2, 4)}
    goal = objective(measured_target, batches, 32.0, samples)
    assert set(goal.factors) == set(batches) and not goal.notes
    lo, mid, hi = goal.factors[("b", 16)]
    assert lo < mid < hi and hi / lo > 1.2  # the forecast's interval widens the band
    # 4× out the interval holds the truth; the forecast bends less than this pure
    # McCandlish curve does (its knee is inside the runs): on MLPerf's reference points a
    # gentle bend forecasts best (docs/forecast.md), so it falls short here, by under 35 %
    assert lo < 1 / (1000 * (1 + 512 / 64)) < hi
    assert 1 / mid == pytest.approx(1000 * (1 + 512 / 64), rel=0.35)
    few = objective(measured_target, batches, 32.0, {("b", 1): [1000.0]})
    assert set(few.factors) == {("b", 1)} and "fewer than 3 global batches" in few.notes[0]


def test_the_journal_keeps_the_halving_and_loads_old_lines(tmp_path: Path) -> None:
    points = [Point(f"batch_size {b}", 1, 1, float(b), float(b),
                    tuple(f"{b}-{r}" for r in range(2)), 1.0) for b in (32, 64, 128)]
    measured = {p.key: [truth_of(p)] for p in points}
    ended = {p.runs[0] for p in points}
    d = decide(points, measured, set(), {}, {}, None, ended)
    assert d.halved and d.runs == tuple(p.runs[1] for p in d.points)
    journal_file.record(tmp_path, 2, d)
    old = {"schema": "scalestudy.adaptive/1", "kind": "drop", "round": 1,
           "alternative": "batch_size 16", "evidence": "slower"}
    with open(tmp_path / journal_file.FILE, "a") as out:
        out.write(json.dumps(old) + "\n")
    got = journal_file.read(tmp_path)
    assert set(got.halved) == {(v.alternative, 1) for v in d.halved}
    assert got.dropped == {"batch_size 16": "slower"}
    assert got.rounds[0]["runs"] == list(d.runs)
    tally = journal_file.tally(points, measured, ended)
    assert (tally["measured_fully"], tally["measured_partly"], tally["not_measured"]) \
        == (0, 3, 0)
    # the halved point's second repeat was never run: the report lists it with why
    rows = journal_file.not_measured(points, got, measured)
    assert [(r["alternative"], r["runs"]) for r in rows] == [
        (v.alternative, 1) for v in d.halved]
    assert all(r["why"].startswith("measured partly (1 of 2 repeats), then halved")
               and r["node_hours"] == pytest.approx(0.5) for r in rows)
