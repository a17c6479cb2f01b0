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

    def __str__(self) -> str:
        return self.value

    @property
    def active(self) -> bool:
        """Queued or running on a scheduler: not to be started again."""
        return self in (RunState.QUEUED, RunState.RUNNING)

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
    #: The scheduler no longer lists the job and it left no record.
    LOST = "lost"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value

    @property
    def done(self) -> bool:
        """The job has ended, whatever the outcome."""
        return self in (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED,
                        JobStatus.TIMEOUT, JobStatus.LOST)

    @property
    def run_state(self) -> RunState:
        """The run state of a job in this status (an ended job is settled separately)."""
        if self is JobStatus.RUNNING:
            return RunState.RUNNING
        if self.done:
            return RunState.FAILED if self is not JobStatus.COMPLETED else RunState.COMPLETED
        return RunState.QUEUED
