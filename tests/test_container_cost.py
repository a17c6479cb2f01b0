"""results/analysis/container_cost.py: a containerised point beside the same point bare."""

from __future__ import annotations

import pandas as pd

from scalestudy.results.analysis.container_cost import container_costs, finding, verdict
from scalestudy.results.analysis.efficiency import scaling_table


def _runs(bare: list[float], boxed: list[float], startup: tuple[float, float] = (2.0, 5.0)
          ) -> pd.DataFrame:
    rows = []
    for container, values, start in (("none", bare, startup[0]),
                                      ("charliecloud:/img", boxed, startup[1])):
        for nodes in (1, 2):
            for repeat, value in enumerate(values):
                rows.append({"run_id": f"{container}{nodes}{repeat}", "study": "s",
                             "system": "local", "nodes": nodes, "ranks_per_node": 1,
                             "world_size": nodes, "batch_size": 32,
                             "global_batch": 32 * nodes, "backend": "ddp",
                             "tuning": "default", "repeat": repeat, "container": container,
                             "state": "completed", "throughput": value * nodes,
                             "step_time_s": 32 / value, "startup_s": start})
    return pd.DataFrame(rows)


def test_overlapping_bands_say_no_difference_within_the_noise() -> None:
    table = scaling_table(_runs([100.0, 104.0, 98.0], [99.0, 103.0, 101.0]), "weak")
    costs = container_costs(table, "weak")
    assert list(costs["nodes"]) == [1, 2]
    assert set(costs["container"]) == {"charliecloud:/img"}
    assert costs["verdict"].str.startswith("no difference within the noise").all()
    assert costs["startup_container"].iloc[0] - costs["startup_bare"].iloc[0] == 3.0
    sentence = finding(costs)[0]
    assert "2 point(s) show no difference within the noise" in sentence
    assert "start-up +3.0 s" in sentence


def test_separate_bands_name_the_change_and_one_repeat_cannot_tell() -> None:
    table = scaling_table(_runs([100.0, 101.0], [80.0, 81.0]), "weak")
    costs = container_costs(table, "weak")
    assert costs["verdict"].str.startswith("slower in the container by 19.9%").all()
    one = container_costs(scaling_table(_runs([100.0], [80.0]), "weak"), "weak")
    assert one["verdict"].str.startswith("one repeat a side").all()
    assert verdict((1, 2, 3), (3.5, 4, 3), 1.0) == "faster in the container by 100.0%"


def test_a_study_without_a_bare_side_has_no_comparison() -> None:
    runs = _runs([100.0, 101.0], [80.0, 81.0])
    runs = runs[runs["container"] != "none"]
    assert container_costs(scaling_table(runs, "weak"), "weak").empty
    no_axis = _runs([1.0], [1.0]).drop(columns=["container"])
    assert container_costs(scaling_table(no_axis, "weak"), "weak").empty
