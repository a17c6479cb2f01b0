"""Campaigns: each `scalestudy run` of a study is one, with its own id, in the run
directories and the store; `--rerun all` starts a new one and is never capped by
--max-attempts, which counts a run's failures since it last completed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.slow

NIGHTLY = r"""
name: nightly
workload:
  kind: command
  command: [bash, -c, 'echo "Total img/sec on {world_size} GPU(s): 100.0 +-1.0"']
grid: {ranks_per_node: [1, 2]}
job: {walltime: "00:01:00"}
"""


def test_five_nightly_reruns_are_five_campaigns(tmp_path: Path, write_spec) -> None:
    spec = str(write_spec(NIGHTLY))
    env = {"SCALESTUDY_STORE": str(tmp_path / "h.sqlite"), "COLUMNS": "200"}
    first = run_cli("run", spec, cwd=tmp_path, env_extra=env)
    assert first.returncode == 0, first.stderr
    for night in range(4):  # the nightly loop: rerun everything, then check
        done = run_cli("run", spec, "--rerun", "all", cwd=tmp_path, env_extra=env)
        assert done.returncode == 0, (night, done.stderr)
        assert "2 run(s) completed, 0 failed" in done.stderr, (night, done.stderr)
    runs = sorted((tmp_path / "results" / "nightly" / "runs").iterdir())
    for run in runs:
        assert len(list((run / "attempts").iterdir())) == 4  # 5 attempts in all
    rows = json.loads(run_cli("history", "--json", cwd=tmp_path, env_extra=env).stdout)
    assert len(rows) == 10
    campaigns = {r["campaign"] for r in rows}
    assert len(campaigns) == 5 and None not in campaigns
    assert all(sum(r["campaign"] == c for r in rows) == 2 for c in campaigns)
    table = run_cli("history", cwd=tmp_path, env_extra=env).stdout
    [study] = [[c.strip() for c in line.split("│")[1:-1]] for line in table.splitlines()
               if "scalestudy" in line and "nightly" in line]
    assert study[:5] == ["nightly", "scalestudy", "local", "-", "5"]  # five campaigns
    # each point's repeats are listed per campaign, never merged across them
    points = [line for line in table.splitlines() if "command 1x2" in line]
    assert len(points) == 5 and all("│       1 │" in line for line in points)


FAILING = r"""
name: broken
workload:
  kind: command
  command: [bash, -c, 'echo "NCCL error: boom" >&2; exit 3']
grid: {ranks_per_node: [1]}
job: {walltime: "00:01:00"}
"""


def test_runs_out_of_attempts_run_nothing_and_say_so(tmp_path: Path, write_spec) -> None:
    spec = str(write_spec(FAILING))
    assert run_cli("run", spec, cwd=tmp_path).returncode == 1
    again = run_cli("run", spec, "--rerun", "failed", "--max-attempts", "2", cwd=tmp_path)
    assert again.returncode == 1
    nothing = run_cli("run", spec, "--rerun", "failed", "--max-attempts", "2", cwd=tmp_path)
    assert nothing.returncode == 1, nothing.stderr
    assert "nothing was run: 1 run(s) failed every allowed attempt" in nothing.stderr
    assert "Traceback" not in nothing.stderr
