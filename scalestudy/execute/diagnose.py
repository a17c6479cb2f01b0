"""Why a run failed: one class and the line that decides it.

A failed run is classified from what the scheduler says (the class its parser read
from the job's final state or exit status, scalestudy's own reason) and from the tail
of its logs: stderr.log, stdout.log and the file the scheduler writes the job's own
output to (PBS MoM's `=>> PBS: job killed: ...` lands there). Only the last
`TAIL_BYTES` of each are read: logs can be gigabytes.

Classes (core.states.Failure), most decisive first when the logs show several (a rank
that runs out of memory makes the other ranks report a broken connection: the cause is
the memory): node_failure, walltime, preempted, requeued, cancelled, scheduler (the
launcher could not reach the scheduler to start the ranks), oom, resource_limit,
import_error, not_found (a program, script or file the job names does not exist),
bad_arguments, comm, unknown.

The decisive line is the program's own, never a launcher's report of it: torchrun's
ChildFailedError report, its log lines, srun's, mpirun's and Open MPI's exit summaries
are set aside (workspace.launcher_lines). Without a class's evidence, the line is the
program's last exception (`SomeError: ...`, class unknown), else a shell's "command
not found" or "No such file or directory" (not_found), else the last stderr line that
looks like an error, else the program's last words on stderr, else which rank torchrun
saw fail first and how, else the exit code. An MPI_ABORT is a comm failure only when
the program said nothing else: an application that aborts after its own error failed
by that error. A bare `Killed` with exit code 137 is "likely" out of memory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from scalestudy.core.states import Failure
from scalestudy.execute.workspace import launcher_lines, root_cause_lines, tail_text
from scalestudy.site import schedulers

#: How much of the end of each log is read.
TAIL_BYTES = 64 * 1024
#: Longest decisive line kept (status.json, runs.csv and the status table stay readable).
MAX_LINE = 300
LOGS = ("stderr.log", "stdout.log")

(OOM, COMM, NODE_FAILURE, WALLTIME, CANCELLED, IMPORT_ERROR, BAD_ARGUMENTS, UNKNOWN,
 SCHEDULER, NOT_FOUND, PREEMPTED, REQUEUED, RESOURCE_LIMIT) = (str(f.value) for f in (
    Failure.OOM, Failure.COMM, Failure.NODE_FAILURE, Failure.WALLTIME, Failure.CANCELLED,
    Failure.IMPORT_ERROR, Failure.BAD_ARGUMENTS, Failure.UNKNOWN, Failure.SCHEDULER,
    Failure.NOT_FOUND, Failure.PREEMPTED, Failure.REQUEUED, Failure.RESOURCE_LIMIT))
#: Every class, in the order a log's evidence is weighed.
CLASSES: tuple[str, ...] = (NODE_FAILURE, WALLTIME, PREEMPTED, REQUEUED, CANCELLED,
                                SCHEDULER, OOM, RESOURCE_LIMIT, IMPORT_ERROR, NOT_FOUND,
                                BAD_ARGUMENTS, COMM, UNKNOWN)

#: What any job's logs say of each class, whoever ran it; each scheduler adds what its
#: own daemons write (`Scheduler.logs.patterns`, in site.schedulers), see `_patterns`.
_GENERIC: dict[str, re.Pattern[str]] = {
    NODE_FAILURE: re.compile(r"node failure", re.I),
    WALLTIME: re.compile(r"time limit of .* exceeded", re.I),
    PREEMPTED: re.compile(r"job (?:was )?preempted", re.I),
    REQUEUED: re.compile(r"job (?:was )?requeued", re.I),
    OOM: re.compile(
        # a cgroup: "...killed by the cgroup out-of-memory handler"; Intel's Level Zero:
        # UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY
        r"out[ -]of[ -]memory|OutOfMemoryError|\bOOM\b|oom[-_]kill|"
        r"OUT_OF_(?:DEVICE_|HOST_)?MEMORY|MemoryError|"
        r"std::bad_alloc|CUBLAS_STATUS_ALLOC_FAILED|Killed process \d+", re.I),
    # the kernel's RLIMIT_CPU
    RESOURCE_LIMIT: re.compile(r"CPU time limit exceeded|Exceeded job cpu", re.I),
    IMPORT_ERROR: re.compile(
        r"ModuleNotFoundError|ImportError|No module named|"
        r"cannot open shared object file|undefined symbol:"),
    NOT_FOUND: re.compile(
        r"\[Errno 2\] No such file or directory|FileNotFoundError|"  # python x.py, open()
        r"execvp? error on file|"  # MPICH hydra
        r"could not access or execute an executable"),  # Open MPI
    BAD_ARGUMENTS: re.compile(
        r"error: (?:argument |unrecognized arguments|the following arguments are required)|"
        r"invalid choice:"),
    # torch (DistBackendError, ProcessGroupNCCL), DeepSpeed (through torch), Horovod
    # ("HorovodInternalError: ncclAllReduce failed: ...") and TensorFlow/Horovod
    # ("ncclCommInitRank failed: ..."), gloo, rendezvous.
    COMM: re.compile(
        r"NCCL (?:error|WARN)|nccl\w*Error|ncclInternalError|ncclSystemError|ncclRemoteError|"
        r"\bnccl[A-Z]\w* failed|HorovodInternalError|NCCL communicator was aborted|"
        r"connectFullMesh failed|"
        r"DistBackendError|DistNetworkError|Connection closed by peer|"
        r"Connection reset by peer|ProcessGroupGloo|ProcessGroupNCCL|"
        r"Watchdog caught collective operation timeout|"
        r"RendezvousTimeoutError|gloo.*(?:[Tt]imed out|[Tt]imeout)|Socket Timeout|"
        r"Timed out waiting .*(?:workers|peers|ranks)", re.I),
}


def _patterns() -> dict[str, re.Pattern[str]]:
    """Each class's pattern: the generic one and every registered scheduler's, in the
    order of CLASSES."""
    return _joined(tuple((cls.name, tuple(cls.logs.patterns.items()))
                         for cls in schedulers.classes()))


@lru_cache(maxsize=4)
def _joined(own: tuple[tuple[str, tuple[tuple[Failure, str], ...]], ...]
            ) -> dict[str, re.Pattern[str]]:
    joined: dict[str, re.Pattern[str]] = {}
    for failure in CLASSES:
        generic = _GENERIC.get(failure)
        parts = [f"(?i:{p})" for _, patterns in own for cls, p in patterns if cls == failure]
        if generic is not None:
            parts.insert(0, generic.pattern)
        if parts:
            joined[failure] = re.compile("|".join(parts), generic.flags if generic else 0)
    return joined


#: An MPI_ABORT is what an application calls after its own error: comm only when the
#: program said nothing else.
_MPI_ABORT = re.compile(r"MPI_ABORT|MPI_Abort")
#: bash's report of a child killed by SIGKILL ("line 12: 4242 Killed  python x.py").
_KILLED = re.compile(r"(?:^|\s)Killed(?:\s|$)")
SIGKILL_EXIT = 137


@dataclass(frozen=True)
class Diagnosis:
    """A failure class and the line (from a log, or the scheduler's words) behind it."""

    failure: str
    line: str


def _short(line: str, at: re.Match[str] | None = None) -> str:
    """A line fit to show, keeping what `at` matched: the segment of a progress-bar line
    (carriage returns) that holds it, cut from just before it when still too long."""
    if at is not None and "\r" in line:
        start = line.rfind("\r", 0, at.start()) + 1
        end = line.find("\r", at.end())
        line = line[start:end if end >= 0 else len(line)]
        at = None
    line = line.strip()
    if len(line) <= MAX_LINE:
        return line
    if at is not None and at.end() > MAX_LINE - 3:
        begin = max(0, at.start() - 40)
        return "..." + line[begin:begin + MAX_LINE - 6] + "..."
    return line[: MAX_LINE - 3] + "..."


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
    patterns = _patterns()  # once: it asks every registered scheduler
    for raw in program_lines(text):
        for cls, pattern in patterns.items():
            if cls not in found:
                match = pattern.search(raw)
                if match:
                    found[cls] = _short(raw, match)
    return found


def _from_reason(reason: str | None) -> str | None:
    """The class scalestudy's own reason decides (the local executor's time limit and
    Ctrl-C)."""
    text = reason or ""
    if _patterns()[WALLTIME].search(text):
        return WALLTIME
    if "interrupted by the user" in text or text.startswith("cancelled"):
        return CANCELLED
    return None


def classify(exit_code: int | None, scheduler_state: str | None, log_text: str,
             reason: str | None = None, stderr_text: str | None = None,
             scheduler_class: str | None = None) -> Diagnosis:
    """The class of a failed run from the class the scheduler's answer decided (its
    parser's), its exit code, scheduler state, reason and log text (`stderr_text`: the
    stderr part of it, where the program's own last words are looked for; all of it
    when not given)."""
    evidence = log_evidence(log_text)
    decided = scheduler_class or _from_reason(reason)
    if decided is not None:
        # A state word (NODE_FAIL) says it; a PBS letter (F) does not, its reason does.
        words = (scheduler_state if scheduler_state and len(scheduler_state) > 1 else None) \
            or reason or f"exit code {exit_code}"
        decided = Failure(decided).value
        return Diagnosis(decided, evidence.get(decided) or _short(f"scheduler: {words}"))
    for cls in CLASSES[:-1]:
        if cls in evidence:
            return Diagnosis(cls, evidence[cls])
    stderr_lines = program_lines(log_text if stderr_text is None else stderr_text)
    said = _last_match(stderr_lines, _ERROR_LIKE)
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
    killed = _last_match(program, _KILLED) if exit_code == SIGKILL_EXIT else None
    if killed is not None:
        return Diagnosis(OOM, _short(f"likely out of memory: killed by SIGKILL (exit code 137) "
                                     f"with nothing else logged, as the kernel's OOM killer "
                                     f"does: {killed}"))
    aborted = _last_match(log_text.splitlines(), _MPI_ABORT)
    told = said or _last_words(stderr_lines)
    if told is not None:
        return Diagnosis(UNKNOWN, told)
    if aborted is not None:  # MPI_ABORT, and the program said nothing of its own
        return Diagnosis(COMM, aborted)
    told = _root_cause(log_text)
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
#: Lines a launcher, MPI or the scheduler writes that are not the program's last words.
_NOISE = (r"^(?:mpirun|mpiexec|orterun|prterun|"
          r"\[mpiexec@|\[proxy:|Warning: Permanently added)\b|^-{10,}$|^MPI_ABORT|"
          r"^(?:with errorcode|NOTE: invoking MPI_ABORT|You may or may not see|exactly when)")


@lru_cache(maxsize=4)
def _noise(own: tuple[str, ...]) -> re.Pattern[str]:
    """_NOISE and the line starts of every scheduler's commands (`Scheduler.logs.noise`)."""
    return re.compile("|".join([_NOISE, *(f"^(?:{n})\\b" for n in own if n)]), re.I)
#: bash (the job script, or a `bash -c` command) could not find a program, file or directory.
_SHELL_NOT_FOUND = re.compile(
    r": command not found$|: line \d+: .*: No such file or directory$|"
    r"^(?:/\S*/)?(?:ba|da|z)?sh: .*: No such file or directory$")
_EXITCODE = re.compile(r"exitcode\s*:\s*(-?\d+)(?:.*\((SIG\w+)\))?")
_RANK = re.compile(r"rank\s*:\s*(\d+)")


def _last_match(lines: list[str], pattern: re.Pattern[str]) -> str | None:
    """The last line matching `pattern` (leading blanks ignored), shortened."""
    for raw in reversed(lines):
        match = pattern.search(raw.strip())
        if match:
            return _short(raw.strip(), match)
    return None


def _last_words(stderr_lines: list[str]) -> str | None:
    """What a program that raised nothing wrote last to stderr, past the launcher's and
    the scheduler's noise (with the line before, where the last one continues it)."""
    noise = _noise(tuple(cls.logs.noise for cls in schedulers.classes()))
    kept = [ln for ln in stderr_lines if ln.strip() and not noise.search(ln.strip())]
    if not kept:
        return None
    last = kept[-1]
    if last[:1].isspace() and len(kept) > 1:
        last = f"{kept[-2].strip()} | {last.strip()}"
    return _short(last)


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


def _tail(run_dir: Path, name: str, max_bytes: int = TAIL_BYTES) -> str:
    return tail_text(Path(run_dir) / name, lines=1 << 20, max_bytes=max_bytes)


def diagnose(run_dir: Path, exit_code: int | None, scheduler_state: str | None = None,
             reason: str | None = None, scheduler_class: str | None = None,
             scheduler_log: str | None = None) -> Diagnosis:
    """Classify the failed run in `run_dir` (reads only the tails of its logs, and of
    `scheduler_log`, the scheduler's own output file, where it differs)."""
    stderr = _tail(run_dir, LOGS[0])
    texts = [stderr, _tail(run_dir, LOGS[1])]
    if scheduler_log and scheduler_log not in LOGS:
        texts.append(_tail(run_dir, scheduler_log))
    return classify(exit_code, scheduler_state, "\n".join(texts), reason,
                    stderr_text=stderr, scheduler_class=scheduler_class)
