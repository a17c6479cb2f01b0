"""What real clusters print, read right: every end state, hold and scheduler answer off
the happy path, and the decisive line where the scheduler writes it.

Samples that the testbeds cannot produce are written from the schedulers' sources and
manuals; each names its source. Outputs recorded from the real testbeds are in
tests/data (test_schedulers.py, test_e2e_*.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scalestudy.core.states import Failure, JobStatus, RunState
from scalestudy.execute import commands
from scalestudy.execute.diagnose import classify, diagnose
from scalestudy.execute.tracking import settle
from scalestudy.site import schedulers
from scalestudy.site.schedulers import SubmitError, pbs, slurm

SLURM, PBS = schedulers.get("slurm"), schedulers.get("pbs")
SACCT = ["sacct", "-X", "-n", "-P", "-j", "1", "-o", slurm.SACCT_FIELDS]


def sacct(row: str) -> schedulers.JobState:
    """The state of one `sacct -P` row (JobIDRaw|State|ExitCode|Reason|Energy|Elapsed)."""
    (job,) = SLURM.parse_states(SACCT, 0, row + "\n", "").values()
    return job


# man sacct / man squeue "JOB STATE CODES"; slurm.h's job_states; ExitCode is
# "exit:signal" (man sacct, "ExitCode").
@pytest.mark.parametrize(("row", "status", "failure", "code", "words"), [
    ("41|OUT_OF_MEMORY|0:125|None||", JobStatus.FAILED, Failure.OOM, 253, "OUT_OF_MEMORY"),
    ("41|NODE_FAIL|0:0|None||", JobStatus.FAILED, Failure.NODE_FAILURE, 0, "node of the job"),
    ("41|BOOT_FAIL|0:0|None||", JobStatus.FAILED, Failure.NODE_FAILURE, 0, "failed to boot"),
    ("41|PREEMPTED|0:0|None||", JobStatus.PREEMPTED, Failure.PREEMPTED, 0, "run it again"),
    ("41|DEADLINE|0:0|None||", JobStatus.TIMEOUT, Failure.WALLTIME, 0, "deadline"),
    ("41|TIMEOUT|0:0|None||", JobStatus.TIMEOUT, Failure.WALLTIME, 0, None),
    ("41|CANCELLED by 1000|0:15|None||", JobStatus.CANCELLED, Failure.CANCELLED, 143, None),
    ("41|FAILED|1:0|NonZeroExitCode||", JobStatus.FAILED, None, 1, "NonZeroExitCode"),
    ("41|REVOKED|0:0|None||", JobStatus.CANCELLED, Failure.CANCELLED, 0, "federated"),
])
def test_every_slurm_end_state_has_its_class(row: str, status: JobStatus,
                                             failure: Failure | None, code: int,
                                             words: str | None) -> None:
    job = sacct(row)
    assert (job.state, job.failure, job.exit_code) == (status, failure, code)
    assert words in (job.reason or "") if words else job.reason is None


@pytest.mark.parametrize(("row", "status", "words"), [
    # Pending reasons (man squeue "JOB REASON CODES") that wait for a person, not a node.
    ("41|PENDING|0:0|JobHeldUser||", JobStatus.HELD, "`scontrol release 41`"),
    ("41|PENDING|0:0|JobHeldAdmin||", JobStatus.HELD, "administrator"),
    ("41|PENDING|0:0|DependencyNeverSatisfied||", JobStatus.HELD, "`scancel 41`"),
    ("41|PENDING|0:0|launch_failed_requeued_held||", JobStatus.HELD, "could not launch"),
    ("41|REQUEUE_HOLD|0:0|JobHeldAdmin||", JobStatus.HELD, "requeued and held"),
    ("41|SPECIAL_EXIT|0:0|None||", JobStatus.HELD, "special-exit"),
    ("41|SUSPENDED|0:0|None||", JobStatus.HELD, "suspended"),
    ("41|REQUEUED|0:0|None||", JobStatus.REQUEUED, "requeued"),
    ("41|PENDING|0:0|Resources||", JobStatus.QUEUED, "Resources"),
])
def test_a_slurm_hold_is_held_with_what_to_do(row: str, status: JobStatus, words: str) -> None:
    job = sacct(row)
    assert job.state is status and not job.done
    assert words in (job.reason or "")
    assert (job.state.run_state is RunState.HELD) == (status is JobStatus.HELD)


def test_squeue_and_scontrol_read_holds_too() -> None:
    argv = ["squeue", "-h", "-t", "all", "-j", "7,8", "-o", "%i|%T|%r"]
    states = SLURM.parse_states(argv, 0, "7|PENDING|JobHeldAdmin\n8|PENDING|Priority\n", "")
    assert (states["7"].state, states["8"].state) == (JobStatus.HELD, JobStatus.QUEUED)
    line = ("JobId=9 JobName=s-1 JobState=PENDING Reason=JobHeldUser Dependency=(null) "
            "ExitCode=0:0")
    assert SLURM.parse_scontrol(line).state is JobStatus.HELD


def test_a_signal_exit_code_defers_to_the_runs_own(tmp_path: Path) -> None:
    # ExitCode 0:9: the batch shell was killed by SIGKILL (128 + 9); the job script
    # wrote the program's own code before that kill took the shell.
    job = sacct("41|FAILED|0:9|None||")
    assert (job.exit_code, job.signalled) == (137, True)
    assert settle(tmp_path, job, {}).exit_code == 137  # nothing written: 128 + 9
    (tmp_path / "exit_code").write_text("3\n")
    assert settle(tmp_path, job, {}).exit_code == 3


def test_a_cluster_suffix_follows_the_job_through_every_command() -> None:
    # sbatch --parsable with -M (or in a federation) prints "id;cluster".
    job_id = SLURM.parse_submit(0, "7781;perlmutter\n", "")
    assert job_id == "7781;perlmutter" and SLURM.short_id(job_id) == "7781"
    for argv in SLURM.query_argvs([job_id, "7782;perlmutter"]):
        assert argv[1:3] == ["-M", "perlmutter"]
    assert SLURM.query_argvs([job_id])[0][6:8] == ["-j", "7781"]
    assert SLURM.cancel_argv([job_id]) == ["scancel", "-M", "perlmutter", "7781"]
    assert "-M" not in SLURM.query_argvs(["7781"])[0]


@pytest.mark.parametrize(("name", "out", "job_id"), [
    # Site wrappers that print the id inside a sentence (exit 0: queued).
    ("slurm", "Submitted batch job 55012\n", "55012"),
    ("slurm", "NOTE: charging account m1234\nSubmitted batch job 55013 on cluster "
     "perlmutter\n", "55013;perlmutter"),
    ("pbs", "Job 4109431.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov submitted to queue "
     "prod\n", "4109431.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov"),
    ("pbs", "Your allocation balance is 120.5 node-hours\n88.pbs01\n", "88.pbs01"),
])
def test_a_wrappers_sentence_gives_the_id(name: str, out: str, job_id: str) -> None:
    assert schedulers.get(name).parse_submit(0, out, "") == job_id


@pytest.mark.parametrize("name", ["slurm", "pbs"])
def test_exit_0_without_an_id_is_never_submitted_again(name: str) -> None:
    with pytest.raises(SubmitError, match=r"not submitted again.*finds it by its name"):
        schedulers.get(name).parse_submit(0, "Thank you for your submission.\n", "")


@pytest.mark.parametrize(("code", "out", "err", "problem"), [
    # scancel refuses with exit 0 (src/scancel/scancel.c prints the RPC's error).
    (0, "", "scancel: error: Kill job error on job id 41: Access/permission denied\n",
     "Access/permission denied"),
    # A job that has ended is no failure to cancel, on Slurm as on PBS.
    (0, "", "scancel: error: Kill job error on job id 41: Job/step already completing or "
     "completed\n", None),
    (1, "", "scancel: error: Kill job error on job id 41: Invalid job id specified\n", None),
    (0, "", "", None),
])
def test_scancel_is_read_by_its_words_not_its_exit_code(code: int, out: str, err: str,
                                                        problem: str | None) -> None:
    said = SLURM.cancel_failed(code, out, err)
    assert (problem in said) if problem else said is None


# PBS Pro: src/include/job.h (JOB_EXEC_*), src/server/svr_jobfunc.c
# (update_job_finish_comment), OpenPBS v23.06.06.
@pytest.mark.parametrize(("exit_status", "comment", "status", "failure"), [
    (-27, "Job run at Mon Nov 23 at 11:20 on (n0:ncpus=1) and exceeded resource mem",
     JobStatus.FAILED, Failure.OOM),
    (-26, "... and exceeded resource vmem", JobStatus.FAILED, Failure.OOM),
    (-28, "... and exceeded resource cput", JobStatus.FAILED, Failure.RESOURCE_LIMIT),
    (-24, "... and exceeded resource ncpus (burst)", JobStatus.FAILED, Failure.RESOURCE_LIMIT),
    (-25, "... and exceeded resource ncpus (sum)", JobStatus.FAILED, Failure.RESOURCE_LIMIT),
    (-29, "... and exceeded resource walltime", JobStatus.TIMEOUT, Failure.WALLTIME),
    (-20, "Job run at ... and failed", JobStatus.FAILED, Failure.NODE_FAILURE),
    (-11, "Job run at ... and failed", JobStatus.FAILED, Failure.REQUEUED),
    (-1, "Job run at ... and failed", JobStatus.FAILED, Failure.SCHEDULER),
    (-10, None, JobStatus.FAILED, Failure.SCHEDULER),
    (None, "Job run at ... and exceeded resource mem", JobStatus.FAILED, Failure.OOM),
])
def test_pbs_pro_exit_statuses(exit_status: int | None, comment: str | None,
                               status: JobStatus, failure: Failure) -> None:
    attrs = {"job_state": "F", "substate": 93, "Exit_status": exit_status, "comment": comment}
    job = pbs.job_state("5.pbs01", {k: v for k, v in attrs.items() if v is not None})
    assert (job.state, job.failure) == (status, failure)
    assert "JOB_EXEC_" in job.reason


# Torque: the TORQUE 6.1 administrator guide, "Job exit status" (JOB_EXEC_OVERLIMIT_*).
@pytest.mark.parametrize(("exit_status", "failure"), [
    ("-10", Failure.OOM), ("-11", Failure.WALLTIME), ("-12", Failure.RESOURCE_LIMIT),
    ("-8", Failure.SCHEDULER),
])
def test_torque_reads_its_own_negative_codes(exit_status: str, failure: Failure) -> None:
    text = (f"Job Id: 812.torque01\n    Job_Name = s-1\n    job_state = C\n"
            f"    exit_status = {exit_status}\n")
    (job,) = PBS.parse_states(["qstat", "-f", "812"], 0, text, "").values()
    assert job.failure == failure and "JOB_EXEC_" in job.reason


def test_a_system_hold_after_failed_starts_is_held_with_what_to_do() -> None:
    # src/server/req_runjob.c: "job held, too many failed attempts to run"
    attrs = {"job_state": "H", "substate": 20, "Hold_Types": "s", "run_count": 21,
             "comment": "job held, too many failed attempts to run"}
    job = pbs.job_state("12.pbs01", attrs)
    assert job.state is JobStatus.HELD and job.state.run_state is RunState.HELD
    assert "too many failed attempts" in job.reason and "qrls -h s 12" in job.reason
    operator = pbs.job_state("13.pbs01", {"job_state": "H", "Hold_Types": "o"})
    assert operator.state is JobStatus.HELD and "operator" in operator.reason
    suspended = pbs.job_state("14.pbs01", {"job_state": "S"})
    assert suspended.state is JobStatus.HELD and "suspended" in suspended.reason


def test_a_requeued_pbs_job_says_so() -> None:
    job = pbs.job_state("15.pbs01", {"job_state": "Q", "run_count": 1, "Exit_status": -20,
                                     "comment": "Not Running: Not enough free nodes"})
    assert job.state is JobStatus.REQUEUED and job.state.run_state is RunState.QUEUED
    assert "mother superior" in job.reason and "Not enough free nodes" in job.reason


# Slurm's contribs/torque/qstat.pl: U for a Slurm state it has no letter for, C without
# an exit status, and a silent exit 153 when it knows none of the ids.
def test_slurms_qstat_wrapper_off_the_happy_path(tmp_path: Path) -> None:
    text = "Job Id:\t21\n\tJob_Name = s-1\n\tjob_state = U\n\tqueue = debug\n"
    (job,) = PBS.parse_states(["qstat", "-f", "21"], 0, text, "").values()
    assert job.done and "sacct -j 21" in job.reason
    assert settle(tmp_path, job, {}).state == "failed"  # no record: it did not finish
    assert PBS.parse_states(["qstat", "-f", "21"], 153, "", "") == {}
    done = PBS.parse_states(["qstat", "-f", "22"], 0, "Job Id:\t22\n\tjob_state = C\n", "")
    assert done["22"].state is JobStatus.COMPLETED and done["22"].exit_code is None


def fake(answers: dict[tuple[str, ...], tuple[int, str, str]], asked: list[list[str]]
         ) -> commands.CommandRunner:
    def runner(argv: list[str], cwd: Path | None = None) -> tuple[int, str, str]:
        asked.append(list(argv))
        return answers.get(tuple(argv), (1, "", "no such answer"))
    return runner


def qstat_json(*ids: str) -> str:
    jobs = ",".join(f'"{i}.pbs01":{{"job_state":"R"}}' for i in ids)
    return f'{{"pbs_version":"23.06.06","Jobs":{{{jobs}}}}}'


def test_a_qstat_that_answers_only_the_first_id_is_asked_again() -> None:
    # openpbs#2672: `qstat -f -F json A B C` prints only A and exits 0.
    json_argv = ["qstat", "-x", "-f", "-F", "json"]
    asked: list[list[str]] = []
    runner = fake({tuple([*json_argv, "1", "2", "3"]): (0, qstat_json("1"), ""),
                   tuple([*json_argv, "2", "3"]): (0, qstat_json("2"), ""),
                   tuple([*json_argv, "3"]): (0, qstat_json("3"), "")}, asked)
    assert sorted(commands.query(PBS, ["1", "2", "3"], runner)) == ["1", "2", "3"]
    assert len(asked) == 3
    # A job the server truly forgot costs one more question, not a loop.
    asked.clear()
    runner = fake({tuple([*json_argv, "1", "9"]): (0, qstat_json("1"), ""),
                   tuple([*json_argv, "9"]): (153, '{"Jobs":{}}', "qstat: Unknown Job Id 9")},
                  asked)
    assert sorted(commands.query(PBS, ["1", "9"], runner)) == ["1"] and len(asked) == 2


def test_json_that_is_not_json_falls_back_to_text_with_x() -> None:
    # OpenPBS writes control characters of values into its JSON unescaped.
    asked: list[list[str]] = []
    text = "Job Id: 4.pbs01\n    job_state = F\n    substate = 92\n    Exit_status = 0\n"
    runner = fake({("qstat", "-x", "-f", "-F", "json", "4"): (0, '{"Jobs":{"4.pbs01":{"c":"a\x01'
                                                              '"}', ""),
                   ("qstat", "-x", "-f", "4"): (0, text, "")}, asked)
    assert commands.query(PBS, ["4"], runner)["4"].state is JobStatus.COMPLETED
    assert asked[-1] == ["qstat", "-x", "-f", "4"]
    # Torque's -x means XML: no `Job Id:` block is no answer, and plain -f is asked.
    xml = fake({("qstat", "-x", "-f", "4"): (0, "<Data><Job></Job></Data>", ""),
                ("qstat", "-f", "4"): (0, text, "")}, asked)
    assert commands.query(PBS, ["4"], xml)["4"].state is JobStatus.COMPLETED


# The scheduler's own messages, where they land.
MOM_MEM = "=>> PBS: job killed: mem 1049604kb exceeded limit 1048576kb\n"  # mom_main.c
MOM_CPUT = "=>> PBS: job killed: cput 61 exceeded limit 60\n"
PROGRESS = "  45%|" + "#" * 400 + "| 45/100 [00:30<00:37,  1.47it/s]"
PREEMPT = "slurmstepd: error: *** JOB 41 ON nid001 CANCELLED AT 2026-11-25T10:00:00 DUE TO " \
          "PREEMPTION ***"


def test_pbs_moms_words_are_read_from_the_joined_output(tmp_path: Path) -> None:
    (tmp_path / "pbs.log").write_text(MOM_MEM)
    assert diagnose(tmp_path, 271, "F", "exit code 143").failure == "unknown"
    found = diagnose(tmp_path, 271, "F", "exit code 143", scheduler_log="pbs.log")
    assert (found.failure, found.line) == ("oom", MOM_MEM.strip())
    (tmp_path / "pbs.log").write_text(MOM_CPUT)
    assert diagnose(tmp_path, 271, "F", None, scheduler_log="pbs.log").failure == \
        "resource_limit"


def test_the_decisive_part_of_a_progress_bar_line_is_kept() -> None:
    found = classify(143, None, PROGRESS + "\r" + PREEMPT + "\n")
    assert (found.failure, found.line) == ("preempted", PREEMPT)
    long_line = "x" * 500 + " " + PREEMPT
    assert "DUE TO PREEMPTION ***" in classify(143, None, long_line).line


def test_a_bare_killed_with_137_is_likely_oom() -> None:
    log = "/var/spool/slurmd/job00041/slurm_script: line 25: 1234 Killed  python train.py\n"
    found = classify(137, None, log)
    assert found.failure == "oom" and found.line.startswith("likely out of memory")
    assert classify(1, None, log).failure != "oom"


@pytest.mark.parametrize("log", [
    # horovod/common/ops/nccl_operations.cc: "ncclAllReduce failed: " + ncclGetErrorString
    "horovod.common.exceptions.HorovodInternalError: ncclAllReduce failed: unhandled system "
    "error (run with NCCL_DEBUG=INFO for details)\n",
    # TensorFlow through Horovod
    "tensorflow.python.framework.errors_impl.UnknownError: ncclCommInitRank failed: "
    "unhandled cuda error\n",
    # DeepSpeed and torch: torch's ProcessGroupNCCL
    "[rank3]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
    "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details)\n",
])
def test_nccl_failures_through_every_backend_are_comm(log: str) -> None:
    assert classify(1, None, log).failure == "comm"


OPEN_MPI_ABORT = """\
--------------------------------------------------------------------------
MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD
with errorcode 1.

NOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.
You may or may not see output from the other processes, depending on
exactly when Open MPI kills them.
--------------------------------------------------------------------------
"""


def test_an_mpi_abort_after_the_programs_error_is_the_programs_failure() -> None:
    log = "train: shard 7 of /data/imagenet has 0 samples, cannot continue\n" + OPEN_MPI_ABORT
    found = classify(1, None, log)
    assert (found.failure, found.line) == (
        "unknown", "train: shard 7 of /data/imagenet has 0 samples, cannot continue")
    assert classify(1, None, OPEN_MPI_ABORT).failure == "comm"


OPEN_MPI_EXIT = """\
--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[41785,1],0]
  Exit code:    1
--------------------------------------------------------------------------
"""


@pytest.mark.parametrize("noise", [
    OPEN_MPI_EXIT,
    "srun: error: nid001: task 0: Exited with exit code 1\n"
    "srun: launch/slurm: _step_signal: Terminating StepId=41.0\n",
    "x3004c0s7b0n0: rank 0 exited with code 1\napplication 1234 exit codes: 1\n",
])
def test_a_programs_last_words_beat_the_launchers_noise(noise: str) -> None:
    said = "loading shard 3 of 8\nshard 3 holds no samples for rank 0; stopping\n"
    found = classify(1, None, said + noise)
    assert (found.failure, found.line) == ("unknown", "shard 3 holds no samples for rank 0; "
                                                      "stopping")


RECORDED = Path(__file__).parent / "data" / "pbs" / "openpbs"


@pytest.mark.parametrize(("case", "failure", "line"), [
    ("killed-mem", "oom", "=>> PBS: job killed: mem 425520kb exceeded limit 65536kb"),
    ("killed-cput", "resource_limit", "scheduler: killed by SIGKILL at its cput limit"),
])
def test_recorded_pbs_kills_settle_with_their_class_and_line(tmp_path: Path, case: str,
                                                             failure: str, line: str) -> None:
    # The real server's answer and the job's joined output file (record_limits.py).
    argv = ["qstat", "-x", "-f", "-F", "json", "x"]
    (job,) = PBS.parse_states(argv, 0, (RECORDED / f"qstat-x-f-F-json/{case}.json")
                              .read_text(), "").values()
    (tmp_path / "pbs.log").write_text((RECORDED / f"output/{case}.txt").read_text())
    status = settle(tmp_path, job, {}, scheduler_log=PBS.logs.name)
    assert (status.state, status.failure) == ("failed", failure)
    assert status.failure_line.startswith(line)


STATES = Path(__file__).parent / "data" / "slurm" / "states"  # record_states.py, real Slurm
SQUEUE = ["squeue", "-h", "-t", "all", "-j", "1", "-o", "%i|%T|%r"]
SCONTROL = ["scontrol", "-o", "show", "job"]


def recorded_slurm(case: str, form: str) -> schedulers.JobState:
    argv = {"sacct": SACCT, "squeue": SQUEUE, "scontrol": SCONTROL}[form]
    (job,) = SLURM.parse_states(argv, 0, (STATES / f"{case}.{form}").read_text(), "").values()
    return job


@pytest.mark.parametrize(("case", "form", "status", "words"), [
    ("held-submit", "squeue", JobStatus.HELD, "held by its user"),
    ("held-submit", "scontrol", JobStatus.HELD, "`scontrol release 8`"),
    ("held-admin", "sacct", JobStatus.QUEUED, None),  # accounting keeps no pending reason
    ("held-admin", "squeue", JobStatus.HELD, "administrator"),
    ("held-admin", "scontrol", JobStatus.HELD, "administrator"),
    ("dependency-never", "squeue", JobStatus.HELD, "can never be satisfied"),
    ("dependency-never", "scontrol", JobStatus.HELD, "`scancel 11`"),
    ("requeued", "sacct", JobStatus.QUEUED, None),
    ("requeued", "scontrol", JobStatus.QUEUED, "BeginTime"),
    ("requeue-hold", "sacct", JobStatus.REQUEUED, "requeued"),
    ("requeue-hold", "squeue", JobStatus.HELD, "requeued and held"),
    ("requeue-hold", "scontrol", JobStatus.HELD, "requeued and held"),
    ("node-fail", "sacct", JobStatus.FAILED, "node of the job failed"),
    ("batch-sigkill", "sacct", JobStatus.FAILED, None),
    ("preempted", "sacct", JobStatus.PREEMPTED, "took its nodes"),
    ("preempted", "scontrol", JobStatus.PREEMPTED, "took its nodes"),
])
def test_recorded_slurm_states(case: str, form: str, status: JobStatus,
                               words: str | None) -> None:
    job = recorded_slurm(case, form)
    assert job.state is status
    assert words in (job.reason or "") if words else job.reason is None


def test_a_hold_that_accounting_hides_is_found_in_the_live_queue() -> None:
    # sacct says PENDING (held-admin) and REQUEUED (requeue-hold) with no reason; squeue
    # knows they are held.
    asked: list[list[str]] = []
    sacct_rows = (STATES / "held-admin.sacct").read_text() + (
        STATES / "requeue-hold.sacct").read_text()
    squeue_rows = (STATES / "held-admin.squeue").read_text().strip() + "\n" + (
        STATES / "requeue-hold.squeue").read_text()
    runner = fake({tuple(SLURM.query_argvs(["9", "13"])[0]): (0, sacct_rows, ""),
                   tuple(SLURM.query_argvs(["9", "13"])[1]): (0, squeue_rows, "")}, asked)
    found = commands.query(SLURM, ["9", "13"], runner)
    assert {k: v.state for k, v in found.items()} == {"9": JobStatus.HELD,
                                                      "13": JobStatus.HELD}
    assert [a[0] for a in asked] == ["sacct", "squeue"]


@pytest.mark.parametrize(("case", "failure", "line"), [
    ("node-fail", "node_failure", "slurmstepd-n2: error: *** JOB 14 ON n2 CANCELLED AT"),
    ("preempted", "preempted", "slurmstepd-n1: error: *** JOB 17 ON n1 CANCELLED AT"),
])
def test_recorded_slurm_ends_settle_with_the_stepds_line(tmp_path: Path, case: str,
                                                         failure: str, line: str) -> None:
    job = recorded_slurm(case, "sacct")
    (tmp_path / "stderr.log").write_text((STATES / f"{case}.err").read_text())
    status = settle(tmp_path, job, {})
    assert (status.state, status.failure) == ("failed", failure)
    assert status.failure_line.startswith(line)


def test_recorded_batch_sigkill_defers_to_the_runs_exit_code(tmp_path: Path) -> None:
    job = recorded_slurm("batch-sigkill", "sacct")
    assert (job.exit_code, job.signalled) == (137, True)
    (tmp_path / "stderr.log").write_text((STATES / "batch-sigkill.err").read_text())
    status = settle(tmp_path, job, {})
    assert (status.exit_code, status.failure) == (137, "cancelled")


@pytest.mark.parametrize(("log", "failure"), [
    # Slurm's task/cgroup plugin
    ("slurmstepd: error: Detected 1 oom_kill event in StepId=12.0. Some of the step tasks "
     "have been OOM Killed.\n", "oom"),
    ("Some of your processes may have been killed by the cgroup out-of-memory handler.\n",
     "oom"),
    # Intel GPUs (Aurora) through Level Zero
    ("RuntimeError: UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY\n", "oom"),
    # Torque's MoM when a sister node dies
    ("=>> PBS: job killed: node 1 (n12) requested job terminate, 'EOF' (code 1099) - "
     "received SISTER_EOF attempting to communicate with sister MOM's\n", "node_failure"),
    # torch's watchdog tearing a communicator down; gloo's rendezvous
    ("RuntimeError: NCCL communicator was aborted on rank 3.\n", "comm"),
    ("RuntimeError: Gloo connectFullMesh failed with [../gloo/transport/tcp/pair.cc:144] "
     "no error\n", "comm"),
])
def test_more_site_messages(log: str, failure: str) -> None:
    assert classify(1, None, log).failure == failure
