"""Run files on disk: atomic writes, last valid record, log tails, attempts kept."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from scalestudy.execute import workspace as state
from scalestudy.execute.status import read_state


def test_read_record_takes_the_last_complete_json_line(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"throughput": 1}\n{"throughput": 2}\n{"throughput": 3, "trunc')
    assert state.read_record(path) == {"throughput": 2}


def test_read_record_reads_only_the_tail_of_a_huge_file(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    with path.open("w") as fh:
        fh.write("x" * (8 << 20))
        fh.write('\n{"throughput": 5.0}\n')
    assert state.read_record(path) == {"throughput": 5.0}


def test_run_state_reads_status_and_checks_the_record(tmp_path: Path) -> None:
    assert read_state(tmp_path) == "pending"
    state.write_json_atomic(tmp_path / state.STATUS, {"state": "completed"})
    assert read_state(tmp_path) == "failed"  # completed without a record is not complete
    (tmp_path / state.METRICS).write_text(json.dumps({"throughput": 10.0}) + "\n")
    assert read_state(tmp_path) == "completed"
    (tmp_path / state.STATUS).write_text("{garbled")
    assert read_state(tmp_path) == "failed"


def test_archive_attempt_keeps_every_earlier_attempt(tmp_path: Path) -> None:
    assert state.archive_attempt(tmp_path) is None
    for attempt in (1, 2):
        (tmp_path / "stdout.log").write_text(f"attempt {attempt}")
        (tmp_path / state.STATUS).write_text("{}")
        target = state.archive_attempt(tmp_path)
        assert target == tmp_path / "attempts" / str(attempt)
        assert (target / "stdout.log").read_text() == f"attempt {attempt}"
    assert not (tmp_path / "stdout.log").exists()


def test_atomic_write_leaves_no_temporary_files(tmp_path: Path) -> None:
    state.write_json_atomic(tmp_path / "a" / "x.json", {"b": 1})
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["x.json"]
    assert (tmp_path / "a" / "x.json").stat().st_mode & 0o777 == 0o644


def test_read_record_reads_only_the_tail(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"a": 1}\n' + "x" * 500_000 + "\n" + '{"b": 2}\n')
    assert state.read_record(path) == {"b": 2}
    path.write_text('{"a": 1}\n' + '{"b": "' + "y" * 200 + '"}\n')
    assert state.read_record(path, max_bytes=100) is None  # the last line is longer than the tail
    assert state.read_record(tmp_path / "missing.jsonl") is None


def test_read_record_tail_cut_on_a_line_boundary(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"a":1}\n{"b":2}\n')  # 8 + 8 bytes
    assert state.read_record(path, max_bytes=8) == {"b": 2}
    assert state.read_record(path, max_bytes=7) is None  # partial first line is dropped


def test_tail_text(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    path.write_text("".join(f"line {i}\n" for i in range(100)))
    assert state.tail_text(path, lines=3) == "line 97\nline 98\nline 99"
    assert state.tail_text(path, lines=0) == ""
    assert state.tail_text(path, lines=1000, max_bytes=16) == "line 98\nline 99"
    assert state.tail_text(tmp_path / "nope.log") == ""
    path.write_bytes(b"ok\n\xff\xfebad\n")
    assert state.tail_text(path).splitlines()[0] == "ok"


def test_record_problem() -> None:
    assert state.record_problem({"throughput": 1.5}) is None
    assert state.record_problem({"throughput": 3}) is None
    assert state.record_problem(None) == state.NO_RECORD
    assert state.record_problem({"throughput": float("nan")}) == state.BAD_THROUGHPUT


def test_study_lock_refuses_a_second_holder(tmp_path: Path) -> None:
    import subprocess
    import sys

    from scalestudy.core.errors import ScalestudyError

    with state.study_lock(tmp_path):
        with pytest.raises(ScalestudyError, match="another `scalestudy run`"), \
                state.study_lock(tmp_path):
            pass
        code = ("from pathlib import Path; from scalestudy.execute.workspace import study_lock\n"
                f"with study_lock(Path({str(tmp_path)!r})): pass")
        other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert other.returncode != 0 and f"pid {os.getpid()}" in other.stderr
    with state.study_lock(tmp_path):  # released: free again
        pass


@pytest.mark.slow
def test_a_scheduler_command_left_by_a_killed_run_keeps_the_study_locked(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    from scalestudy.core.errors import ScalestudyError

    marker = tmp_path / "child-started"
    code = (
        "from pathlib import Path\n"
        "from scalestudy.execute.workspace import study_lock\n"
        "from scalestudy.execute.commands import run_command\n"
        f"with study_lock(Path({str(tmp_path)!r})):\n"
        f"    run_command(['bash', '-c', 'touch {marker}; sleep 1.5'])\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 30
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)  # like sbatch orphaned by `kill -9` of `run`
    proc.wait()
    with pytest.raises(ScalestudyError, match="a scheduler command started by"), \
            state.study_lock(tmp_path):
        pass
    time.sleep(2.0)  # the orphan has ended: the lock is free
    with state.study_lock(tmp_path):
        pass


def test_status_json_is_one_typed_record_and_the_previous_version_reads(tmp_path) -> None:
    import json

    from scalestudy.core.states import RunState
    from scalestudy.execute.status import SCHEMA, RunStatus, read_status, write_status

    status = RunStatus(
        RunState.FAILED, reason="exit code 3", exit_code=3, failure="unknown",
        failure_line="ValueError: x", job_id="41", scheduler_state="FAILED",
        submitted_at="2026-11-25T10:00:00+00:00", ended_at="2026-11-25T10:05:00+00:00",
        log_tail="--- stderr.log ---", job_energy_j=1000.0, job_elapsed_s=10.0,
        job_power_w=100.0)
    write_status(tmp_path, status)
    written = json.loads((tmp_path / "status.json").read_text())
    assert written == status.to_json()
    assert written["schema"] == SCHEMA and written["state"] == "failed"
    back = read_status(tmp_path)
    assert (back.exit_code, back.failure_line, back.job_power_w, back.submitted_at) == (
        3, "ValueError: x", 100.0, "2026-11-25T10:00:00+00:00")
    # an ended run's file always says its reason, code and class, even when empty
    write_status(tmp_path, RunStatus(RunState.COMPLETED, exit_code=0))
    done = json.loads((tmp_path / "status.json").read_text())
    assert {"reason", "exit_code", "failure", "failure_line"} <= set(done)
    # version 1 (no schema key, written by the previous release) reads the same
    (tmp_path / "status.json").write_text(json.dumps({
        "state": "submitted", "job_id": "7", "submitted_at": "2026-11-01T00:00:00+00:00"}))
    old = read_status(tmp_path)
    assert (old.state, old.job_id) == (RunState.QUEUED, "7")


def test_the_journal_is_typed_and_reads_its_previous_version(tmp_path) -> None:
    import json

    from scalestudy.execute.journal import SCHEMA, Intent, Job, Journal, Resolved

    book = Journal(tmp_path / "jobs.jsonl")
    book.path.write_text(  # version 1: no schema key
        '{"attempt": 1, "at": "t0", "intent": true, "run_id": "a"}\n'
        '{"attempt": 1, "job_id": "7", "run_id": "a", "scheduler": "slurm", '
        '"submitted_at": "t1", "via": "native"}\n'
        '{"attempt": 1, "at": "t2", "intent": true, "run_id": "b"}\n'
        '{"at": "t3", "resolved": true, "run_id": "b"}\n'
        '{"attempt": 1, "at": "t4", "intent": true, "run_id": "c"}\n'
        '{"run_id": "torn", "job_i')
    assert book.entries() == [Job("a", "7", 1, "slurm", "native", "t1")]
    assert book.unresolved_intents() == {"c": Intent("c", 1, "t4")}
    book.record(Job("c", "9", 1, "slurm", submitted_at="t5", adopted=True))
    book.record(Resolved("d", "t6"))
    last = [json.loads(line) for line in book.path.read_text().splitlines()[-2:]]
    assert last[0]["schema"] == SCHEMA and last[0]["adopted"] is True
    assert book.unresolved_intents() == {} and book.latest()["c"].adopted


def test_a_lock_taken_for_nothing_leaves_no_directory_behind(tmp_path: Path) -> None:
    fresh = tmp_path / "results" / "study"
    with state.study_lock(fresh):
        assert (fresh / ".lock").exists()
    assert not (tmp_path / "results").exists()  # both made for the lock, both removed
    with state.study_lock(fresh):
        (fresh / "run.json").write_text("{}")
    assert (fresh / ".lock").exists() and (fresh / "run.json").exists()  # kept: used
