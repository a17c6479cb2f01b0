"""The step runner inside a packed allocation (execute.packing.runner, started as the
job script starts it: `python -m scalestudy.execute.allocation`), run for real: steps
are processes on disjoint hosts, journaled before they start and when they end, stopped
at their own limit, cut off (not ended) when the allocation ends, skipped once ended."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scalestudy.execute.packing.runner import step_hostfile
from scalestudy.execute.packing.steplog import Event, StepEvent, read_events


def make(tmp_path: Path, steps: list[tuple[str, int, str, int]], hosts: int = 4,
         slots: bool = True) -> Path:
    """An allocation directory: (run id, nodes, the step's shell body, limit s) each."""
    alloc = tmp_path / "a1"
    alloc.mkdir()
    (alloc / "nodefile").write_text("".join(f"h{i}\n" for i in range(1, hosts + 1)))
    listed = []
    for run_id, nodes, body, limit in steps:
        run_dir = tmp_path / run_id
        run_dir.mkdir()
        script = run_dir / "job.sh"
        script.write_text("set -e\necho \"$SCALESTUDY_STEP_HOSTS $SCALESTUDY_STEP_PORT\" "
                          f"> {run_dir}/seen\ncat \"$SCALESTUDY_STEP_HOSTFILE\" > "
                          f"{run_dir}/hostfile\n{body}\n")
        listed.append({"run_id": run_id, "run_dir": str(run_dir), "script": str(script),
                       "nodes": nodes, "ranks_per_node": 2, "limit_s": limit,
                       "log": "stdout.log", "err": "stderr.log"})
    (alloc / "allocation.json").write_text(json.dumps({"steps": listed, "slots_lines": slots}))
    return alloc


def start(alloc: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "scalestudy.execute.allocation", str(alloc),
                             "4711"], text=True, stderr=subprocess.PIPE)


def events(alloc: Path, kind: str) -> dict[str | None, StepEvent]:
    return {e.run_id: e for e in read_events(alloc / "steps.jsonl") if e.event == kind}


@pytest.mark.slow
def test_steps_share_the_allocation_on_disjoint_hosts_in_order(tmp_path: Path) -> None:
    alloc = make(tmp_path, [("a", 2, "sleep 1", 60), ("b", 2, "sleep 1", 60),
                            ("c", 4, "exit 3", 60)])
    assert start(alloc).wait(timeout=60) == 0
    started, ended = events(alloc, "started"), events(alloc, "ended")
    assert set(started["a"].hosts) | set(started["b"].hosts) == {"h1", "h2", "h3", "h4"}
    assert started["a"].port != started["b"].port
    assert started["c"].at >= ended["a"].at  # the 4-node step waited for both
    assert ended["c"].rc == 3 and ended["a"].rc == 0
    assert (tmp_path / "b" / "hostfile").read_text() == (
        "".join(f"{h} slots=2\n" for h in started["b"].hosts))
    assert [e.event for e in read_events(alloc / "steps.jsonl")][-1] == "done"


@pytest.mark.slow
def test_a_step_past_its_limit_is_stopped_and_marked(tmp_path: Path) -> None:
    alloc = make(tmp_path, [("hang", 1, "sleep 600", 1), ("next", 1, "true", 60)], hosts=1)
    begun = time.monotonic()
    assert start(alloc).wait(timeout=60) == 0
    assert time.monotonic() - begun < 30
    ended = events(alloc, "ended")
    assert ended["hang"].timed_out is True and ended["next"].rc == 0


def test_the_allocations_end_cuts_steps_off_and_a_restart_skips_ended_ones(
        tmp_path: Path) -> None:
    alloc = make(tmp_path, [("quick", 1, "true", 60), ("slow", 1, "sleep 600", 600)], hosts=1)
    runner = start(alloc)
    deadline = time.monotonic() + 30
    while "slow" not in events(alloc, "started") and time.monotonic() < deadline:
        time.sleep(0.1)
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=30) == 128 + signal.SIGTERM
    assert set(events(alloc, "ended")) == {"quick"}  # slow started and never ended
    (tmp_path / "slow" / "job.sh").write_text("true\n")
    assert start(alloc).wait(timeout=60) == 0  # a requeued allocation
    started = [e.run_id for e in read_events(alloc / "steps.jsonl")
               if e.event == "started"]
    assert started == ["quick", "slow", "slow"]  # quick never ran twice


def test_pbs_node_files_keep_one_line_per_rank_slot() -> None:
    nodefile = ["n1", "n1", "n2", "n2", "n3", "n3"]
    assert step_hostfile(nodefile, ["n2", "n3"], None) == "n2\nn2\nn3\nn3\n"


def test_an_engine_this_release_does_not_know_is_refused_with_why(tmp_path: Path) -> None:
    alloc = make(tmp_path, [("a", 1, "true", 60)], hosts=1)
    spec = json.loads((alloc / "allocation.json").read_text())
    (alloc / "allocation.json").write_text(json.dumps({**spec, "engine": "slurm-heterogeneous"}))
    runner = start(alloc)
    assert runner.wait(timeout=60) == 2
    assert "engine 'slurm-heterogeneous' is not known here" in runner.stderr.read()
    assert not (alloc / "steps.jsonl").exists()


def test_a_journal_line_reads_back_as_the_event_it_was() -> None:
    """Each event's line holds what it says and reads back the same; a line of an
    unknown event (a newer writer) is left out, and an engine's own words are kept."""
    events = [StepEvent(Event.ALLOCATION, "2026-11-27T00:00:00+00:00", hosts=("h1", "h2"),
                        job_id="77", extra={"engine": "flux"}),
              StepEvent(Event.STARTED, "2026-11-27T00:00:01+00:00", "r1", ("h1",), port=20001),
              StepEvent(Event.ENDED, "2026-11-27T00:00:09+00:00", "r1", rc=0),
              StepEvent(Event.ENDED, "2026-11-27T00:00:09+00:00", "r2", rc=2, why="no room"),
              StepEvent(Event.DONE, "2026-11-27T00:00:10+00:00")]
    for event in events:
        assert StepEvent.read(json.loads(json.dumps(event.line()))) == event
    assert events[2].line() == {"event": "ended", "at": "2026-11-27T00:00:09+00:00",
                                "run_id": "r1", "rc": 0, "timed_out": False}
    assert StepEvent.read({"event": "paused", "at": "x"}) is None
