"""Which runs a `run` starts: resume, --rerun failed|all, --max-attempts; real local jobs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scalestudy.core.choices import Rerun
from scalestudy.execute import workspace as state
from scalestudy.execute.local import execute_runs
from scalestudy.execute.status import RunStatus
from scalestudy.execute.submit import prepare
from scalestudy.study import choose_runs, make_plan
from tests.conftest import run_cli

# Fails (import error) the first time each run starts, succeeds after: a marker file in
# the run directory remembers the first attempt.
FLAKY = r"""
name: flaky
workload:
  kind: command
  command: [bash, -c, 'if test -e {run_dir}/marker; then
            echo "Total img/sec on {world_size} GPU(s): 10.0 +-0.1"; else touch {run_dir}/marker;
            echo "ModuleNotFoundError: No module named horovod" >&2; exit 1; fi']
grid: {ranks_per_node: [1, 2]}
job: {walltime: "00:01:00"}
"""


def _run(plan, only: str | None = None, rerun: Rerun | None = None,
         max_attempts: int = 3) -> list[RunStatus]:
    picked = choose_runs(plan, only, rerun, max_attempts)
    return execute_runs(plan, prepare(plan, picked.todo, force=rerun is Rerun.ALL))


@pytest.fixture
def plan(tmp_path: Path, write_spec):
    return make_plan(write_spec(FLAKY), tmp_path / "results")


@pytest.mark.slow  # real local jobs
def test_resume_rerun_failed_rerun_all_and_max_attempts(plan) -> None:
    # One real run (torchrun takes ~3 s a start): ranks_per_node=2 stays pending.
    one, two = sorted(plan.runs, key=lambda r: r.ranks_per_node)
    first = _run(plan, "ranks_per_node=1")
    assert [s.failure for s in first] == ["import_error"]
    # Plain `run` resumes: the failed run is left, the pending one is to do.
    picked = choose_runs(plan, None)
    assert (picked.todo, picked.failed_kept) == ([two], [one])
    assert choose_runs(plan, None, Rerun.FAILED, max_attempts=1).exhausted == [one]
    assert [s.state for s in _run(plan, "ranks_per_node=1", Rerun.FAILED)] == ["completed"]
    run_dir = plan.run_dir(one)
    kept = json.loads((run_dir / "attempts" / "1" / "status.json").read_text())
    assert kept["failure"] == "import_error" and "horovod" in kept["failure_line"]
    assert "No module named" in (run_dir / "attempts" / "1" / "stderr.log").read_text()
    assert state.attempt_count(run_dir) == 2
    # Completed: --rerun failed leaves it, --rerun all runs it again (its files kept).
    assert choose_runs(plan, "ranks_per_node=1", Rerun.FAILED).todo == []
    assert [s.state for s in _run(plan, "ranks_per_node=1", Rerun.ALL)] == ["completed"]
    assert state.attempt_count(run_dir) == 3
    assert (run_dir / "attempts" / "2" / "metrics.jsonl").is_file()
    assert state.attempt_count(plan.run_dir(two)) == 0


def test_a_run_stopped_half_way_or_interrupted_is_resumed(plan) -> None:
    first, second = plan.runs
    prepare(plan, plan.runs)
    state.write_json_atomic(plan.run_dir(first) / state.STATUS, {"state": "running", "pid": 1})
    state.write_json_atomic(plan.run_dir(second) / state.STATUS,
                            {"state": "interrupted", "reason": "interrupted by the user"})
    assert choose_runs(plan, None).todo == [first, second]


def test_a_cancelled_run_resumes_like_an_interrupted_one_and_is_no_failure(plan) -> None:
    """Cancelled unpacked (failed, class cancelled) or packed (interrupted): a plain `run`
    starts both again, and --max-attempts does not count a cancel as a failure."""
    from scalestudy.study.running import failures_since_completed

    first, second = plan.runs
    prepare(plan, plan.runs)
    cancelled = {"state": "failed", "failure": "cancelled", "reason": "cancelled (CANCELLED)"}
    state.write_json_atomic(plan.run_dir(first) / state.STATUS, cancelled)
    state.write_json_atomic(plan.run_dir(second) / state.STATUS,
                            {"state": "interrupted", "reason": "allocation cancelled"})
    picked = choose_runs(plan, None)
    assert picked.todo == [first, second] and picked.failed_kept == []
    run_dir = plan.run_dir(first)
    assert failures_since_completed(run_dir) == 0
    state.archive_attempt(run_dir)
    state.write_json_atomic(run_dir / state.STATUS, {"state": "failed", "failure": "oom"})
    assert failures_since_completed(run_dir) == 1  # the oom, not the cancel before it
    assert choose_runs(plan, None, Rerun.FAILED, max_attempts=1).exhausted == [first]


def test_a_bad_rerun_choice_is_a_usage_error_that_lists_the_choices(tmp_path, write_spec
                                                                     ) -> None:
    done = run_cli("run", str(write_spec(FLAKY)), "--rerun", "some", cwd=tmp_path)
    assert done.returncode == 2
    assert "'some' is not one of 'failed', 'all'" in done.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_cli_rerun_failed(tmp_path: Path, write_spec) -> None:
    spec = str(write_spec(FLAKY))
    first = run_cli("run", spec, cwd=tmp_path)
    assert first.returncode == 1 and "0 run(s) completed, 2 failed" in first.stderr
    status = run_cli("status", spec, cwd=tmp_path)
    assert status.returncode == 0 and "import_error" in status.stdout
    again = run_cli("run", spec, cwd=tmp_path)
    assert "2 failed run(s) left as they are" in again.stderr
    rerun = run_cli("run", spec, "--rerun", "failed", cwd=tmp_path)
    assert rerun.returncode == 0 and "2 run(s) completed, 0 failed" in rerun.stderr
