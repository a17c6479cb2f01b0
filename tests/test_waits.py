"""results.waits: the expected queue wait of a job shape from a system's earlier jobs in
the results store, and `plan` saying it with its source."""

from __future__ import annotations

import json
from pathlib import Path

from scalestudy.results.waits import expected, waits_by_nodes
from tests.conftest import run_cli


def row(nodes: int, wait: float | None, allocation: bool = False) -> dict:
    placement = {"queue_wait_s": wait, **({"allocation": "a1"} if allocation else {})}
    return {"nodes": nodes, "provenance": {"placement": placement}}


def test_the_median_of_each_node_counts_earlier_jobs_else_the_next_larger() -> None:
    rows = [row(2, 60.0), row(2, 120.0), row(2, 600.0), row(8, 900.0),
            row(2, 5.0, allocation=True),  # a packed step did not wait alone
            row(4, None)]  # no wait recorded
    history = waits_by_nodes(rows)
    assert history == {2: [60.0, 120.0, 600.0], 8: [900.0]}
    two, four, sixteen = expected(history, [2, 4, 16, 2], "polaris")
    assert (two.seconds, two.jobs) == (120.0, 3) and "median of 3 earlier" in two.source
    assert (four.seconds, four.jobs) == (900.0, 1)
    assert "no 4-node jobs on polaris" in four.source and "8-node" in four.source
    assert sixteen.seconds is None
    assert "no 16-node (or larger) jobs" in sixteen.source


def test_plan_says_the_expected_wait_and_its_source(tmp_path: Path) -> None:
    from scalestudy.results.store import Store

    env = {"SCALESTUDY_STORE": str(tmp_path / "h.sqlite")}
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\nsystem: polaris\nworkload: {model: resnet50}\n"
                    "grid: {nodes: [1, 2], batch_size: [64]}\njob: {account: A}\n")
    Store(env["SCALESTUDY_STORE"]).dispose()  # an empty store: nothing known yet
    done = run_cli("plan", str(spec), "--json", cwd=tmp_path, env_extra=env)
    assert done.returncode == 0, done.stderr
    waits = json.loads(done.stdout)["expected_wait"]
    assert [(w["nodes"], w["seconds"]) for w in waits] == [(1, None), (2, None)]
    shown = run_cli("plan", str(spec), cwd=tmp_path, env_extra={**env, "COLUMNS": "200"})
    assert "expected queue wait, 1 node(s): not known (no 1-node (or larger) jobs on " \
        "polaris in the results store yet)" in shown.stdout
