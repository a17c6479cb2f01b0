"""results.history.best and `history best`: one front over every configuration of a model in
any study, each point with its study and date."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from scalestudy.results.history.best import best_known
from tests.conftest import run_cli
from tests.test_regression import _study


def row(study: str, nodes: int, throughput: float, tuning: str = "default") -> dict:
    params = {"run_id": f"{study}{nodes}{tuning}", "study": study, "model": "resnet50",
              "image_size": 224, "nodes": nodes, "ranks_per_node": 4, "batch_size": 32,
              "backend": "ddp", "tuning": tuning, "repeat": 0}
    return {"state": "completed", "study": study, "directory": f"/r/{study}",
            "ended": datetime(2026, 11, 1, tzinfo=timezone.utc), "nodes": nodes,
            "world_size": 4 * nodes, "batch_size": 32, "global_batch": 128 * nodes,
            "backend": "ddp", "tuning": tuning, "throughput": throughput, "unit": "img/s",
            "params": params}


def test_one_front_across_studies_with_their_names() -> None:
    frame = best_known([
        row("old", 1, 1000.0), row("old", 2, 1900.0), row("old", 4, 2800.0),
        row("new", 2, 1980.0, "ring"),  # faster and cheaper than old's 2 nodes
        row("new", 8, 2700.0, "ring"),  # slower than 4 nodes, at twice the nodes
    ])
    front = frame[frame["front"]]
    assert [(r.study, r.nodes) for r in front.itertuples()] == [("old", 4), ("new", 2),
                                                               ("old", 1)]
    assert set(frame[~frame["front"]]["nodes"]) == {2, 8}
    one = frame[(frame["study"] == "old") & (frame["nodes"] == 1)].iloc[0]
    assert one["time_s"] == 1000.0 and one["node_hours"] == 1000.0 / 3600


@pytest.mark.slow
def test_history_best_names_the_fastest_and_cheapest(tmp_path: Path) -> None:
    env = {"SCALESTUDY_STORE": str(tmp_path / "h.sqlite"), "COLUMNS": "200"}
    run_cli("history", "ingest", str(_study(tmp_path, {})), cwd=tmp_path, env_extra=env)
    done = run_cli("history", "best", "--model", "small_cnn", cwd=tmp_path, env_extra=env)
    assert done.returncode == 0, done.stderr
    assert "fastest: t (" in done.stdout and "cheapest: t (" in done.stdout
    data = json.loads(run_cli("history", "best", "--model", "small_cnn", "--json",
                              cwd=tmp_path, env_extra=env).stdout)
    assert any(r["front"] for r in data) and all(r["study"] == "t" for r in data)
    none = run_cli("history", "best", "--model", "gpt", cwd=tmp_path, env_extra=env)
    assert none.returncode == 2 and "no completed runs of model gpt" in none.stderr
