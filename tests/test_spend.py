"""What a packed study used (results.analysis.spend): held node-hours count the whole allocation,
busy ones the steps, the rest is idle; one queue wait per allocation."""

from __future__ import annotations

import json
from pathlib import Path

from scalestudy.results.analysis.spend import spend_of


def line(**kw: object) -> str:
    return json.dumps(kw) + "\n"


def test_held_busy_idle_and_waits_from_the_journals(tmp_path: Path) -> None:
    study = tmp_path / "s"
    alloc = study / "allocations" / "a1"
    alloc.mkdir(parents=True)
    (alloc / "allocation.json").write_text(json.dumps(
        {"nodes": 4, "steps": [{"run_id": "big", "nodes": 4}, {"run_id": "small", "nodes": 1}]}))
    t = "2026-01-01T00:{:02d}:00+00:00".format
    (alloc / "steps.jsonl").write_text(
        line(event="allocation", at=t(10)) + line(event="started", run_id="big", at=t(10))
        + line(event="ended", run_id="big", at=t(20)) + line(event="started", run_id="small",
                                                             at=t(20))
        + line(event="ended", run_id="small", at=t(30)) + line(event="done", at=t(30)))
    (study / "jobs.jsonl").write_text(
        line(run_id="big", job_id="7", allocation="a1", submitted_at=t(4))
        + line(run_id="small", job_id="7", allocation="a1", submitted_at=t(4)))
    spend = spend_of(study)
    assert spend is not None
    assert spend.held_node_h == 4 * 20 / 60  # 4 nodes for 20 minutes
    assert spend.busy_node_h == (4 * 10 + 1 * 10) / 60
    assert abs(spend.idle_node_h - 30 / 60) < 1e-9  # three nodes idle while small ran
    assert spend.allocations[0].wait_s == 360 and spend.allocations[0].finished
    assert "stood idle" in " ".join(spend.sentences())


def test_a_study_that_never_packed_has_no_spend(tmp_path: Path) -> None:
    assert spend_of(tmp_path) is None


def test_a_packed_attempts_queue_wait_is_its_allocations(tmp_path: Path) -> None:
    import os
    from datetime import datetime

    from scalestudy.core.states import RunState
    from scalestudy.execute import workspace as ws
    from scalestudy.execute.status import RunStatus, write_status
    from scalestudy.results.history.provenance import attempts_of

    study = tmp_path / "s"
    t = "2026-01-01T00:{:02d}:00+00:00".format
    alloc = study / "allocations" / "a1"
    alloc.mkdir(parents=True)
    (alloc / "steps.jsonl").write_text(line(event="allocation", at=t(10)))
    (study / "jobs.jsonl").write_text(line(run_id="r1", job_id="7", attempt=1,
                                           allocation="a1", submitted_at=t(4)))
    run_dir = study / "runs" / "r1"
    run_dir.mkdir(parents=True)
    ws.write_run(run_dir, {"run_id": "r1", "nodes": 1})
    write_status(run_dir, RunStatus(RunState.COMPLETED, exit_code=0))
    (run_dir / "env.txt").write_text("A=1\n")
    moment = datetime.fromisoformat(t(15)).timestamp()
    os.utime(run_dir / "env.txt", (moment, moment))
    [attempt] = attempts_of(study)
    placement = attempt.provenance["placement"]
    assert placement["allocation"] == "a1"
    assert placement["queue_wait_s"] == 360 and placement["step_wait_s"] == 300


def test_the_stores_per_run_waits_stand_beside_the_allocations(tmp_path: Path) -> None:
    import dataclasses

    from scalestudy.results.analysis.spend import Held, Spend

    spend = Spend((Held("a1", 4, 600.0, 2000.0, 30.0, 6, True, tuple("abcdef")),),
                  per_run_wait=(120.0, 40))
    said = " ".join(spend.sentences())
    assert "median of 120 s" in said and "40 such attempts" in said and "6 runs" in said
    assert spend.to_json()["per_run_wait_median_s"] == 120.0
    assert "median" not in " ".join(dataclasses.replace(spend, per_run_wait=None).sentences())
