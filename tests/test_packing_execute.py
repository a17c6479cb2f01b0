"""Packed runs, the submitting side (execute.packing): the scripts a packed study writes,
and a packed run's state from its allocation's job and its step journal."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from scalestudy.core.states import JobStatus, RunState
from scalestudy.execute.journal import Job
from scalestudy.execute.packing.steplog import Event, StepEvent
from scalestudy.execute.packing.steps import step_state, step_times
from scalestudy.site.schedulers import JobState
from scalestudy.study import RunRequest, make_plan, run
from tests.test_tracking import PROFILE, SPEC


class Quiet:
    def __getattr__(self, name: str):  # every Screen method: say nothing
        return lambda *a, **k: None


def test_a_packed_dry_run_writes_step_scripts_and_the_allocations(tmp_path: Path) -> None:
    (tmp_path / "fake.yaml").write_text(PROFILE)
    (tmp_path / "study.yaml").write_text(SPEC.format(profile=tmp_path / "fake.yaml"))
    plan = make_plan(tmp_path / "study.yaml", tmp_path / "results")
    got = run(plan, RunRequest(dry_run=True, pack=True), Quiet())
    assert sorted(r.run_id for r in got.prepared) == sorted(r.run_id for r in plan.runs)
    alloc = plan.directory / "allocations" / "dry-run-1"
    script = (alloc / "job.sh").read_text()
    nodes = max(r.nodes for r in plan.runs)
    assert f"#SBATCH -N {nodes}" in script and "-m scalestudy.execute.allocation" in script
    for r in plan.runs:
        step = (plan.run_dir(r) / "job.sh").read_text()
        assert "#SBATCH" not in step and '--nodelist="$SCALESTUDY_STEP_HOSTS"' in step
        assert f"--ntasks={r.world_size}" in step and "--exclusive" in step
        assert not (plan.run_dir(r) / "attempts").exists()  # a dry run archives nothing
    assert not (plan.directory / "jobs.jsonl").exists()  # and queues nothing


ENTRY = Job("r1", "77", 1, "slurm", "pack", "2026-11-26T00:00:00+00:00", allocation="a1")


def test_a_packed_runs_state_from_its_allocation_and_step(tmp_path: Path) -> None:
    running = JobState("77", JobStatus.RUNNING, "RUNNING")
    over = JobState("77", JobStatus.CANCELLED, "CANCELLED by 0")
    started = StepEvent(Event.STARTED, "2026-11-26T00:01:00+00:00", "r1", ("n1", "n2"))
    ended = StepEvent(Event.ENDED, "2026-11-26T00:03:30+00:00", "r1", rc=0)
    assert step_state(tmp_path, ENTRY, running, None).state is RunState.QUEUED
    now = step_state(tmp_path, ENTRY, running, started)
    assert now.state is RunState.RUNNING and "n1,n2" in (now.reason or "")
    done = step_state(tmp_path, ENTRY, over, ended).ended
    assert done is not None and done.state is JobStatus.COMPLETED and done.exit_code == 0
    cut = step_state(tmp_path, ENTRY, over, started)
    assert cut.state is RunState.INTERRUPTED and "while this run ran" in (cut.reason or "")
    assert step_state(tmp_path, ENTRY, over, None).state is RunState.INTERRUPTED
    (tmp_path / "metrics.jsonl").write_text('{"throughput": 12.5}\n')  # measured, then qdel
    whole = step_state(tmp_path, ENTRY, over, started)
    assert whole.state is RunState.COMPLETED and whole.ended is not None  # not run twice
    assert "metrics record is complete" in whole.ended.raw
    (tmp_path / "metrics.jsonl").write_text('{"throughput": 12.5')  # cut off: run it again
    assert step_state(tmp_path, ENTRY, over, started).state is RunState.INTERRUPTED
    (tmp_path / "exit_code").write_text("0\n")  # the step ended; its line was cut off
    assert step_state(tmp_path, ENTRY, over, started).ended is not None
    limit = step_state(tmp_path, ENTRY, running, replace(ended, rc=143, timed_out=True))
    assert limit.ended is not None and limit.ended.state is JobStatus.TIMEOUT
    assert step_times([started, ended]) == ("2026-11-26T00:01:00+00:00", 150.0)


def test_a_step_whose_allocation_had_ended_is_interrupted_not_failed(tmp_path: Path) -> None:
    """srun started as the allocation was cancelled (seen on the Slurm testbed): the step
    never ran, so the next `run` starts it again; a step that failed on its own stays
    failed."""
    from scalestudy.site.schedulers.slurm import Slurm

    assert Slurm.packing is not None
    gone_said = Slurm.packing.allocation_gone
    over = JobState("77", JobStatus.CANCELLED, "CANCELLED by 0")
    failed = StepEvent(Event.ENDED, "2026-11-26T00:03:30+00:00", "r1", rc=1)
    (tmp_path / "stderr.log").write_text("Traceback (most recent call last):\n"
                                         "RuntimeError: the program's own failure\n")
    own = step_state(tmp_path, ENTRY, over, failed, gone_said)
    assert own.ended is not None and own.ended.state is JobStatus.FAILED
    (tmp_path / "stderr.log").write_text("srun: error: Slurm job 101 has expired\n")
    gone = step_state(tmp_path, ENTRY, over, failed, gone_said)
    assert gone.state is RunState.INTERRUPTED and gone.ended is None
    assert "Slurm job 101 has expired" in (gone.reason or "")
    assert step_state(tmp_path, ENTRY, over, failed).ended is not None  # no pattern: failed


@pytest.mark.slow
def test_pack_on_a_system_without_a_queue_is_a_one_line_error(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    (tmp_path / "t.yaml").write_text("name: t\nsystem: local\nworkload: {model: small_cnn}\n"
                                     "grid: {nodes: [1]}\n")
    for command in ("plan", "run"):
        done = run_cli(command, "t.yaml", "--pack", cwd=tmp_path)
        assert done.returncode == 2 and "no allocation to pack into" in done.stderr
        assert "Traceback" not in done.stderr
    (tmp_path / "u.yaml").write_text((tmp_path / "t.yaml").read_text() + "job: {pack: true}\n")
    done = run_cli("validate", "u.yaml", cwd=tmp_path)
    assert done.returncode == 2 and "u.yaml:5: job.pack" in done.stderr
    assert not (tmp_path / "results").exists()


def test_a_packed_study_across_queues_sends_each_allocation_to_one_that_takes_it(
        tmp_path: Path) -> None:
    """Polaris, 1 to 16 nodes, no queue named: the runs of at most 10 nodes are packed
    for debug-scaling, the 16-node runs for prod (which takes no fewer than 10); each
    allocation's script asks its own queue, and the dry run renders them."""
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\nsystem: polaris\nworkload: {model: resnet50}\n"
                    "grid: {nodes: [1, 2, 4, 8, 16], batch_size: [64]}\n"
                    "job: {account: A, walltime: '00:20:00', pack: true}\n")
    plan = make_plan(spec, tmp_path / "results")
    from scalestudy.execute.packing.queues import allocations
    from scalestudy.study.packing import expected_times

    planned = allocations(plan, plan.runs, expected_times(plan))
    by_queue = {a.queue: sorted({s.run.nodes for s in a.steps}) for a in planned}
    assert set(by_queue) == {"debug-scaling", "prod"}
    assert by_queue["prod"] == [16] and max(by_queue["debug-scaling"]) <= 10
    assert [a.index for a in planned] == list(range(1, len(planned) + 1))
    got = run(plan, RunRequest(dry_run=True, pack=True), Quiet())
    assert len(got.prepared) == len(plan.runs)
    scripts = {a.index: (plan.directory / "allocations" / f"dry-run-{a.index}" / "job.sh")
               .read_text() for a in planned}
    for a in planned:
        assert f"#PBS -q {a.queue}" in scripts[a.index], scripts[a.index][:400]


def test_an_allocation_is_queued_through_the_one_submit_loop(tmp_path: Path) -> None:
    """Each run's intent (naming the allocation) before sbatch, its job line (the
    allocation's id) and QUEUED status after; a refused submission leaves the intents
    alone and says how many runs went before."""
    import json

    from scalestudy.core.errors import SubmitError
    from scalestudy.execute.packing.allocations import queue_allocations
    from scalestudy.execute.packing.plan import pack
    from scalestudy.execute.status import read_status
    from tests.test_tracking import FakeSlurm

    (tmp_path / "fake.yaml").write_text(PROFILE)
    (tmp_path / "study.yaml").write_text(SPEC.format(profile=tmp_path / "fake.yaml"))
    plan = make_plan(tmp_path / "study.yaml", tmp_path / "results")
    planned = pack(plan.runs, lambda r: 60.0, 600)
    fake = FakeSlurm()
    done, placed = queue_allocations(plan, planned, fake)
    assert fake.submitted() == 1 and [q.name for q in placed] == ["a1"]
    assert sorted(r.run_id for r, _ in done) == sorted(r.run_id for r in plan.runs)
    lines = [json.loads(ln) for ln in (plan.directory / "jobs.jsonl").read_text().splitlines()]
    n = len(plan.runs)
    assert all(ln.get("intent") and ln["allocation"] == "a1" for ln in lines[:n])
    assert all(ln["job_id"] == "101" and ln["via"] == "pack" and ln["allocation"] == "a1"
               for ln in lines[n:]) and len(lines) == 2 * n
    status = read_status(plan.run_dir(plan.runs[0]))
    assert status.state is RunState.QUEUED and status.reason == "a step of allocation a1"
    with pytest.raises(SubmitError, match=r"0 run\(s\) were submitted before this"):
        queue_allocations(plan, planned, FakeSlurm(fail_after=0))
    after = (plan.directory / "jobs.jsonl").read_text().splitlines()
    assert len(after) == 3 * n and all('"intent": true' in ln for ln in after[2 * n:])
