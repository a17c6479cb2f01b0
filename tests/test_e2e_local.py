"""End to end on this machine: real torchrun ranks, real DDP, a real report."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.slow

TINY = """
name: tiny
description: two "nodes" of one rank each, and one node of one rank
workload: {model: small_cnn, image_size: 16, num_classes: 10, warmup_iters: 1, iters: 2,
           batches_per_iter: 2}
grid: {nodes: [1, 2], ranks_per_node: [1], batch_size: [4]}
job: {walltime: "00:03:00"}
"""


def test_study_runs_reports_and_resumes(tmp_path: Path, write_spec) -> None:
    spec = str(write_spec(TINY))
    first = run_cli("run", spec, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "2 run(s) completed, 0 failed" in first.stderr
    assert "report: results/tiny/report/index.html" in first.stdout

    study = tmp_path / "results" / "tiny"
    runs = pd.read_csv(study / "runs.csv")
    assert list(runs["state"]) == ["completed", "completed"]
    two = runs[runs["nodes"] == 2].iloc[0]
    assert two["world_size"] == 2 and two["global_batch"] == 8
    assert two["throughput"] > 0
    # throughput is the sum of every rank's own rate
    assert two["throughput_per_rank_min"] <= two["throughput"] / 2 <= two[
        "throughput_per_rank_max"]
    stdout = (study / "runs" / two["run_id"] / "stdout.log").read_text()
    assert "Total img/sec on 2 GPU(s):" in stdout

    scaling = pd.read_csv(study / "report" / "scaling.csv")
    assert scaling.loc[scaling["world_size"] == 1, "efficiency"].item() == 1.0
    assert 0 < scaling.loc[scaling["world_size"] == 2, "efficiency"].item() <= 1.2
    html = (study / "report" / "index.html").read_text()
    assert "data:image/png;base64," in html
    # where the hours went: the parts of each real run add to its measured wall clock
    hours = pd.read_csv(study / "report" / "hours.csv")
    for _, h in hours.iterrows():
        assert h["wall_s"] == runs.loc[runs["nodes"] == h["nodes"], "elapsed_s"].item()
        assert h["startup_s"] > 0 and h["compute_s"] > 0
        parts = [h[p] for p in ("startup_s", "compute_s", "communication_s", "input_wait_s",
                                "checkpoints_s", "evaluation_s", "not_timed_s")]
        assert sum(v for v in parts if v == v) == pytest.approx(h["wall_s"])
        assert bool(h["adds_up"]) == (abs(h["not_timed_s"]) <= 0.05 * h["wall_s"])
    md = (study / "report" / "index.md").read_text()
    assert "## Where the hours go" in md and "](hours.png)" in md

    run_dir = study / "runs" / two["run_id"]
    for name in ("job.sh", "run.json", "stdout.log", "stderr.log", "env.txt", "hosts.txt",
                 "metrics.jsonl", "status.json"):
        assert (run_dir / name).is_file(), name
    assert json.loads((run_dir / "run.json").read_text())["nodes"] == 2
    assert not (run_dir / "tmp").exists()

    second = run_cli("run", spec, cwd=tmp_path)
    assert second.returncode == 0
    assert "nothing to run" in second.stderr
    assert not (run_dir / "attempts").exists()


FAILING = r"""
name: flaky
workload:
  kind: command
  command: [bash, -c, 'test {world_size} -eq 1 || { echo "NCCL error: boom" >&2; exit 3; };
            echo "Total img/sec on {world_size} GPU(s): 123.5 +-1.0"']
grid: {ranks_per_node: [1, 2]}
job: {walltime: "00:01:00"}
"""


def test_a_failed_run_is_recorded_the_others_go_on(tmp_path: Path, write_spec) -> None:
    spec = str(write_spec(FAILING.replace("{ echo", "{{ echo").replace("; };", "; }};")))
    done = run_cli("run", spec, cwd=tmp_path)
    assert done.returncode == 1
    assert "1 run(s) completed, 1 failed" in done.stderr
    assert "error: 1 run(s) failed" in done.stderr and "Traceback" not in done.stderr
    runs = pd.read_csv(tmp_path / "results" / "flaky" / "runs.csv")
    ok = runs[runs["world_size"] == 1].iloc[0]
    bad = runs[runs["world_size"] == 2].iloc[0]
    assert ok["state"] == "completed" and ok["throughput"] == 123.5
    assert bad["state"] == "failed" and bad["reason"] == "exit code 1"
    status = json.loads((tmp_path / "results" / "flaky" / "runs" / bad["run_id"]
                         / "status.json").read_text())
    assert "NCCL error: boom" in status["log_tail"]
    report = (tmp_path / "results" / "flaky" / "report" / "index.md").read_text()
    assert bad["run_id"] in report and "exit code 1" in report
    # the store keeps the failure's class: a broken communication counts for the system
    from scalestudy.results.history.failures import failure_rates
    from scalestudy.results.history.store import Store

    store = Store()
    (rate,) = failure_rates(store.rows(study="flaky"))
    store.dispose()
    assert rate.system == "local" and rate.by_cause == {"comm": 1} and rate.attempts == 2
