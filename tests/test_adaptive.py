"""The adaptive rule (results.analysis.adaptive) on a known scaling function with 1 % noise: it
finds every point of the true front and spends at most 35 % of the grid's node-hours;
it keeps what an alternative wins at small scales; it never drops on one scale; the
budget stops it; and its journal (results.analysis.adaptive_journal) survives a torn line."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from scalestudy.core.errors import ScalestudyError
from scalestudy.results.analysis import adaptive_journal as journal_file
from scalestudy.results.analysis.adaptive import ASSUMED_NOISE, Point, decide, noise_of
from scalestudy.results.analysis.adaptive_target import Objective

sys.path.insert(0, str(Path(__file__).parent / "data"))
import known_scaling as known

NODES = (1, 2, 4, 8, 16)
BATCHES = (32, 64, 128)
TUNINGS = ("default", "fp16-wire")
REPEATS = 2


def grid(nodes: tuple[int, ...] = NODES) -> list[Point]:
    return [Point(f"batch_size {b}, tuning {t}", n, n, float(b), float(b * n),
                  tuple(f"{b}-{t}-{n}-{r}" for r in range(REPEATS)), n * REPEATS * 0.5)
            for b in BATCHES for t in TUNINGS for n in nodes]


def truth(p: Point) -> float:
    return known.throughput(p.nodes, int(p.per_gpu_batch), p.alternative.split("tuning ")[1])


def true_front(points: list[Point]) -> set[tuple[str, int]]:
    """The points no other is both faster and cheaper than (time 1/X, node-hours n/X)."""
    cost = {p.key: (1 / truth(p), p.nodes / truth(p)) for p in points}
    return {k for k, (t, c) in cost.items()
            if not any(t2 <= t and c2 <= c and (t2, c2) != (t, c) for t2, c2 in cost.values())}


def adapt(points: list[Point], seed: int, budget: float | None = None,
          objective: Objective | None = None
          ) -> tuple[dict[tuple[str, int], list[float]], dict, dict, list]:
    """The rule run to its end, each chosen run measured with 1 % noise (a point
    stopped by the halving within a rung is in `skipped`)."""
    rng = random.Random(seed)
    measured: dict[tuple[str, int], list[float]] = {}
    dropped: dict[str, str] = {}
    skipped: dict[tuple[str, int], str] = {}
    ended: set[str] = set()
    rounds = []
    of = {r: p for p in points for r in p.runs}
    for _ in range(60):
        spent = sum(p.node_hours / len(p.runs) for p in points for r in p.runs if r in ended)
        d = decide(points, measured, set(), dropped, skipped,
                   None if budget is None else budget - spent, ended, objective)
        dropped.update({v.alternative: v.evidence for v in d.dropped})
        skipped.update({(v.alternative, int(v.nodes or 0)): v.evidence
                        for v in (*d.skipped, *d.halved)})
        if not d.points:
            rounds.append(d.why)
            break
        rounds.append([p.key for p in d.points])
        for r in d.runs:
            p = of[r]
            measured.setdefault(p.key, []).append(truth(p) * (1 + rng.gauss(0, known.NOISE)))
            ended.add(r)
    return measured, dropped, skipped, rounds


@pytest.mark.parametrize("seed", range(8))
def test_the_front_is_found_for_at_most_35_percent_of_the_node_hours(seed: int) -> None:
    points = grid()
    measured, dropped, skipped, rounds = adapt(points, seed)
    front = true_front(points)
    assert front <= set(measured), (front - set(measured), skipped)
    spent = sum(p.node_hours for p in points if p.key in measured)
    assert spent <= 0.35 * sum(p.node_hours for p in points)
    assert "front is known within the noise" in rounds[-1]
    # every point is measured or has its reason
    for p in points:
        assert p.key in measured or p.key in skipped or p.alternative in dropped


def test_the_first_round_is_every_alternative_at_its_two_smallest_scales() -> None:
    d = decide(grid(), {}, set(), {}, {})
    assert sorted({p.nodes for p in d.points}) == [1, 2]
    assert len(d.points) == len(BATCHES) * len(TUNINGS) * 2
    assert (d.noise, d.dropped, d.skipped) == (ASSUMED_NOISE, (), ())


def test_an_alternative_that_wins_at_one_node_keeps_that_point() -> None:
    """fp16-wire pays 4 % of compute: the default wins on 1 node (on the front), loses
    beyond; the default's 1-node point is kept, its larger ones are not measured fully
    (left out, or stopped after a repeat: fp16-wire is faster there)."""
    points = grid()
    measured, dropped, skipped, _ = adapt(points, 0)
    default = "batch_size 128, tuning default"
    assert (default, 1) in true_front(points)
    assert len(measured[(default, 1)]) == REPEATS
    assert default not in dropped
    later = [n for (a, n) in skipped if a == default]
    assert later and min(later) >= 4
    assert all(len(measured.get((default, n), ())) < REPEATS for n in (4, 8, 16))
    assert all("faster there, by at least" in skipped[(default, n)]
               or "bottom half at" in skipped[(default, n)] for n in later)


def test_one_scale_never_drops_an_alternative() -> None:
    """Measured on one node only, a 50 % slower alternative is kept: one scale says
    nothing of how it scales."""
    points = [p for p in grid() if p.nodes in (1, 4)]
    points = [p for p in points if p.alternative.startswith(("batch_size 32,", "batch_size 128,"))]
    measured = {p.key: [truth(p)] * 2 for p in points if p.nodes == 1}
    d = decide(points, measured, set(), {}, {})
    assert d.dropped == () and d.skipped == ()
    assert {p.nodes for p in d.points} == {4}


def test_the_budget_stops_the_study_with_why() -> None:
    points = grid()
    measured, _, _, rounds = adapt(points, 1, budget=12.0)  # round 1 costs 9, 2 would 18
    assert measured and isinstance(rounds[-1], str) and "the budget" in rounds[-1]
    assert sum(p.node_hours / REPEATS * len(measured.get(p.key, ())) for p in points) <= 12.0


def test_the_noise_is_pooled_from_the_repeats() -> None:
    sigma, source = noise_of({("a", 1): [100.0, 102.0], ("a", 2): [200.0, 196.0]})
    assert 0.01 < sigma < 0.02 and "2 degree(s) of freedom" in source
    assert noise_of({("a", 1): [100.0]})[0] == ASSUMED_NOISE


def test_the_journal_keeps_decisions_and_ignores_a_torn_line(tmp_path: Path) -> None:
    points = grid((1, 2, 4))
    first = decide(points, {}, set(), {}, {})
    journal_file.record(tmp_path, 1, first)
    measured, *_ = adapt(points, 0)
    second = decide(points, {k: v for k, v in measured.items() if k[1] <= 2}, set(), {}, {})
    journal_file.record(tmp_path, 2, second)
    with open(tmp_path / journal_file.FILE, "a") as out:
        out.write('{"schema": "scalestudy.adaptive/1", "kind": "ro')  # killed mid-write
    got = journal_file.read(tmp_path)
    assert [r["round"] for r in got.rounds] == [1, 2]
    assert got.runs()[:len(first.runs)] == [p.runs[0] for p in first.points]  # a repeat each
    assert set(got.dropped) == {v.alternative for v in second.dropped}
    rows = journal_file.not_measured(points, got, {k: v for k, v in measured.items()
                                                   if k[1] <= 2})
    assert {(r["alternative"], r["nodes"]) for r in rows} == {p.key for p in points
                                                               if p.nodes == 4}
    assert all(r["why"] for r in rows)


def test_a_broken_journal_line_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / journal_file.FILE).write_text("not json\n" + json.dumps(
        {"schema": journal_file.SCHEMA, "kind": "stop", "why": "x"}) + "\n")
    with pytest.raises(ScalestudyError, match=r"adaptive.jsonl:1: not a JSON line"):
        journal_file.read(tmp_path)
