"""results.analysis.waits: the expected queue wait of a job shape from a system's earlier jobs in
the results store, and `plan` saying it with its source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scalestudy.results.analysis.waits import expected, waits_by_nodes
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


@pytest.mark.slow
def test_plan_says_the_expected_wait_and_its_source(tmp_path: Path) -> None:
    from scalestudy.results.history.store import Store

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


def test_the_schedulers_estimate_is_a_wait_from_now() -> None:
    from datetime import datetime

    from scalestudy.results.analysis.waits import from_scheduler

    now = datetime(2026, 11, 26, 21, 30, 0)
    wait = from_scheduler(4, "2026-11-26T21:42:30", now, "sbatch --test-only")
    assert (wait.seconds, wait.start) == (750.0, "2026-11-26T21:42:30")
    assert "sbatch --test-only" in wait.source and wait.as_dict()["start"]
    assert from_scheduler(1, "2026-11-26T21:00:00", now, "x").seconds == 0.0  # now


@pytest.mark.slurm
@pytest.mark.slow
def test_plan_asks_slurm_when_a_job_would_start(tmp_path: Path, slurm_cluster) -> None:
    """With every node held by a 2-minute job, `plan` gives the wait Slurm's backfill
    plan gives (sbatch --test-only): about the filler's time left, never queued."""
    import subprocess
    import time
    from datetime import datetime, timedelta

    (tmp_path / "profile.yaml").write_text(PROFILE)
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\nsystem: profile.yaml\nworkload: {model: small_cnn}\n"
                    "grid: {nodes: [1, 2]}\njob: {walltime: '00:05:00'}\n")
    filler = slurm_cluster.sbatch("-N", "4", "--ntasks-per-node=2", "-t", "2",
                                  "--wrap", "sleep 300", cwd=tmp_path)
    try:
        for _ in range(60):
            state = subprocess.run(["squeue", "-h", "-j", filler, "-o", "%T"],
                                   capture_output=True, text=True).stdout.strip()
            if state == "RUNNING":
                break
            time.sleep(0.5)
        started = subprocess.run(["squeue", "-h", "-j", filler, "-o", "%S"],
                                 capture_output=True, text=True).stdout.strip()
        ends = datetime.fromisoformat(started) + timedelta(minutes=2)  # its time limit
        done = run_cli("plan", str(spec), "--json", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        waits = json.loads(done.stdout)["expected_wait"]
        assert [w["nodes"] for w in waits] == [1, 2]
        for w in waits:
            assert "sbatch --test-only" in w["source"] and w["start"]
            # the filler's end, as Slurm plans it (to its scheduling granularity)
            assert abs(datetime.fromisoformat(w["start"]) - ends) <= timedelta(seconds=15), w
            assert w["seconds"] > 0
        queued = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True)
        assert queued.stdout.split() == [filler]  # nothing was queued by the estimate
    finally:
        subprocess.run(["scancel", filler], check=False)


PROFILE = """name: tb
description: the localhost Slurm testbed
scheduler: slurm
launcher: srun
max_nodes: 4
cores_per_node: 2
threads_per_rank: 1
"""


def test_a_store_this_user_cannot_reach_costs_the_estimate_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another user's store (a directory this user may not enter: stat fails with
    EACCES, as it did for pbsuser on the PBS testbed) gives no estimate, not a
    traceback in `report`."""
    from scalestudy.site.plan import make_plan
    from scalestudy.study.planning import expected_waits

    store = tmp_path / "private" / "history.sqlite"
    monkeypatch.setenv("SCALESTUDY_STORE", str(store))
    real = Path.exists

    def refused(self: Path, *args: object, **kwargs: object) -> bool:
        if self == store:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "exists", refused)
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\nsystem: polaris\nworkload: {model: resnet50}\n"
                    "grid: {nodes: [1, 2], batch_size: [64]}\njob: {account: A}\n")
    assert expected_waits(make_plan(spec, tmp_path / "results")) == []
