"""Packing a study into allocations (execute.packing.plan): the order keeps repeats apart, small
runs share an allocation side by side, the walltime follows the schedule, and a queue's
longest walltime or node limit splits the study."""

from __future__ import annotations

import pytest

from scalestudy.core.errors import ScalestudyError
from scalestudy.core.grid import Run
from scalestudy.execute.packing.plan import order, pack, schedule, walltime_for


def run(run_id: str, nodes: int, repeat: int = 0) -> Run:
    return Run(run_id, "s", "sys", "weak", nodes, 2, nodes * 2, 4, nodes * 8, "ddp",
               "default", repeat, "bundled", "small_cnn", 16, "fp32")


def grid(repeats: int = 2) -> list[Run]:
    return [run(f"n{n}-r{r}", n, r) for n in (1, 2, 4) for r in range(repeats)]


def test_order_puts_each_points_repeats_a_round_apart_largest_first() -> None:
    ids = [r.run_id for r in order(grid(3))]
    assert ids == ["n4-r0", "n2-r0", "n1-r0", "n4-r1", "n2-r1", "n1-r1",
                   "n4-r2", "n2-r2", "n1-r2"]


def test_small_runs_go_side_by_side_on_disjoint_nodes() -> None:
    steps = schedule([run("a", 2), run("b", 1), run("c", 1), run("d", 4)], 4,
                     lambda r: 100.0, 600)
    at = {s.run.run_id: s for s in steps}
    assert at["a"].start_s == at["b"].start_s == at["c"].start_s == 0.0
    assert set(at["a"].nodes_at) | set(at["b"].nodes_at) | set(at["c"].nodes_at) == {0, 1, 2, 3}
    assert not set(at["a"].nodes_at) & set(at["b"].nodes_at)
    assert at["d"].start_s == 100.0  # waits for all four nodes


def test_no_step_overtakes_an_earlier_one() -> None:
    # the 4-node step waits for the long 1-node step; the 1-node step after it may not
    # start earlier on the free nodes (first come, first served keeps the rounds apart)
    steps = schedule([run("long", 1), run("big", 4), run("small", 1)], 4,
                     lambda r: 500.0 if r.run_id == "long" else 10.0, 600)
    starts = [s.start_s for s in steps]
    assert starts == sorted(starts) and starts[2] >= starts[1] == 500.0


def test_one_allocation_sized_by_the_largest_run_and_the_schedule() -> None:
    [alloc] = pack(grid(2), lambda r: 60.0, 300)
    assert alloc.nodes == 4 and len(alloc.steps) == 6
    # per round: 4 nodes (60 s), then 2 + 1 side by side (60 s): 240 s in all
    assert alloc.span_s == 240.0
    assert alloc.walltime_s == walltime_for(240.0) >= 240 * 1.1
    assert alloc.idle_node_s == 4 * 240 - (4 + 2 + 1) * 60 * 2


def test_a_short_queue_splits_the_study_into_several_allocations() -> None:
    runs = grid(3)
    assert len(pack(runs, lambda r: 60.0, 300)) == 1  # 360 s: 540 s with the margin
    allocations = pack(runs, lambda r: 60.0, 300, longest=lambda n: 420)
    assert len(allocations) > 1
    assert all(a.walltime_s <= 420 for a in allocations)
    packed = [s.run.run_id for a in allocations for s in a.steps]
    assert sorted(packed) == sorted(r.run_id for r in runs)  # each run once, none lost


def test_a_run_the_queue_cannot_take_is_an_error_that_says_what_to_do() -> None:
    with pytest.raises(ScalestudyError, match=r"at most 2.*lower grid\.nodes"):
        pack(grid(1), lambda r: 60.0, 300, max_nodes=2)
    with pytest.raises(ScalestudyError, match="longest walltime"):
        pack(grid(1), lambda r: 3000.0, 3000, longest=lambda n: 1800)
