"""The one vocabulary of states: a run's state (what scalestudy records) and a job's
status (what a scheduler answers, mapped once by its parser).

Both are `str` enums, so they compare equal to their values and are written to
status.json, runs.csv, the journal and the report as plain words. docs/results-layout.md
documents them.
"""

from __future__ import annotations

from enum import Enum


class RunState(str, Enum):
    """Where a run stands. Each word has one meaning everywhere."""

    #: Never started: nothing was run or submitted (or an earlier attempt was archived).
    PENDING = "pending"
    #: Submitted to a scheduler, not running yet (or not listed by it yet).
    QUEUED = "queued"
    #: Running: its ranks were started (locally, or the scheduler says so).
    RUNNING = "running"
    #: Ended with a valid metrics record.
    COMPLETED = "completed"
    #: Ended without a valid record; `failure` says why (see execute.diagnose).
    FAILED = "failed"
    #: Stopped by the user (Ctrl-C) while it ran on this machine: not a failure, a plain
    #: `run` starts it again.
    INTERRUPTED = "interrupted"
    #: On a scheduler, held: it will not start until someone releases it (a user, system
    #: or operator hold; suspended; a dependency that can never be met). `reason` says
    #: which hold and what to do.
    HELD = "held"

    def __str__(self) -> str:
        return self.value

    @property
    def active(self) -> bool:
        """Queued, held or running on a scheduler: not to be started again."""
        return self in (RunState.QUEUED, RunState.RUNNING, RunState.HELD)

    @property
    def ended(self) -> bool:
        """Completed or failed: the run has its final status."""
        return self in (RunState.COMPLETED, RunState.FAILED)


#: Older words read from status.json files written by earlier versions.
_ALIASES = {"submitted": RunState.QUEUED}


def run_state(word: object) -> RunState | None:
    """The RunState a stored word names (None when it names none)."""
    if isinstance(word, RunState):
        return word
    if not isinstance(word, str):
        return None
    try:
        return RunState(word)
    except ValueError:
        return _ALIASES.get(word)


class JobStatus(str, Enum):
    """A job's status as a scheduler reports it, in scalestudy's words."""

    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    #: The site took the nodes back for another job (Slurm PREEMPTED): rerun, not a bug.
    PREEMPTED = "preempted"
    #: On hold (user, system or operator), suspended, or waiting on a dependency that can
    #: never be met: it does not start until someone acts.
    HELD = "held"
    #: Put back in the queue after it started (node failure, preemption by requeue, an
    #: admin's requeue): it will run again under the same job id.
    REQUEUED = "requeued"
    #: The scheduler no longer lists the job and it left no record.
    LOST = "lost"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value

    @property
    def done(self) -> bool:
        """The job has ended, whatever the outcome."""
        return self in (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED,
                        JobStatus.TIMEOUT, JobStatus.PREEMPTED, JobStatus.LOST)

    @property
    def run_state(self) -> RunState:
        """The run state of a job in this status (an ended job is settled separately)."""
        if self is JobStatus.RUNNING:
            return RunState.RUNNING
        if self is JobStatus.HELD:
            return RunState.HELD
        if self.done:
            return RunState.FAILED if self is not JobStatus.COMPLETED else RunState.COMPLETED
        return RunState.QUEUED


class Failure(str, Enum):
    """Why a failed run failed: one class per thing a user does next. The scheduler's
    parser decides a class where its own answer is decisive (execute.diagnose reads the
    logs otherwise); docs/scheduler-states.md maps every scheduler output to one."""

    #: A node died or its daemon was lost (Slurm NODE_FAIL/BOOT_FAIL, PBS -20): rerun.
    NODE_FAILURE = "node_failure"
    #: The job's walltime (or Slurm deadline) ran out: ask for more, or fewer iterations.
    WALLTIME = "walltime"
    #: The site took the nodes for another job: rerun; not a fault of the run.
    PREEMPTED = "preempted"
    #: The scheduler requeued the job and it did not run again (not rerunnable): rerun.
    REQUEUED = "requeued"
    #: Cancelled by a user or an administrator (scancel, qdel).
    CANCELLED = "cancelled"
    #: The launcher or the scheduler could not start the job or its ranks.
    SCHEDULER = "scheduler"
    #: Out of memory: the GPU's, or the host's (Slurm OUT_OF_MEMORY, PBS mem and vmem
    #: kills, a bare SIGKILL, "likely").
    OOM = "oom"
    #: Killed for another resource limit: cpu time (cput), cpus used (ncpus).
    RESOURCE_LIMIT = "resource_limit"
    IMPORT_ERROR = "import_error"
    NOT_FOUND = "not_found"
    BAD_ARGUMENTS = "bad_arguments"
    #: The communication between ranks broke (NCCL, gloo, MPI transport, rendezvous).
    COMM = "comm"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value
