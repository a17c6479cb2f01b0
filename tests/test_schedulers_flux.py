"""The Flux scheduler's parsers, against outputs recorded from a real flux-core 0.88.0
(tests/data/flux/SOURCES.md), and its directives and launch line."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from scalestudy.core.states import Failure, JobStatus
from scalestudy.execute import commands
from scalestudy.site import schedulers
from scalestudy.site.schedulers import JobRequest, SubmitError
from scalestudy.site.schedulers.flux import ascii_id, parse_queue_list

FLUX = Path(__file__).parent / "data" / "flux"
sched = schedulers.get("flux")


def recorded(name: str) -> tuple[list[str], int, str, str]:
    """argv, exit code, stdout and stderr of one recorded command."""
    meta = json.loads((FLUX / f"{name}.meta.json").read_text(encoding="utf-8"))
    return meta["argv"], meta["exit_code"], (FLUX / name).read_text(encoding="utf-8"), \
        meta["stderr"]


def one_state(name: str):
    argv, code, out, err = recorded(name)
    states = sched.parse_states(argv, code, out, err)
    assert len(states) == 1, states
    return next(iter(states.values()))


@pytest.mark.parametrize(("name", "state", "failure", "code"), [
    ("jobs/exit0.json", JobStatus.COMPLETED, None, 0),
    ("jobs/exit3.json", JobStatus.FAILED, None, 3),
    ("jobs/sigkill.json", JobStatus.FAILED, None, 137),
    ("jobs/command-not-found.json", JobStatus.FAILED, None, 127),
    ("jobs/exec-failed.json", JobStatus.FAILED, Failure.NOT_FOUND, 127),
    ("jobs/timeout.json", JobStatus.TIMEOUT, Failure.WALLTIME, 142),
    ("jobs/running.json", JobStatus.CANCELLED, Failure.CANCELLED, 143),
    ("jobs/pending.json", JobStatus.CANCELLED, Failure.CANCELLED, None),
    ("jobs/held.json", JobStatus.CANCELLED, Failure.CANCELLED, None),
    ("jobs/dependent.json", JobStatus.CANCELLED, Failure.SCHEDULER, 1),
    ("jobs/unsatisfiable.json", JobStatus.FAILED, Failure.SCHEDULER, 1),
    ("jobs/running-live.json", JobStatus.RUNNING, None, None),
    ("jobs/pending-live.json", JobStatus.QUEUED, None, None),
    ("jobs/held-live.json", JobStatus.HELD, None, None),
    ("jobs/dependent-live.json", JobStatus.QUEUED, None, None),
])
def test_every_recorded_outcome_is_classed_from_result_and_exception(
        name: str, state: JobStatus, failure: Failure | None, code: int | None) -> None:
    got = one_state(name)
    assert (got.state, got.failure, got.exit_code) == (state, failure, code), got
    assert got.job_id.startswith("f") and got.job_id.isascii()


def test_reasons_say_what_happened_and_what_to_do() -> None:
    assert "urgency" in (one_state("jobs/held-live.json").reason or "")
    assert "after-success" in (one_state("jobs/dependent-live.json").reason or "")
    assert "unsatisfiable request" in (one_state("jobs/unsatisfiable.json").reason or "")
    assert "before it started" in (one_state("jobs/pending.json").reason or "")
    assert one_state("jobs/timeout.json").signalled  # 142 = 128 + SIGALRM, Flux's kill


def test_a_utf8_job_id_is_read_in_its_ascii_spelling() -> None:
    got = one_state("jobs/exit0-utf8-locale.json")
    assert got.job_id.startswith("f") and got.job_id.isascii()
    _, code, out, err = recorded("submit/exit0-utf8.txt")
    assert out.startswith("ƒ") and sched.parse_submit(code, out, err) == ascii_id(out.strip())
    assert ascii_id("ƒ2RWf2g7") == "f2RWf2g7" == ascii_id("f2RWf2g7")


def test_several_ids_some_unknown_and_all_unknown() -> None:
    argv, code, out, err = recorded("jobs/multi-live.json")
    assert len(sched.parse_states(argv, code, out, err)) == len(argv) - 3
    argv, code, out, err = recorded("jobs/known-and-unknown.json")
    states = sched.parse_states(argv, code, out, err)
    assert list(states) == [argv[3]]  # the unknown one is absent, not an error
    argv, code, out, err = recorded("jobs/unknown.json")
    assert code == 1 and sched.parse_states(argv, code, out, err) == {}
    with pytest.raises(SubmitError, match="exit 1"):
        sched.parse_states(argv, 1, "", "flux-jobs: ERROR: Unable to connect to Flux\n")


def test_submit_accepted_and_refused() -> None:
    _, code, out, err = recorded("submit/exit0.txt")
    assert sched.parse_submit(code, out, err) == out.strip()
    for name, words in (("submit/unknown-queue.txt", "Invalid queue"),
                        ("submit/over-queue-nodes.txt", "exceeds policy limit"),
                        ("submit/bad-directive.txt", "argument parsing failed")):
        _, code, out, err = recorded(name)
        with pytest.raises(SubmitError, match=words):
            sched.parse_submit(code, out, err)
    with pytest.raises(SubmitError, match="finds it by its name"):
        sched.parse_submit(0, "queued, maybe\n", "")


@pytest.mark.parametrize(("name", "failed"), [
    ("cancel/running.txt", False), ("cancel/pending.txt", False), ("cancel/held.txt", False),
    ("cancel/inactive.txt", False), ("cancel/mixed.txt", False), ("cancel/unknown.txt", False),
    ("cancel/not-an-id.txt", True),
])
def test_cancelling_an_ended_or_purged_job_is_no_failure(name: str, failed: bool) -> None:
    _, code, out, err = recorded(name)
    assert (sched.cancel_failed(code, out, err) is not None) is failed


def test_find_by_name_one_command_per_name() -> None:
    argvs = sched.find_argvs(["a-1", "b-2"])
    assert [a[-2] for a in argvs] == ["--name=a-1", "--name=b-2"]
    argv, _, out, _ = recorded("find/by-name.json")
    assert sched.parse_found(argv, out) == {"study-c000000042": {"fDK3u6Hm", "fDbBPH7M"}}
    argv, _, out, _ = recorded("find/no-such-name.json")
    assert sched.parse_found(argv, out) == {}


def test_queue_limits_from_flux_queue_list() -> None:
    argv, code, out, err = recorded("preflight/queue-list-fields.txt")
    assert argv[:5] == sched.limits_argvs()[0][:5]
    answer = sched.parse_limits(argv, code, out, err)
    assert answer is not None and answer.default == "batch"
    batch, debug = answer.queues["batch"], answer.queues["debug"]
    assert (batch.max_nodes, batch.max_walltime_s, batch.closed) == (None, 21600, None)
    assert (debug.max_nodes, debug.max_walltime_s) == (2, 3600)
    stopped = parse_queue_list("debug|debug|y|n|3600.0|3600.0|0|2\n").queues["debug"]
    assert stopped.closed and "stopped" in stopped.closed and not stopped.takes(1, 60)


def test_directives_are_shell_quoted_flux_lines_before_any_command() -> None:
    job = JobRequest(name="study-abc", nodes=2, ranks_per_node=4, walltime="01:30:00",
                     queue="pdebug", account="guests", stdout="/r/my dir/flux.log",
                     extra=("--setattr=system.foo=1",))
    lines = sched.directives(job)
    assert all(line.startswith("# flux: ") for line in lines)
    words = [w for line in lines for w in shlex.split(line[len("# flux: "):])]
    assert words == ["--job-name=study-abc", "--nodes=2", "--exclusive", "--time-limit=5400s",
                     "--queue=pdebug", "--bank=guests", "--output=/r/my dir/flux.log",
                     "--setattr=system.foo=1"]
    with pytest.raises(Exception, match="cannot go into a job directive"):
        sched.directives(JobRequest(name="x; rm -rf ~", nodes=1, ranks_per_node=1,
                                    walltime="00:01:00"))


@pytest.mark.parametrize(("said", "tries"), [
    # flux-core 0.88.0 with FLUX_URI at a socket that is gone, or that nobody listens on
    ("flux-batch: ERROR: Unable to connect to Flux: broker socket /tmp/x/local was not "
     "found\n", 4),
    ("flux-batch: ERROR: Unable to connect to Flux: Connection refused\n", 4),
    # another user's instance: trying again changes nothing
    ("flux-batch: ERROR: Unable to connect to Flux: Operation not permitted\n", 1),
    ("flux-batch: ERROR: Invalid queue 'nosuch' specified\n", 1),
])
def test_a_submission_is_tried_again_only_when_flux_was_not_reached(said: str,
                                                                     tries: int) -> None:
    calls: list[list[str]] = []

    def runner(argv, cwd=None):
        calls.append(list(argv))
        return 1, "", said

    code, _, err = commands.run_retrying(runner, sched.submit_argv("/r/job.sh"),
                                         idempotent=False, sleep=lambda _s: None)
    assert len(calls) == tries and calls[0] == ["flux", "batch", "/r/job.sh"]
    with pytest.raises(SubmitError, match="flux batch failed"):
        sched.parse_submit(code, "", err)
