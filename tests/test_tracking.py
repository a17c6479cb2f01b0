"""Submission and tracking against a scheduler faked at the process boundary.

The fake plays sbatch/sacct/scancel from a table of job states; the real Slurm is
exercised in test_e2e_slurm.py.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from scalestudy.core.errors import ScalestudyError
from scalestudy.core.grid import job_name
from scalestudy.core.states import RunState
from scalestudy.execute.journal import Intent, Job
from scalestudy.execute.submit import journal
from scalestudy.execute.tracking import (
    cancel_runs,
    follow,
    longest_poll,
    recover,
    refresh,
    submit_runs,
)
from scalestudy.site.schedulers import SubmitError
from scalestudy.study import make_plan

PROFILE = """
name: fake
scheduler: slurm
launcher: srun
max_nodes: 8
"""
SPEC = """
name: t
system: {profile}
grid: {{nodes: [1, 2], batch_size: [8, 16]}}
"""


class FakeSlurm:
    """sbatch hands out ids; sacct (and squeue, for waiting jobs) report `states`
    (id -> 'STATE|exit'); scancel records."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.next_id = 100
        self.states: dict[str, str] = {}
        self.calls: list[list[str]] = []
        self.fail_after = fail_after
        self.reasons: dict[str, str] = {}  # squeue's pending reason, where not "None"

    def __call__(self, argv: Sequence[str], cwd: Path | None = None) -> tuple[int, str, str]:
        self.calls.append(list(argv))
        if "--name" in argv:  # sacct/squeue listing jobs by name: none known here
            return 0, "", ""
        if argv[0] == "sbatch":
            if self.fail_after is not None and self.next_id - 100 >= self.fail_after:
                return 1, "", ("sbatch: error: Batch job submission failed: Job violates "
                               "accounting/QOS policy (job submit limit)")
            self.next_id += 1
            self.states[str(self.next_id)] = "PENDING|0:0"
            return 0, f"{self.next_id}\n", ""
        if argv[0] == "sacct":
            ids = argv[argv.index("-j") + 1].split(",")
            rows = [f"{i}|{self.states[i]}|None" for i in ids if i in self.states]
            return 0, "\n".join(rows) + "\n", ""
        if argv[0] == "squeue":  # the live queue, asked about the waiting jobs
            ids = argv[argv.index("-j") + 1].split(",")
            rows = [f"{i}|{self.states[i].split('|')[0]}|{self.reasons.get(i, 'None')}"
                    for i in ids if i in self.states]
            return 0, "\n".join(rows) + "\n", ""
        if argv[0] == "scancel":
            for i in argv[1:]:
                self.states[i] = "CANCELLED by 0|0:15"
            return 0, "", ""
        raise AssertionError(f"unexpected command {argv}")

    def submitted(self) -> int:
        return sum(1 for c in self.calls if c[0] == "sbatch")


@pytest.fixture
def plan(tmp_path: Path):
    (tmp_path / "fake.yaml").write_text(PROFILE)
    (tmp_path / "study.yaml").write_text(SPEC.format(profile=tmp_path / "fake.yaml"))
    return make_plan(tmp_path / "study.yaml", tmp_path / "results")


def finish(plan, fake: FakeSlurm, job_id: str, state: str, throughput: float | None) -> None:
    fake.states[job_id] = state
    if throughput is not None:
        entry = next(e for e in journal(plan).entries() if e.job_id == job_id)
        run_dir = plan.directory / "runs" / entry.run_id
        (run_dir / "metrics.jsonl").write_text(json.dumps({"throughput": throughput}) + "\n")


def test_submit_records_each_job_and_a_rerun_submits_nothing_twice(plan) -> None:
    fake = FakeSlurm()
    done = submit_runs(plan, plan.runs, runner=fake)
    assert [job for _, job in done.submitted] == ["101", "102", "103", "104"]
    assert [e.job_id for e in journal(plan).entries()] == ["101", "102", "103", "104"]
    assert all((plan.run_dir(r) / "job.sh").is_file() for r in plan.runs)
    again = submit_runs(plan, plan.runs, runner=fake)
    assert again.submitted == [] and again.active == 4
    assert fake.submitted() == 4


def test_a_failing_sbatch_keeps_what_was_submitted(plan) -> None:
    fake = FakeSlurm(fail_after=2)
    with pytest.raises(SubmitError, match=r"2 job\(s\) were submitted before this"):
        submit_runs(plan, plan.runs, runner=fake)
    assert len(journal(plan).entries()) == 2
    fake.fail_after = None
    done = submit_runs(plan, plan.runs, runner=fake)
    assert len(done.submitted) == 2
    assert sorted(e.run_id for e in journal(plan).entries()) == sorted(
        r.run_id for r in plan.runs)


def test_max_jobs_throttles_and_follow_submits_the_rest(plan) -> None:
    fake = FakeSlurm()
    done = submit_runs(plan, plan.runs, max_jobs=2, runner=fake)
    assert len(done.submitted) == 2 and len(done.waiting) == 2

    def tick(_: float) -> None:  # each poll, the running jobs finish
        for job_id, st in list(fake.states.items()):
            if st.startswith("PENDING"):
                finish(plan, fake, job_id, "COMPLETED|0:0", 100.0)

    views = follow(plan, plan.runs, done.waiting, max_jobs=2, runner=fake, sleep=tick)
    assert {v.state for v in views.values()} == {"completed"}
    assert fake.submitted() == 4
    queries = [c for c in fake.calls if c[0] == "sacct"]
    assert all(len(q) == len(queries[0]) for q in queries)  # one batched query per cycle


def test_scalestudy_poll_s_caps_the_backoff(plan, monkeypatch) -> None:
    # a testbed's or a debug queue's one-minute jobs: their ends seen within 2 s, not 60
    monkeypatch.setenv("SCALESTUDY_POLL_S", "2")
    assert longest_poll() == 2.0
    fake = FakeSlurm()
    done = submit_runs(plan, plan.runs, runner=fake)
    slept: list[float] = []

    def tick(seconds: float) -> None:  # the jobs end after the sixth poll
        slept.append(seconds)
        if len(slept) == 6:
            for job_id in list(fake.states):
                finish(plan, fake, job_id, "COMPLETED|0:0", 100.0)

    follow(plan, plan.runs, done.waiting, runner=fake, sleep=tick)
    assert slept == [2.0] * 6
    monkeypatch.delenv("SCALESTUDY_POLL_S")
    assert longest_poll() == 60.0
    for wrong in ("fast", "0", "7200"):
        monkeypatch.setenv("SCALESTUDY_POLL_S", wrong)
        with pytest.raises(ScalestudyError, match=r"SCALESTUDY_POLL_S=.*1 to 3600"):
            longest_poll()


def test_the_poll_interval_starts_over_when_a_job_ends_or_is_submitted(plan) -> None:
    # --max-jobs 1: each end frees the slot for the next run; backing off to a minute
    # between jobs would leave the queue idle most of the time
    fake = FakeSlurm()
    done = submit_runs(plan, plan.runs, max_jobs=1, runner=fake)
    slept: list[float] = []

    def tick(seconds: float) -> None:  # a job ends only every third poll
        slept.append(seconds)
        if len(slept) % 3 == 0:
            for job_id, st in list(fake.states.items()):
                if st.startswith("PENDING"):
                    finish(plan, fake, job_id, "COMPLETED|0:0", 100.0)

    follow(plan, plan.runs, done.waiting, max_jobs=1, runner=fake, sleep=tick,
           interval_s=1.0, max_interval_s=60.0)
    assert fake.submitted() == 4
    assert max(slept) < 5 and slept.count(1.0) >= 4, slept  # never the backed-off minute


def test_ended_jobs_are_settled_with_their_reasons(plan) -> None:
    fake = FakeSlurm()
    submit_runs(plan, plan.runs, runner=fake)
    finish(plan, fake, "101", "COMPLETED|0:0", 50.0)
    finish(plan, fake, "102", "COMPLETED|0:0", None)
    finish(plan, fake, "103", "TIMEOUT|0:15", None)
    finish(plan, fake, "104", "RUNNING|0:0", None)
    views = {v.job_id: v for v in refresh(plan, fake).values()}
    assert views["101"].state == "completed"
    assert views["102"].state == "failed" and "no metrics record" in views["102"].reason
    assert views["103"].state == "failed" and "walltime exceeded" in views["103"].reason
    assert views["104"].state == "running"
    # settled runs are not asked about again; a new submission re-runs the failed ones
    fake.calls.clear()
    refresh(plan, fake)
    assert fake.calls[0][fake.calls[0].index("-j") + 1] == "104"
    done = submit_runs(plan, plan.runs, runner=fake)
    assert len(done.submitted) == 2
    run_102 = next(e.run_id for e in journal(plan).entries() if e.job_id == "102")
    assert (plan.directory / "runs" / run_102 / "attempts" / "1" / "status.json").is_file()


def test_a_job_cut_off_after_its_whole_record_is_a_measured_run(plan) -> None:
    # killed or cancelled after the workload wrote its record (its last act): measured,
    # not failed, so that a rerun does not train it again; without a record it failed
    fake = FakeSlurm()
    submit_runs(plan, plan.runs, runner=fake)
    finish(plan, fake, "101", "CANCELLED by 0|0:9", 50.0)
    finish(plan, fake, "102", "TIMEOUT|0:15", 50.0)
    finish(plan, fake, "103", "CANCELLED by 0|0:9", None)
    finish(plan, fake, "104", "FAILED|0:9", 50.0)  # a rank SIGKILLed as it exited
    views = {v.job_id: v for v in refresh(plan, fake).values()}
    assert {views[i].state for i in ("101", "102", "104")} == {"completed"}
    assert views["103"].state == "failed" and "cancelled" in views["103"].reason
    assert len(submit_runs(plan, plan.runs, runner=fake).submitted) == 1  # 103 only


def test_a_job_the_scheduler_forgot_is_lost_after_a_grace_period(plan, monkeypatch) -> None:
    fake = FakeSlurm()
    submit_runs(plan, plan.runs[:1], runner=fake)
    del fake.states["101"]
    assert refresh(plan, fake)[plan.runs[0].run_id].state == "queued"
    monkeypatch.setattr("scalestudy.execute.tracking.GRACE_S", -1.0)
    view = refresh(plan, fake)[plan.runs[0].run_id]
    assert view.state == "failed" and "lost" in view.reason


def test_cancel_cancels_only_active_jobs(plan) -> None:
    fake = FakeSlurm()
    submit_runs(plan, plan.runs, runner=fake)
    finish(plan, fake, "101", "COMPLETED|0:0", 10.0)
    assert cancel_runs(plan, fake) == ["102", "103", "104"]
    views = refresh(plan, fake)
    assert sorted(v.state for v in views.values()) == ["completed", "failed", "failed", "failed"]
    assert all("cancelled" in v.reason for v in views.values() if v.state == "failed")


class Flaky:
    """Fails `times` times with `err` (exit `code`), then answers `answer`."""

    def __init__(self, times: int, err: str, code: int = 1, answer: str = "7\n") -> None:
        self.times, self.err, self.code, self.answer = times, err, code, answer
        self.calls = 0

    def __call__(self, argv: Sequence[str], cwd: Path | None = None) -> tuple[int, str, str]:
        self.calls += 1
        if self.calls <= self.times:
            return self.code, "", self.err
        return 0, self.answer, ""


@pytest.mark.parametrize(("err", "code", "idempotent", "calls", "ok"), [
    ("slurm_load_jobs error: Socket timed out on send/recv operation", 1, True, 3, True),
    ("", 255, True, 3, True),
    ("sbatch: error: Slurm temporarily unable to accept job, sleeping and retrying", 1,
     False, 3, True),
    ("sbatch: error: Batch job submission failed: Socket timed out on send/recv operation",
     1, False, 1, False),  # may have been queued: never submit twice
    ("sbatch: error: Batch job submission failed: Invalid account", 1, False, 1, False),
    ("sacct: error: Unable to contact slurm controller", 1, True, 4, False),
])
def test_transient_scheduler_failures_are_retried_with_backoff(
        err: str, code: int, idempotent: bool, calls: int, ok: bool) -> None:
    from scalestudy.execute.commands import run_retrying

    flaky = Flaky(times=2 if ok else 10, err=err, code=code)
    slept: list[float] = []
    result = run_retrying(flaky, ["sbatch"], idempotent=idempotent, sleep=slept.append)
    assert flaky.calls == calls
    assert (result[0] == 0) == ok
    assert slept == [1.0, 3.0, 9.0][: calls - 1]


def test_a_command_workloads_throughput_is_read_from_its_log_on_a_scheduler(
        tmp_path: Path) -> None:
    (tmp_path / "fake.yaml").write_text(PROFILE)
    (tmp_path / "study.yaml").write_text(
        f"name: c\nsystem: {tmp_path / 'fake.yaml'}\n"
        "workload: {kind: command, command: ./train}\n")
    plan = make_plan(tmp_path / "study.yaml", tmp_path / "results")
    fake = FakeSlurm()
    submit_runs(plan, plan.runs, runner=fake)
    run_dir = plan.run_dir(plan.runs[0])
    (run_dir / "stdout.log").write_text("Total img/sec on 1 GPU(s): 321.5 +-2.0\n")
    fake.states["101"] = "COMPLETED|0:0"
    view = refresh(plan, fake)[plan.runs[0].run_id]
    assert view.state == "completed", view.reason
    assert json.loads((run_dir / "metrics.jsonl").read_text())["throughput"] == 321.5


def test_settled_failures_are_classified_from_state_and_log(plan) -> None:
    fake = FakeSlurm()
    submit_runs(plan, plan.runs[:2], runner=fake)
    run_ids = {e.job_id: e.run_id for e in journal(plan).entries()}
    (plan.directory / "runs" / run_ids["102"] / "stderr.log").write_text(
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=102.0. Some of the step "
        "tasks have been OOM Killed.\n")
    finish(plan, fake, "101", "NODE_FAIL|0:0", None)
    finish(plan, fake, "102", "OUT_OF_MEMORY|0:125", None)
    refresh(plan, fake)
    first = json.loads((plan.directory / "runs" / run_ids["101"] / "status.json").read_text())
    second = json.loads((plan.directory / "runs" / run_ids["102"] / "status.json").read_text())
    assert (first["failure"], first["failure_line"]) == ("node_failure", "scheduler: NODE_FAIL")
    assert second["failure"] == "oom" and "oom-kill event" in second["failure_line"]


def test_a_lost_run_is_rerun_on_request_and_rerun_all_resubmits_completed(
        plan, monkeypatch) -> None:
    from scalestudy.study import choose_runs

    fake = FakeSlurm()
    submit_runs(plan, plan.runs[:2], runner=fake)
    del fake.states["101"]  # the scheduler forgot it
    finish(plan, fake, "102", "COMPLETED|0:0", 5.0)
    monkeypatch.setattr("scalestudy.execute.tracking.GRACE_S", -1.0)
    states = {k: v.state for k, v in refresh(plan, fake).items()}
    resumed = choose_runs(plan, None, None, states=states)
    assert resumed.todo == plan.runs[2:] and resumed.failed_kept == plan.runs[:1]
    again = choose_runs(plan, None, "failed", states=states).todo
    assert again == [plan.runs[0], *plan.runs[2:]]
    done = submit_runs(plan, again, runner=fake)
    assert [r.run_id for r, _ in done.submitted] == [r.run_id for r in again]
    lost_dir = plan.run_dir(plan.runs[0])
    kept = json.loads((lost_dir / "attempts" / "1" / "status.json").read_text())
    assert "lost" in kept["reason"]
    assert [e.attempt for e in journal(plan).entries() if e.run_id == plan.runs[0].run_id] \
        == [1, 2]
    # --rerun all: the completed run is submitted again too; nothing queued twice.
    everything = choose_runs(plan, None, "all",
                             states={k: v.state for k, v in refresh(plan, fake).items()}).todo
    assert everything == [plan.runs[1]]
    assert len(submit_runs(plan, everything, runner=fake, force=True).submitted) == 1
    assert fake.submitted() == 6


class Killed(BaseException):
    """Stands for SIGKILL arriving while sbatch runs (after the job was queued)."""


class NamedSlurm(FakeSlurm):
    """FakeSlurm that also lists jobs by name (sacct/squeue --name), and can 'die' on
    the n-th sbatch once it has queued the job."""

    def __init__(self, die_on: int | None = None) -> None:
        super().__init__()
        self.names: dict[str, str] = {}
        self.die_on = die_on

    def __call__(self, argv: Sequence[str], cwd: Path | None = None) -> tuple[int, str, str]:
        if "--name" in argv:
            self.calls.append(list(argv))
            wanted = argv[argv.index("--name") + 1].split(",")
            rows = [f"{i}|{n}" for i, n in self.names.items() if n in wanted]
            return 0, "\n".join(rows) + "\n", ""
        code, out, err = super().__call__(argv, cwd)
        if argv[0] == "sbatch" and code == 0:
            script = Path(argv[-1]).read_text()
            name = next(ln.split()[-1] for ln in script.splitlines()
                        if ln.startswith("#SBATCH -J") or ln.startswith("#SBATCH --job-name"))
            self.names[out.strip()] = name.removeprefix("--job-name=")
            if self.submitted() == self.die_on:
                raise Killed
        return code, out, err


def test_a_job_queued_by_a_killed_run_is_adopted_not_submitted_again(plan) -> None:
    fake = NamedSlurm(die_on=2)
    with pytest.raises(Killed):
        submit_runs(plan, plan.runs, runner=fake)
    assert len(journal(plan).entries()) == 1  # job 102 is queued but not recorded
    fake.die_on = None
    done = submit_runs(plan, plan.runs, runner=fake)
    assert len(done.submitted) == 2 and fake.submitted() == 4
    by_run = {e.run_id: e.job_id for e in journal(plan).entries()}
    assert sorted(by_run.values()) == ["101", "102", "103", "104"]
    assert by_run[plan.runs[1].run_id] == "102"
    # Resolved once: later submissions do not ask again.
    fake.calls.clear()
    submit_runs(plan, plan.runs, runner=fake)
    assert not any("--name" in c for c in fake.calls)


def test_an_interrupted_submission_that_queued_nothing_is_submitted(plan) -> None:
    fake = NamedSlurm()
    journal(plan).record(Intent(plan.runs[0].run_id, 1, "2026-11-23T00:00:00+00:00"))
    done = submit_runs(plan, plan.runs[:1], runner=fake)
    assert [j for _, j in done.submitted] == ["101"] and fake.submitted() == 1


def test_no_submission_while_an_interrupted_one_cannot_be_checked(plan) -> None:
    def down(argv: Sequence[str], cwd: Path | None = None) -> tuple[int, str, str]:
        return 1, "", "slurm_load_jobs error: Unable to contact slurm controller"

    journal(plan).record(Intent(plan.runs[0].run_id, 1))
    import scalestudy.execute.commands as submit_module

    original = submit_module.RETRY_DELAYS_S
    submit_module.RETRY_DELAYS_S = ()
    try:
        with pytest.raises(SubmitError, match="cannot tell whether its job was queued"):
            submit_runs(plan, plan.runs, runner=down)
    finally:
        submit_module.RETRY_DELAYS_S = original


@pytest.mark.slow
def test_a_thousand_run_study_costs_one_scheduler_query_per_cycle(tmp_path: Path) -> None:
    import tempfile

    # Every journal line and status.json is fsynced: on tmpfs that costs nothing.
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else tmp_path) as where:
        _thousand_runs(Path(where))


def _thousand_runs(tmp_path: Path) -> None:
    (tmp_path / "fake.yaml").write_text(PROFILE)
    (tmp_path / "big.yaml").write_text(
        f"name: big\nsystem: {tmp_path / 'fake.yaml'}\n"
        "workload: {kind: command, command: [echo, 'Total img/sec on 1 GPU(s): 1.0']}\n"
        "grid: {nodes: [1], batch_size: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}\nrepeats: 100\n")
    big = make_plan(tmp_path / "big.yaml", tmp_path / "results")
    assert len(big.runs) == 1000
    fake = FakeSlurm()
    submit_runs(big, big.runs, runner=fake)
    assert fake.submitted() == 1000
    for job_id in list(fake.states)[:990]:
        fake.states[job_id] = "COMPLETED|0:0"
    fake.calls.clear()
    sleeps: list[float] = []
    cycles = {"n": 0}

    def progress(views: dict) -> None:
        cycles["n"] += 1
        if cycles["n"] == 3:  # the last ten end during the third cycle's sleep
            for job_id in list(fake.states)[990:]:
                fake.states[job_id] = "COMPLETED|0:0"

    follow(big, big.runs, runner=fake, sleep=sleeps.append, progress=progress,
           max_interval_s=60.0)
    queries = [c for c in fake.calls if c[0] == "sacct"]
    assert len(queries) == cycles["n"] == 4  # one query a cycle, for every unsettled job
    assert len(queries[0][queries[0].index("-j") + 1].split(",")) == 1000
    assert len(queries[1][queries[1].index("-j") + 1].split(",")) == 10  # settled: not asked
    assert sleeps == [5.0, 7.5, 11.25]  # backing off


def test_a_poll_writes_only_what_changed_and_never_diagnoses(plan, monkeypatch) -> None:
    from scalestudy.execute import diagnose
    from scalestudy.execute import workspace as ws
    from scalestudy.execute.tracking import Tracker

    fake = FakeSlurm()
    submit_runs(plan, plan.runs, runner=fake)
    finish(plan, fake, "101", "COMPLETED|0:0", 10.0)
    finish(plan, fake, "102", "RUNNING|0:0", None)
    tracker = Tracker(plan, fake)
    tracker.refresh()  # settles 101, records 102 running
    writes: list[Path] = []
    real = ws.write_atomic
    monkeypatch.setattr(ws, "write_atomic", lambda p, *a, **k: (writes.append(p),
                                                                real(p, *a, **k)))

    def no_logs(*_: object, **__: object) -> str:
        raise AssertionError("a poll read logs to diagnose a run")

    # What every diagnosis reads (settle's and status's alike): a log's tail.
    monkeypatch.setattr(diagnose, "_tail", no_logs)
    for _ in range(3):
        views = tracker.refresh()
    assert writes == []  # nothing changed: nothing written
    assert views[plan.runs[0].run_id].state == "completed"
    finish(plan, fake, "103", "RUNNING|0:0", None)
    tracker.refresh()
    assert [p.parent.name for p in writes] == [
        next(e.run_id for e in journal(plan).entries() if e.job_id == "103")]


def test_a_held_job_is_held_with_its_reason_and_following_stops(plan) -> None:
    # sacct says PENDING with no reason; the live queue says an administrator holds it.
    fake = FakeSlurm()
    submit_runs(plan, plan.runs[:2], runner=fake)
    run_ids = {e.job_id: e.run_id for e in journal(plan).entries()}
    fake.reasons["101"] = "JobHeldAdmin"
    fake.states["102"] = "COMPLETED|0:0"
    views = refresh(plan, fake)
    held = views[run_ids["101"]]
    assert held.state is RunState.HELD and "administrator" in (held.reason or "")
    stored = json.loads((plan.directory / "runs" / run_ids["101"] / "status.json").read_text())
    assert (stored["state"], "administrator" in stored["reason"]) == ("held", True)
    assert not RunState.HELD.ended and RunState.HELD.active  # never submitted again
    # A follower does not wait for ever on a run only a person can release.
    final = follow(plan, plan.runs[:2], runner=fake, sleep=lambda s: None)
    assert final[run_ids["101"]].state is RunState.HELD


def test_a_run_killed_between_its_allocations_job_lines_adopts_that_allocation(plan) -> None:
    # `run --pack` SIGKILLed after recording the allocation's job for one of its runs:
    # the other run's intent finds the same job by the allocation's name, known or not
    first, second = plan.runs[:2]
    fake = NamedSlurm()
    fake.names["715"] = job_name(plan.study.name, "pack-a3")
    book = journal(plan)
    for run in (first, second):
        book.record(Intent(run.run_id, 1, "2026-11-26T00:00:00+00:00", allocation="a3"))
    book.record(Job(first.run_id, "715", 1, "slurm", "pack", allocation="a3"))
    assert recover(plan, fake) == [(second.run_id, "715")]
    adopted = book.latest()[second.run_id]
    assert adopted.allocation == "a3" and adopted.adopted and adopted.via == "pack"


def test_each_queue_keeps_its_own_job_limit(tmp_path: Path) -> None:
    """A Polaris study over debug-scaling (one job per user) and prod (110): the small
    runs go one at a time, the 16-node runs are not held back by debug-scaling's limit;
    `--max-jobs N` still caps the study's jobs all together."""
    from scalestudy.execute.submit import with_room
    from scalestudy.study.planning import job_limit

    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\nsystem: polaris\nworkload: {model: resnet50}\n"
                    "grid: {nodes: [1, 2, 16], batch_size: [64]}\nrepeats: 2\n"
                    "job: {account: A, queue: [debug-scaling, prod]}\n")
    plan = make_plan(spec, tmp_path / "results")
    said: list[str] = []
    limit = job_limit(plan, None, None, said.append)
    assert limit == {"debug-scaling": 1, "prod": 110}
    assert any("at most 1 job(s) at once in queue debug-scaling" in s for s in said)
    small = [r for r in plan.runs if r.nodes < 16]
    big = [r for r in plan.runs if r.nodes == 16]
    now, later = with_room(plan, plan.runs, [], limit)
    assert now == [small[0], *big] and later == small[1:]
    now, later = with_room(plan, small[1:], [small[0].run_id], limit)
    assert now == [] and later == small[1:]  # debug-scaling is full until it ends
    assert with_room(plan, plan.runs, [big[0].run_id], 3)[0] == plan.runs[:2]


def test_the_default_queues_limit_holds_runs_that_name_no_queue(tmp_path: Path) -> None:
    """No queue named: the runs go to the scheduler's default, whose per-user limit the
    preflight found under its own name (e.g. workq): that limit holds them."""
    from scalestudy.execute.submit import with_room
    from scalestudy.site.preflight import Preflight
    from scalestudy.study.planning import job_limit

    (tmp_path / "fake.yaml").write_text(PROFILE)
    (tmp_path / "study.yaml").write_text(SPEC.format(profile=tmp_path / "fake.yaml"))
    plan = make_plan(tmp_path / "study.yaml", tmp_path / "results")
    found = Preflight(job_limits={"workq": (2, "queue workq's per-user limit (qmgr)")})
    limit = job_limit(plan, None, found, lambda line: None)
    assert limit == {None: 2}
    now, later = with_room(plan, plan.runs, [], limit)
    assert (len(now), len(later)) == (2, len(plan.runs) - 2)
