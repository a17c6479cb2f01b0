"""Failure classes from real-looking log tails, scheduler states and exit codes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from scalestudy.execute import diagnose
from scalestudy.execute import workspace as state
from scalestudy.execute.diagnose import classify
from scalestudy.execute.status import read_status
from scalestudy.site.schedulers import slurm

CUDA_OOM = """\
Traceback (most recent call last):
  File "/opt/scalestudy/workload/__main__.py", line 212, in step
    loss.backward()
[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a \
total capacity of 79.10 GiB of which 1.12 GiB is free. Including non-PyTorch memory, this \
process has 77.97 GiB memory in use.
[rank0]:[E1123 00:12:01.123456 ProcessGroupNCCL.cpp:1595] [PG 0 Rank 0] Process group \
watchdog thread terminated with exception: NCCL error: remote process exited or there was a \
network error, NCCL version 2.21.5
"""
SLURM_OOM = """\
slurmstepd: error: Detected 1 oom-kill event(s) in StepId=4412.0. Some of the step tasks \
have been OOM Killed.
srun: error: nid001234: task 3: Out Of Memory
"""
NCCL_TIMEOUT = """\
[rank2]:[E1123 01:02:03.000 ProcessGroupNCCL.cpp:616] [Rank 2] Watchdog caught collective \
operation timeout: WorkNCCL(SeqNum=1042, OpType=ALLREDUCE, NumelIn=25557032, \
Timeout(ms)=600000) ran for 600012 milliseconds before timing out.
"""
GLOO_PEER = """\
Traceback (most recent call last):
  File "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", line 2501, in \
all_reduce
    work.wait()
RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer \
[10.0.0.12]:47211
"""
MPI_ABORT = """\
MPI_ABORT was invoked on rank 3 in communicator MPI_COMM_WORLD
with errorcode 1.
"""
NODE_FAIL = """\
slurmstepd: error: *** JOB 5512 ON nid000321 CANCELLED AT 2026-11-23T00:40:12 DUE TO NODE \
FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***
"""
TIME_LIMIT = """\
[rank0]: step 9100 img/sec 1234.5
slurmstepd: error: *** JOB 5513 ON nid000322 CANCELLED AT 2026-11-23T01:00:00 DUE TO TIME \
LIMIT ***
[rank1]: RuntimeError: Connection closed by peer [10.0.0.3]:4411
"""
SCANCEL = """\
slurmstepd: error: *** JOB 5514 ON nid000323 CANCELLED AT 2026-11-23T01:00:00 ***
srun: error: nid000323: task 0: Terminated
"""
NO_HOROVOD = """\
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/opt/scalestudy/workload/backends.py", line 40, in init
    import horovod.torch as hvd
ModuleNotFoundError: No module named 'horovod'
[rank1]: RuntimeError: Connection closed by peer [127.0.0.1]:29500
"""
BAD_ARGS = """\
usage: python -m scalestudy.workload [-h] [--model MODEL] [--batch-size BATCH_SIZE]
python -m scalestudy.workload: error: argument --batch-size: invalid int value: '3x'
"""
PBS_WALLTIME = "=>> PBS: job killed: walltime 3620 exceeded limit 3600\n"


@pytest.mark.parametrize(("log", "exit_code", "sched", "expected", "needle"), [
    (CUDA_OOM, 1, "FAILED", "oom", "CUDA out of memory"),
    (SLURM_OOM, 137, "FAILED", "oom", "oom-kill"),
    ("", 137, "OUT_OF_MEMORY", "oom", "OUT_OF_MEMORY"),
    (NCCL_TIMEOUT, 1, "FAILED", "comm", "Watchdog caught collective operation timeout"),
    (GLOO_PEER, 1, "FAILED", "comm", "Connection closed by peer"),
    (MPI_ABORT, 1, "FAILED", "comm", "MPI_ABORT"),
    (NODE_FAIL, None, "NODE_FAIL", "node_failure", "DUE TO NODE"),
    (NODE_FAIL, 1, "FAILED", "node_failure", "DUE TO NODE"),
    (TIME_LIMIT, 0, "TIMEOUT", "walltime", "DUE TO TIME"),
    (TIME_LIMIT, 143, "FAILED", "walltime", "DUE TO TIME"),
    (SCANCEL, 0, "CANCELLED by 1000", "cancelled", "CANCELLED AT"),
    (SCANCEL, 143, None, "cancelled", "CANCELLED AT"),
    (NO_HOROVOD, 1, "FAILED", "import_error", "No module named 'horovod'"),
    (BAD_ARGS, 2, "FAILED", "bad_arguments", "error: argument --batch-size"),
    ("", 2, "FAILED", "bad_arguments", "exit code 2"),
    (PBS_WALLTIME, 271, "F", "walltime", "walltime 3620 exceeded"),
    # A training log's progress line is not a reason (stderr said nothing).
    ("step 10 img/sec 12.0\n", 1, "FAILED", "unknown", "exit code 1"),
    # Seen in scripts/fault-inject: srun inside a job while slurmctld was down.
    ("srun: error: Unable to create step for job 68: Unable to contact slurm controller "
     "(connect failure)\n", 1, "FAILED", "scheduler", "Unable to create step"),
])
def test_classes_from_real_messages(log: str, exit_code: int | None, sched: str | None,
                                    expected: str, needle: str) -> None:
    # The scheduler's state decides through its parser (Slurm's words here).
    decided = slurm._job_state("1", sched, "", None).failure if sched else None
    stderr = "" if "img/sec" in log else None  # the progress line is stdout's
    found = classify(exit_code, sched, log, stderr_text=stderr, scheduler_class=decided)
    assert found.failure == expected
    assert needle in found.line


def test_root_cause_beats_its_echo_on_other_ranks() -> None:
    # The OOM rank's peers report NCCL errors: the class is the memory, and its line.
    found = classify(1, "FAILED", CUDA_OOM)
    assert (found.failure, found.line.startswith("[rank1]: torch.OutOfMemoryError")) == (
        "oom", True)


def test_pbs_exit_status_and_local_time_limit_from_reason() -> None:
    # PBS's parser decides the class from Exit_status -29 (test_schedulers); the reason's
    # words alone still say walltime.
    assert classify(-29, "F", "", scheduler_class="walltime").failure == "walltime"
    assert classify(None, "F", "", "PBS exit status -29; job exceeded walltime").failure == \
        "walltime"
    local = classify(-9, None, "", "time limit of 60 s (job.walltime) exceeded; stopped")
    assert local.failure == "walltime" and "time limit of 60 s" in local.line
    assert classify(-2, None, "", "interrupted by the user").failure == "cancelled"


def test_long_lines_are_shortened() -> None:
    found = classify(1, "FAILED", "ImportError: " + "x" * 5000)
    assert found.failure == "import_error" and len(found.line) == diagnose.MAX_LINE


def count_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the bytes each tail read returns (what a huge log costs, load-free)."""
    read: list[int] = []
    real = state._read_tail

    def counting(path: Path, max_bytes: int) -> bytes:
        data = real(path, max_bytes)
        read.append(len(data))
        return data

    monkeypatch.setattr(state, "_read_tail", counting)
    return read


def test_huge_log_reads_only_the_tail(tmp_path: Path, monkeypatch) -> None:
    log = tmp_path / "stderr.log"
    with log.open("wb") as fh:
        fh.write(b"ModuleNotFoundError: No module named 'early'\n")
        fh.truncate(8 << 30)  # 8 GiB, sparse
        fh.seek(0, os.SEEK_END)
        fh.write(CUDA_OOM.encode())
    read = count_reads(monkeypatch)
    found = diagnose.diagnose(tmp_path, 1, "FAILED")
    assert sum(read) <= 2 * diagnose.TAIL_BYTES  # the tails of two logs, not 8 GiB
    assert found.failure == "oom"  # the early import error is beyond the tail


def test_run_status_diagnoses_an_old_status_without_failure(tmp_path: Path) -> None:
    (tmp_path / "stderr.log").write_text(NCCL_TIMEOUT)
    (tmp_path / state.STATUS).write_text(json.dumps(
        {"state": "failed", "exit_code": 1, "reason": "exit code 1"}))
    status = read_status(tmp_path, diagnose=True)
    assert status.failure == "comm"
    assert "Watchdog" in status.failure_line
    # Pollers read without diagnosing: no log is read.
    assert read_status(tmp_path).failure is None
    # A stored diagnosis is used as it is (not recomputed from logs that may have moved).
    (tmp_path / state.STATUS).write_text(json.dumps(
        {"state": "failed", "exit_code": 137, "failure": "oom", "failure_line": "x"}))
    stored = read_status(tmp_path, diagnose=True)
    assert (stored.failure, stored.failure_line) == ("oom", "x")


def test_completed_run_has_no_failure(tmp_path: Path) -> None:
    (tmp_path / state.STATUS).write_text(json.dumps({"state": "completed", "exit_code": 0}))
    (tmp_path / state.METRICS).write_text(json.dumps({"throughput": 10.0}) + "\n")
    status = read_status(tmp_path, diagnose=True)
    assert (status.state, status.failure, status.failure_line) == ("completed", None, None)


def test_a_stored_unknown_is_diagnosed_again(tmp_path: Path) -> None:
    (tmp_path / "stderr.log").write_text(
        "srun: error: Unable to create step for job 68: Unable to contact slurm controller\n")
    (tmp_path / state.STATUS).write_text(json.dumps(
        {"state": "failed", "exit_code": 1, "failure": "unknown", "failure_line": "exit 1"}))
    assert read_status(tmp_path, diagnose=True).failure == "scheduler"


def test_an_unclassified_python_crash_shows_its_exception_line() -> None:
    from scalestudy.execute.diagnose import classify

    log = ("[rank0]:   File \"engine.py\", line 1972, in _do_args_sanity_check\n"
           "[rank0]: AssertionError: DeepSpeed requires the LOCAL_RANK environment variable\n"
           "srun: error: n2: task 1: Exited with exit code 1\n")
    found = classify(1, "FAILED", log, "FAILED, exit code 1")
    assert found.failure == "unknown"
    assert found.line == ("[rank0]: AssertionError: DeepSpeed requires the LOCAL_RANK "
                          "environment variable")


# Real torchrun 2.x output (`scalestudy run` of a `command` workload on this machine):
# the program's own error first, then torchrun's log line, its traceback ending in
# ChildFailedError and its "Root Cause" report, which name no cause.
TORCHRUN_AGENT = """\
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "<frozen runpy>", line 88, in _run_code
  File "/v/lib/python3.11/site-packages/torch/distributed/run.py", line 1032, in <module>
    main()
  File "/v/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/errors/\
__init__.py", line 367, in wrapper
    return f(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^
  File "/v/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 383, in \
launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\x20
============================================================
python FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-23_11:19:48
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : {code} (pid: 17486) {signal}
  error_file: <N/A>
  traceback : {message}
============================================================
"""
NO_TRACEBACK = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"


def torchrun_log(program: str, code: int = 1, signal: str = "",
                 message: str = NO_TRACEBACK) -> str:
    agent = ("E1123 11:19:48.783000 17076 torch/distributed/elastic/multiprocessing/api.py:"
             f"1002] failed (exitcode: {code}) local_rank: 0 (pid: 17486) of binary: python\n")
    return program + agent + TORCHRUN_AGENT.format(code=code, signal=signal, message=message)


MISSING_SCRIPT = ("/usr/bin/python: can't open file '/home/me/runs/59bd/train.py': [Errno 2] "
                  "No such file or directory")
PROGRAM_RAISED = """\
Traceback (most recent call last):
  File "/home/me/project/train.py", line 4, in <module>
    main()
  File "/home/me/project/train.py", line 3, in main
    raise ValueError("bad batch size: " + sys.argv[-1])
ValueError: bad batch size: 32
"""


@pytest.mark.parametrize(("program", "code", "expected", "line"), [
    (MISSING_SCRIPT + "\n", 2, "not_found", MISSING_SCRIPT),
    (PROGRAM_RAISED, 1, "unknown", "ValueError: bad batch size: 32"),
    # A program that says what is wrong without raising: its last such line.
    ("reading data\nfatal: /data/imagenet is empty\n", 1, "unknown",
     "fatal: /data/imagenet is empty"),
    # A program that says nothing: which rank torchrun saw fail first, and how.
    ("", 1, "unknown",
     "rank 0 exited with code 1 without an error message (torchrun's first observed failure)"),
])
def test_the_programs_line_decides_not_torchruns_report(program: str, code: int,
                                                         expected: str, line: str) -> None:
    found = classify(1, None, torchrun_log(program, code), "exit code 1")
    assert (found.failure, found.line) == (expected, line)


def test_a_rank_killed_by_a_signal_is_named() -> None:
    log = torchrun_log("", -9, "(SIGKILL)", "Signal 9 (SIGKILL) received by PID 17486")
    assert classify(1, None, log, "exit code 1").line.startswith("rank 0 killed by SIGKILL")


def test_two_agents_interleaved_still_leave_the_programs_line() -> None:
    # Two torchrun agents (two "nodes" here) write their tracebacks at once.
    agent = TORCHRUN_AGENT.format(code=1, signal="", message=NO_TRACEBACK).splitlines()
    mixed = [line for pair in zip(agent[:11], agent[:11], strict=True) for line in pair]
    log = PROGRAM_RAISED * 2 + "\n".join(mixed + agent[11:]) + "\n"
    found = classify(1, None, log, "exit code 1")
    assert (found.failure, found.line) == ("unknown", "ValueError: bad batch size: 32")


@pytest.mark.parametrize(("log", "line"), [
    # torchrun --no-python with a program that is not on PATH: the agent's own error.
    ("Traceback (most recent call last):\n  File \"/usr/lib/python3.11/subprocess.py\", line "
     "1950, in _execute_child\n    raise child_exception_type(errno_num, err_msg, err_filename)"
     "\nFileNotFoundError: [Errno 2] No such file or directory: 'nosuchprog'\n",
     "FileNotFoundError: [Errno 2] No such file or directory: 'nosuchprog'"),
    ("/scratch/r/job.sh: line 14: cd: /home/me/project: No such file or directory\n",
     "/scratch/r/job.sh: line 14: cd: /home/me/project: No such file or directory"),
    ("/scratch/r/job.sh: line 30: trainer: command not found\n",
     "/scratch/r/job.sh: line 30: trainer: command not found"),
    ("slurmstepd: error: execve(): train.sh: No such file or directory\n"
     "srun: error: n1: task 0: Exited with exit code 2\n",
     "slurmstepd: error: execve(): train.sh: No such file or directory"),
    # flux run of a missing program (flux-core 0.88.0, the testbed)
    ("0.041s: flux-shell[0]: FATAL: task 0 (host vm): start failed: /no/such/program: No "
     "such file or directory\n0.042s: job.exception fF2vCiK type=exec severity=0 task 0 "
     "(host vm): start failed: /no/such/program: No such file or directory\n"
     "flux-job: task(s) exited with exit code 127\n",
     "0.041s: flux-shell[0]: FATAL: task 0 (host vm): start failed: /no/such/program: No "
     "such file or directory"),
])
def test_a_missing_program_or_file_is_not_found(log: str, line: str) -> None:
    found = classify(1, "FAILED", log, "exit code 1")
    assert (found.failure, found.line) == ("not_found", line)


def test_a_shell_complaint_does_not_hide_the_programs_exception() -> None:
    # A site's profile script may print one and go on; the program's error decides.
    log = "/etc/profile.d/site.sh: line 3: lsb_release: command not found\n" + PROGRAM_RAISED
    assert classify(1, None, log).line == "ValueError: bad batch size: 32"


def test_a_missing_shared_library_stays_an_import_error() -> None:
    log = ("ImportError: libcudart.so.12: cannot open shared object file: No such file or "
           "directory\n")
    assert classify(1, "FAILED", log).failure == "import_error"


def test_the_error_like_line_comes_from_stderr_not_the_training_log(tmp_path: Path) -> None:
    (tmp_path / "stderr.log").write_text("Segmentation fault (core dumped)\n")
    (tmp_path / "stdout.log").write_text("epoch 1 top-1 error: 23.4%\n")
    assert diagnose.diagnose(tmp_path, 139).line == "Segmentation fault (core dumped)"


def test_the_log_tail_puts_the_programs_lines_before_torchruns(tmp_path: Path) -> None:
    (tmp_path / "stderr.log").write_text(torchrun_log(PROGRAM_RAISED))
    tail = state.log_tail(tmp_path)
    assert tail.startswith("--- stderr.log (last lines) ---\nTraceback (most recent call")
    program, launcher = tail.split("--- stderr.log (the launcher's summary) ---\n")
    assert "ValueError: bad batch size: 32" in program and "ChildFailedError" not in tail
    assert "torch/distributed" not in program
    assert launcher.splitlines()[1:] == ["  host      : localhost",
                                         "  rank      : 0 (local_rank: 0)",
                                         "  exitcode  : 1 (pid: 17486) "]
