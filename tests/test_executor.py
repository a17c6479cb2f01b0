"""The local executor runs a real job script and records how it ended."""

from __future__ import annotations

import json
import time
from pathlib import Path

from scalestudy.execute import local as executor
from scalestudy.execute import workspace as state

PARAMS = {"world_size": 2, "batch_size": 8, "global_batch": 16, "nodes": 1}


def job(tmp_path: Path, body: str) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "job.sh").write_text("set -euo pipefail\n" + body)
    return run_dir


def test_success_with_a_record_is_completed(tmp_path: Path) -> None:
    run_dir = job(tmp_path, "echo hello\necho '{\"throughput\": 12.5}' > metrics.jsonl\n")
    status = executor.execute(run_dir, PARAMS, timeout_s=30)
    assert status.state == "completed" and status.exit_code == 0
    assert (run_dir / "stdout.log").read_text() == "hello\n"
    assert json.loads((run_dir / "status.json").read_text())["state"] == "completed"


def test_non_zero_exit_is_failed_with_the_log_tail(tmp_path: Path) -> None:
    run_dir = job(tmp_path, "echo 'RuntimeError: boom' >&2\nexit 3\n")
    status = executor.execute(run_dir, PARAMS, timeout_s=30)
    assert status.state == "failed" and status.reason == "exit code 3"
    assert "RuntimeError: boom" in status.log_tail


def test_exit_zero_without_a_record_is_failed(tmp_path: Path) -> None:
    status = executor.execute(job(tmp_path, "true\n"), PARAMS, timeout_s=30)
    assert status.state == "failed"
    assert "no metrics record" in status.reason


def test_time_limit_stops_the_whole_process_group(tmp_path: Path) -> None:
    run_dir = job(tmp_path, "sleep 60 &\necho $! > child.pid\nwait\n")
    started = time.monotonic()
    status = executor.execute(run_dir, PARAMS, timeout_s=1)
    # the child sleeps 60 s: ending before that is the behaviour, not a speed claim
    assert time.monotonic() - started < 55
    assert status.state == "failed" and "time limit of 1 s" in status.reason
    child = int((run_dir / "child.pid").read_text())
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text()


def test_command_workload_throughput_is_extracted_from_stdout(tmp_path: Path) -> None:
    run_dir = job(tmp_path, "echo 'Total img/sec on 2 GPU(s): 10.0 +-1.0'\n"
                  "echo 'Total img/sec on 2 GPU(s): 345.6 +-2.0'\n")
    regex = r"Total img/sec on \d+ GPU\(s\): (?P<throughput>[0-9.]+)"
    status = executor.execute(run_dir, PARAMS, timeout_s=30, command_regex=regex)
    assert status.state == "completed"
    record = state.read_record(run_dir / "metrics.jsonl")
    assert record is not None
    assert record["throughput"] == 345.6 and record["source"] == "command"
    assert record["global_batch"] == 16


def test_command_workload_without_a_match_is_failed(tmp_path: Path) -> None:
    status = executor.execute(job(tmp_path, "echo nothing here\n"), PARAMS, timeout_s=30,
                              command_regex=r"img/s: ([0-9.]+)")
    assert status.state == "failed" and "matched nothing" in status.reason


def test_a_second_attempt_keeps_the_first_attempts_logs(tmp_path: Path) -> None:
    run_dir = job(tmp_path, "echo first; exit 1\n")
    executor.execute(run_dir, PARAMS, timeout_s=30)
    (run_dir / "job.sh").write_text("echo second; echo '{\"throughput\": 1.0}' > metrics.jsonl\n")
    assert executor.execute(run_dir, PARAMS, timeout_s=30).state == "completed"
    assert (run_dir / "attempts" / "1" / "stdout.log").read_text() == "first\n"
    assert (run_dir / "stdout.log").read_text() == "second\n"


def test_a_failed_run_records_its_failure_class_and_line(tmp_path: Path) -> None:
    run_dir = job(tmp_path, "python3 -c 'import horovod_not_installed_here'\n")
    status = executor.execute(run_dir, PARAMS, timeout_s=30)
    assert status.state == "failed" and status.failure == "import_error"
    assert "No module named 'horovod_not_installed_here'" in status.failure_line
    stored = json.loads((run_dir / "status.json").read_text())
    assert stored["failure"] == "import_error"
