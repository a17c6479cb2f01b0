"""Why a run failed: one class and the line that decides it.

A failed run is classified from what the scheduler says (its final state, the exit
code, scalestudy's own reason) and from the tail of its logs. Only the last
`TAIL_BYTES` of stderr.log and stdout.log are read: logs can be gigabytes.

Classes, most decisive first when the logs show several (a rank that runs out of
memory makes the other ranks report a broken connection: the cause is the memory):
node_failure, walltime, cancelled, scheduler (the launcher could not reach the
scheduler to start the ranks), oom, import_error, not_found (a program, script or file
the job names does not exist), bad_arguments, comm, unknown.

The decisive line is the program's own, never a launcher's report of it: torchrun's
ChildFailedError report, its log lines and srun's or MPI's exit summaries are set
aside (workspace.launcher_lines). Without a class's evidence, the line is the
program's last exception (`SomeError: ...`, class unknown), else a shell's "command
not found" or "No such file or directory" (not_found), else the last stderr line that
looks like an error, else which rank torchrun saw fail first and how, else the exit
code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from scalestudy.execute.workspace import launcher_lines, root_cause_lines, tail_text

#: How much of the end of each log is read.
TAIL_BYTES = 64 * 1024
#: Longest decisive line kept (status.json, runs.csv and the status table stay readable).
MAX_LINE = 300
LOGS = ("stderr.log", "stdout.log")

OOM, COMM, NODE_FAILURE, WALLTIME = "oom", "comm", "node_failure", "walltime"
CANCELLED, IMPORT_ERROR, BAD_ARGUMENTS, UNKNOWN = (
    "cancelled", "import_error", "bad_arguments", "unknown")
SCHEDULER, NOT_FOUND = "scheduler", "not_found"
#: Every class, in the order a log's evidence is weighed.
CLASSES: tuple[str, ...] = (NODE_FAILURE, WALLTIME, CANCELLED, SCHEDULER, OOM, IMPORT_ERROR,
                            NOT_FOUND, BAD_ARGUMENTS, COMM, UNKNOWN)

_PATTERNS: dict[str, re.Pattern[str]] = {
    NODE_FAILURE: re.compile(
        r"NODE[ _]FAIL|DUE TO NODE FAILURE|node failure", re.I),
    WALLTIME: re.compile(
        r"DUE TO TIME LIMIT|walltime \S* ?exceeded|job killed: walltime|"
        r"time limit of .* exceeded", re.I),
    CANCELLED: re.compile(r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT|job deleted by|qdel"),
    SCHEDULER: re.compile(
        r"Unable to create step|Unable to contact slurm controller|"
        r"Job step creation temporarily disabled|pbs_tmrsh|tm_init failed|"
        r"cannot connect to server", re.I),
    OOM: re.compile(
        r"out of memory|OutOfMemoryError|\bOOM\b|oom[-_]kill|OUT_OF_MEMORY|MemoryError|"
        r"std::bad_alloc|CUBLAS_STATUS_ALLOC_FAILED|job killed: mem|"
        r"Exceeded job memory limit|Killed process \d+", re.I),
    IMPORT_ERROR: re.compile(
        r"ModuleNotFoundError|ImportError|No module named|"
        r"cannot open shared object file|undefined symbol:"),
    NOT_FOUND: re.compile(
        r"\[Errno 2\] No such file or directory|FileNotFoundError|"  # python x.py, open()
        r"execve\(\).*No such file|execvp? error on file|"  # slurmstepd, MPICH hydra
        r"could not access or execute an executable"),  # Open MPI
    BAD_ARGUMENTS: re.compile(
        r"error: (?:argument |unrecognized arguments|the following arguments are required)|"
        r"invalid choice:"),
    COMM: re.compile(
        r"NCCL (?:error|WARN)|nccl\w*Error|ncclInternalError|ncclSystemError|ncclRemoteError|"
        r"DistBackendError|DistNetworkError|Connection closed by peer|"
        r"Connection reset by peer|ProcessGroupGloo|ProcessGroupNCCL|"
        r"Watchdog caught collective operation timeout|MPI_ABORT|MPI_Abort|"
        r"RendezvousTimeoutError|gloo.*(?:[Tt]imed out|[Tt]imeout)|Socket Timeout|"
        r"Timed out waiting .*(?:workers|peers|ranks)", re.I),
}

# Scheduler states that decide the class whatever the logs say.
_STATE_CLASS = {
    "OUT_OF_MEMORY": OOM, "NODE_FAIL": NODE_FAILURE, "BOOT_FAIL": NODE_FAILURE,
    "TIMEOUT": WALLTIME, "DEADLINE": WALLTIME, "CANCELLED": CANCELLED,
    "PREEMPTED": CANCELLED, "REVOKED": CANCELLED,
}
# PBS Pro's own negative Exit_status values (JOB_EXEC_*).
_PBS_EXIT_CLASS = {-29: WALLTIME}
_PBS_EXIT = re.compile(r"PBS exit status (-\d+)")


@dataclass(frozen=True)
class Diagnosis:
    """A failure class and the line (from a log, or the scheduler's words) behind it."""

    failure: str
    line: str


def _short(line: str) -> str:
    line = line.strip()
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 3] + "..."


def program_lines(text: str) -> list[str]:
    """The lines of `text` a launcher did not write about the program (the program's
    own, and the job script's)."""
    lines = text.splitlines()
    marked = launcher_lines(lines)
    return [line for i, line in enumerate(lines) if i not in marked]


def log_evidence(text: str) -> dict[str, str]:
    """The first of the program's lines in `text` matching each class (classes without
    a match are absent)."""
    found: dict[str, str] = {}
    for raw in program_lines(text):
        for cls, pattern in _PATTERNS.items():
            if cls not in found and pattern.search(raw):
                found[cls] = _short(raw)
    return found


def _from_scheduler(scheduler_state: str | None, reason: str | None,
                    exit_code: int | None) -> str | None:
    word = (scheduler_state or "").split()[0].rstrip("+") if (scheduler_state or "").strip() \
        else ""
    if word in _STATE_CLASS:
        return _STATE_CLASS[word]
    if exit_code is not None and exit_code in _PBS_EXIT_CLASS:
        return _PBS_EXIT_CLASS[exit_code]
    match = _PBS_EXIT.search(reason or "")
    if match and int(match.group(1)) in _PBS_EXIT_CLASS:
        return _PBS_EXIT_CLASS[int(match.group(1))]
    text = reason or ""
    if _PATTERNS[WALLTIME].search(text):
        return WALLTIME
    if "interrupted by the user" in text or text.startswith("cancelled"):
        return CANCELLED
    return None


def classify(exit_code: int | None, scheduler_state: str | None, log_text: str,
             reason: str | None = None, stderr_text: str | None = None) -> Diagnosis:
    """The class of a failed run from its exit code, scheduler state, reason and log text
    (`stderr_text`: the stderr part of it, where a line that looks like an error is
    looked for; all of it when not given)."""
    evidence = log_evidence(log_text)
    decided = _from_scheduler(scheduler_state, reason, exit_code)
    if decided is not None:
        words = scheduler_state or reason or f"exit code {exit_code}"
        return Diagnosis(decided, evidence.get(decided) or _short(f"scheduler: {words}"))
    for cls in CLASSES[:-1]:
        if cls in evidence:
            return Diagnosis(cls, evidence[cls])
    said = _last_match(program_lines(log_text if stderr_text is None else stderr_text),
                       _ERROR_LIKE)
    if exit_code == 2:
        return Diagnosis(BAD_ARGUMENTS, said or "exit code 2 (the workload's usage error)")
    program = program_lines(log_text)
    raised = _last_match(program, _EXCEPTION)
    if raised is not None:
        return Diagnosis(UNKNOWN, raised)
    # A shell's complaint decides only when the program raised nothing: a site script
    # may print one and go on.
    shell = _last_match(program, _SHELL_NOT_FOUND)
    if shell is not None:
        return Diagnosis(NOT_FOUND, shell)
    told = said or _root_cause(log_text)
    if told is not None:
        return Diagnosis(UNKNOWN, told)
    fallback = reason or (f"exit code {exit_code}" if exit_code is not None else "no reason known")
    return Diagnosis(UNKNOWN, _short(fallback))


# A rank prefix: torch's "[rank0]:", torchrun --tee's "[default0]:", srun -l's "0: ".
_PREFIX = r"^(?:\[(?:rank|default)\d+\]:\s*|\d+: )?"
#: The last line of a Python traceback: the most telling line of an unclassified crash.
_EXCEPTION = re.compile(_PREFIX + r"[A-Za-z_][\w.]*(?:Error|Exception): \S")
#: A line that says something went wrong, from a program that raised nothing.
_ERROR_LIKE = re.compile(
    r"\b(?:error|fatal|failed|failure|abort(?:ed|ing)?|exception|denied|not found|"
    r"no such file|cannot|can't|could not|unable to|segmentation fault|core dumped)\b", re.I)
#: bash (the job script, or a `bash -c` command) could not find a program, file or directory.
_SHELL_NOT_FOUND = re.compile(
    r": command not found$|: line \d+: .*: No such file or directory$|"
    r"^(?:/\S*/)?(?:ba|da|z)?sh: .*: No such file or directory$")
_EXITCODE = re.compile(r"exitcode\s*:\s*(-?\d+)(?:.*\((SIG\w+)\))?")
_RANK = re.compile(r"rank\s*:\s*(\d+)")


def _last_match(lines: list[str], pattern: re.Pattern[str]) -> str | None:
    """The last line matching `pattern` (leading blanks ignored), shortened."""
    for raw in reversed(lines):
        if pattern.search(raw.strip()):
            return _short(raw)
    return None


def _root_cause(text: str) -> str | None:
    """Which rank torchrun saw fail first and how, for a program that said nothing."""
    lines = text.splitlines()
    fields = [lines[i] for i in root_cause_lines(lines)]
    rank = next((m.group(1) for f in fields if (m := _RANK.search(f))), None)
    code = next((m for f in fields if (m := _EXITCODE.search(f))), None)
    if rank is None or code is None:
        return None
    how = f"killed by {code.group(2)}" if code.group(2) else f"exited with code {code.group(1)}"
    return f"rank {rank} {how} without an error message (torchrun's first observed failure)"


def read_logs(run_dir: Path, max_bytes: int = TAIL_BYTES) -> str:
    """The tails of stderr.log then stdout.log ("" for a missing one)."""
    return "\n".join(_tail(run_dir, name, max_bytes) for name in LOGS)


def _tail(run_dir: Path, name: str, max_bytes: int = TAIL_BYTES) -> str:
    return tail_text(Path(run_dir) / name, lines=1 << 20, max_bytes=max_bytes)


def diagnose(run_dir: Path, exit_code: int | None, scheduler_state: str | None = None,
             reason: str | None = None) -> Diagnosis:
    """Classify the failed run in `run_dir` (reads only the tails of its logs)."""
    stderr = _tail(run_dir, LOGS[0])
    return classify(exit_code, scheduler_state, f"{stderr}\n{_tail(run_dir, LOGS[1])}", reason,
                    stderr_text=stderr)
