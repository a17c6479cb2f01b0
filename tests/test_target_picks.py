"""results/analysis/target_picks.py: what --deadline and --budget pick on the front to the
target, among measured and forecast points, an interval's long end deciding what "meets"
a limit, its central value only what "likely meets" it."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from scalestudy.results.analysis.target_front import FRONT_COLUMNS
from scalestudy.results.analysis.target_picks import (
    CLOSEST,
    LIKELIER,
    LIKELY,
    MEETS,
    MISSES,
    PICK,
    target_picks,
)

TRAINED = ("measured", "trained to the target")
FORECAST = ("forecast", "throughput forecast × samples forecast")
H = 3600.0


def front(*points: tuple[int, tuple[str, str], float, float, float, float]) -> pd.DataFrame:
    """(nodes, (kind, basis), time h, time low h, time high h, level) per point, 4 GPUs a
    node, global batch 32 per GPU; node-hours = nodes x time, no queue wait."""
    rows = []
    for nodes, (kind, basis), t, low, high, level in points:
        rows.append({
            "group": "", "work": "gpt", "nodes": nodes, "ranks_per_node": 4,
            "world_size": 4 * nodes, "global_batch": 128.0 * nodes, "kind": kind,
            "basis": basis, "samples": 1e6, "samples_low": 1e6, "samples_high": 1e6,
            "time_to_target_s": t * H, "time_low": low * H, "time_high": high * H,
            "node_hours": nodes * t, "node_hours_low": nodes * low,
            "node_hours_high": nodes * high, "level": level, "queue_wait_s": math.nan,
            "finish_s": t * H, "finish_high_s": high * H, "doubt": "", "pareto": True})
    return pd.DataFrame(rows, columns=list(FRONT_COLUMNS))


def test_measured_points_only_the_cheapest_that_meets_the_deadline() -> None:
    points = front((1, TRAINED, 10.0, 9.0, 11.0, 0.75),  # 10 node-h, too slow for 8 h
                   (2, TRAINED, 6.0, 5.5, 6.5, 0.75),  # 12 node-h: meets 8 h
                   (4, TRAINED, 4.0, 3.5, 4.5, 0.75))  # 16 node-h: meets, dearer
    [got] = target_picks(points, 8 * H, None)
    assert (got.role, got.verdict, got.point["nodes"]) == (PICK, MEETS, 2)
    assert got.sentence == (
        "Deadline 8 h, to the target: the cheapest point that meets it, its interval's long "
        "end included, is 2 nodes (8 GPUs) (global batch 256; measured: trained to the "
        "target): 6 h [5.5 h–6.5 h] to the target, for 12 node-hours [11–13].")
    assert got.as_dict()["limit_unit"] == "s" and got.as_dict()["point"]["kind"] == "measured"


def test_forecast_points_only_are_picked_and_said_to_be_forecasts() -> None:
    points = front((8, FORECAST, 3.0, 2.5, 3.6, 0.9), (16, FORECAST, 2.0, 1.6, 2.5, 0.9))
    deadline, budget = target_picks(points, 4 * H, 40.0)
    assert (deadline.point["nodes"], deadline.verdict) == (8, MEETS)  # 24 node-h < 32
    assert "forecast: throughput forecast × samples forecast" in deadline.sentence
    # 16 nodes: 32 node-h [25.6–40]: within 40 whole, and faster than 8 nodes
    assert (budget.option, budget.point["nodes"], budget.verdict) == ("budget", 16, MEETS)
    assert budget.sentence.startswith("Budget 40 node-hours, to the target: the fastest "
                                      "point that fits it")


def test_a_deadline_nobody_meets_names_the_first_to_finish() -> None:
    points = front((1, TRAINED, 10.0, 9.0, 11.0, 0.75), (8, FORECAST, 3.0, 2.5, 3.6, 0.9))
    [got] = target_picks(points, 2 * H, None)
    assert (got.role, got.verdict, got.point["nodes"]) == (CLOSEST, MISSES, 8)
    assert got.sentence.startswith("Deadline 2 h, to the target: no measured or forecast "
                                   "point meets it; the first to finish is 8 nodes")


def test_a_budget_only_a_forecast_point_fits() -> None:
    """The measured points need 20 and 24 node-hours; a forecast at a smaller global batch
    on 1 node needs 9 [8–9.5]: a budget of 10 picks it, and says it is a forecast."""
    points = front((2, TRAINED, 10.0, 9.0, 11.0, 0.75), (4, TRAINED, 6.0, 5.5, 6.5, 0.75),
                   (1, FORECAST, 9.0, 8.0, 9.5, 0.9))
    [got] = target_picks(points, None, 10.0)
    assert (got.point["kind"], got.point["nodes"], got.verdict) == ("forecast", 1, MEETS)
    assert "(global batch 128; forecast: throughput forecast × samples forecast)" \
        in got.sentence
    [none] = target_picks(points, None, 5.0)
    assert (none.role, none.verdict, none.point["nodes"]) == (CLOSEST, MISSES, 1)
    assert "no measured or forecast point fits it; the cheapest is 4 GPUs on 1 node" \
        in none.sentence


def test_an_interval_straddling_the_deadline_likely_meets_it() -> None:
    """A forecast on 2 nodes trains in 5 h, its 90 % interval up to 7 h: it likely meets
    6 h. 4 nodes meet it whole (4.5 h at most) for more node-hours: the pick, with the
    cheaper forecast named beside it; alone, the forecast is the pick, as likely."""
    straddles = (2, FORECAST, 5.0, 4.0, 7.0, 0.9)
    points = front(straddles, (4, TRAINED, 4.0, 3.5, 4.5, 0.75))
    sure, cheaper = target_picks(points, 6 * H, None)
    assert (sure.role, sure.verdict, sure.point["nodes"]) == (PICK, MEETS, 4)
    assert (cheaper.role, cheaper.verdict, cheaper.point["nodes"]) == (LIKELIER, LIKELY, 2)
    assert cheaper.sentence.startswith("Cheaper, 2 nodes (8 GPUs) (global batch 256; "
                                       "forecast: throughput forecast × samples forecast) "
                                       "likely meets it (90 % interval up to 7 h)")
    [alone] = target_picks(front(straddles), 6 * H, None)
    assert (alone.role, alone.verdict) == (PICK, LIKELY)
    assert "no point meets it with its whole interval; the cheapest that likely meets it " \
        "(90 % interval up to 7 h) is 2 nodes" in alone.sentence


def test_the_queue_wait_counts_against_a_deadline_and_is_said() -> None:
    points = front((2, TRAINED, 5.0, 4.5, 5.5, 0.75))
    points["queue_wait_s"] = 0.75 * H  # 5.5 h + 45 min > 6 h: only the median meets it
    points["finish_s"] = points["time_to_target_s"] + points["queue_wait_s"]
    points["finish_high_s"] = points["time_high"] + points["queue_wait_s"]
    [got] = target_picks(points, 6 * H, None)
    assert got.verdict == LIKELY
    assert "(75 % interval up to 6.25 h, queue wait included)" in got.sentence
    assert "after an expected 45 min in the queue" in got.sentence
    [budget] = target_picks(points, None, 20.0)  # node-hours: no queue wait in them
    assert budget.verdict == MEETS and "queue" not in budget.sentence


def test_no_point_with_a_time_to_the_target_says_so() -> None:
    [got] = target_picks(front(), 6 * H, None)
    assert got.verdict == MISSES and got.point == {}
    assert "no point has a time to the target yet" in got.sentence
    assert target_picks(front(), None, None) == []


@pytest.mark.parametrize("limit", [9.0, 13.0])
def test_a_faster_point_that_only_likely_fits_is_named_beside_the_pick(limit: float) -> None:
    points = front((1, TRAINED, 8.0, 7.5, 8.5, 0.75),  # 8 [7.5–8.5] node-h
                   (2, FORECAST, 5.0, 4.0, 7.0, 0.9))  # 10 [8–14] node-h
    got = target_picks(points, None, limit)
    assert (got[0].point["nodes"], got[0].verdict) == (1, MEETS)
    if limit == 13.0:  # 2 nodes fit with 10 node-hours, not with their long end (14)
        assert (got[1].role, got[1].point["nodes"]) == (LIKELIER, 2)
        assert "likely fits it (90 % interval up to 14 node-hours)" in got[1].sentence
    else:
        assert len(got) == 1
