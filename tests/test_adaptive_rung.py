"""The halving within a rung (results.analysis.adaptive_rung): the better half goes on,
a tie with the best never stops, and two objectives are halved apart."""

from __future__ import annotations

from scalestudy.results.analysis.adaptive_rung import halve


def text(key: tuple[str, int], value: float) -> str:
    return f"{value:g}/s"


def test_the_better_half_and_every_tie_go_on() -> None:
    keys = [(f"b{i}", 1) for i in range(5)]
    mids = [100.0, 90.0, 80.0, 97.0, 60.0]  # b3 ties with b0 (bands overlap)
    bands = {k: (m * 0.96, m, m * 1.04) for k, m in zip(keys, mids, strict=True)}
    kept, stopped = halve(keys, bands, dict.fromkeys(keys, "throughput"), 1, text)
    assert kept == [("b0", 1), ("b1", 1), ("b3", 1)]  # ceil(5/2) = 3, in the given order
    assert [k for k, _ in stopped] == [("b2", 1), ("b4", 1)]
    assert stopped[0][1].startswith("bottom half at 1 node(s) after 1 repeat(s): 80/s "
                                    "against 100/s for b0 (-20.0% by throughput")
    # the fourth, its band reaching the best one's, goes on beyond the half
    bands[("b2", 1)] = (70.0, 80.0, 97.0)
    kept, stopped = halve(keys, bands, dict.fromkeys(keys, "throughput"), 1, text)
    assert [k for k, _ in stopped] == [("b4", 1)]


def test_objectives_are_halved_apart_and_a_point_without_a_band_goes_on() -> None:
    keys = [("a", 2), ("b", 2), ("c", 2), ("d", 2)]
    bands = {("a", 2): (0.9, 1.0, 1.1), ("b", 2): (0.4, 0.5, 0.6),
             ("c", 2): (900.0, 1000.0, 1100.0)}
    units = {("a", 2): "time to the target", ("b", 2): "time to the target",
             ("c", 2): "throughput", ("d", 2): "throughput"}
    kept, stopped = halve(keys, bands, units, 2, text)
    assert kept == [("a", 2), ("c", 2), ("d", 2)]
    assert [k for k, _ in stopped] == [("b", 2)] and "after 2 repeat(s)" in stopped[0][1]
