"""Schedulers: how a job is queued. Pure functions over strings, registered by name.

A scheduler renders its directive header, builds the argv to submit, query and
cancel, and parses what those commands print. It never runs a process: that is
`scalestudy.submit`'s job. How ranks start is the launcher's business
(`scalestudy.launchers`); the two meet in the job template.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from scalestudy.errors import ScalestudyError


class SubmitError(ScalestudyError):
    """A scheduler command failed or printed something we cannot read."""

    exit_code = 1


@dataclass(frozen=True)
class JobRequest:
    """What one run asks of the scheduler (already merged: profile defaults + spec)."""

    name: str
    nodes: int
    ranks_per_node: int
    walltime: str
    gpus_per_node: int = 0
    cpus_per_task: int | None = None
    cores_per_node: int | None = None
    account: str | None = None
    queue: str | None = None  # PBS -q / Slurm -p (partition)
    qos: str | None = None
    constraint: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    gpus_directive: str = "gpus-per-node"
    select_terms: dict[str, str] = field(default_factory=dict)
    place: str | None = None
    filesystems: str | None = None
    extra: tuple[str, ...] = ()


# Terminal states end a job; the others may still change.
PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, UNKNOWN = (
    "pending", "running", "completed", "failed", "cancelled", "timeout", "unknown")
TERMINAL = frozenset({COMPLETED, FAILED, CANCELLED, TIMEOUT})


@dataclass(frozen=True)
class JobState:
    """A job's state as scalestudy names it, with the scheduler's own words kept."""

    job_id: str
    state: str
    raw: str
    exit_code: int | None = None
    reason: str | None = None

    @property
    def done(self) -> bool:
        """The job has ended (whatever the outcome)."""
        return self.state in TERMINAL


# Directive values are written into `#SBATCH`/`#PBS` lines, where no shell quoting
# applies: they must be plain tokens.
_TOKEN = re.compile(r"^[A-Za-z0-9_.,:@%+=/&|!()*\[\]-]+$")


def check_token(what: str, value: str) -> str:
    """A directive value, or SubmitError saying why it cannot be written safely."""
    if not _TOKEN.match(value):
        raise ScalestudyError(
            f"{what}: {value!r} cannot go into a job directive: use letters, digits and "
            "_ . , : @ % + = / & | ! ( ) * [ ] - only (no spaces, quotes or newlines)"
        )
    return value


class Scheduler:
    """Base of the scheduler backends; subclasses register themselves by `name`."""

    name: ClassVar[str] = ""
    prefix: ClassVar[str] = ""  # "#SBATCH", "#PBS"

    def directives(self, job: JobRequest) -> list[str]:
        """The directive lines of the job script's header."""
        raise NotImplementedError

    def submit_argv(self, script: str) -> list[str]:
        """argv that submits a script file."""
        raise NotImplementedError

    def parse_submit(self, exit_code: int, stdout: str, stderr: str) -> str:
        """The job id from the submit command's output, or SubmitError."""
        raise NotImplementedError

    def query_argvs(self, job_ids: Sequence[str]) -> list[list[str]]:
        """argv of the state query for many jobs at once, best first (fallbacks after)."""
        raise NotImplementedError

    def parse_states(self, argv: Sequence[str], stdout: str) -> dict[str, JobState]:
        """Job id -> state from one query's output (jobs it does not mention are absent)."""
        raise NotImplementedError

    def cancel_argv(self, job_ids: Sequence[str]) -> list[str]:
        """argv that cancels jobs."""
        raise NotImplementedError

    def find_argvs(self, names: Sequence[str]) -> list[list[str]]:
        """argvs listing the jobs (queued, running or ended) with these names; every one
        that answers is read (a just-queued job may be missing from accounting)."""
        raise NotImplementedError

    def parse_found(self, argv: Sequence[str], stdout: str) -> dict[str, set[str]]:
        """Job name -> the job ids one `find_argvs` command listed."""
        raise NotImplementedError


_REGISTRY: dict[str, type[Scheduler]] = {}


def register(cls: type[Scheduler]) -> type[Scheduler]:
    """Class decorator: make a scheduler available by its name (once)."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    if cls.name in _REGISTRY:
        raise ValueError(f"scheduler {cls.name!r} is registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def get(name: str) -> Scheduler:
    """The scheduler called `name`; the error lists the valid ones."""
    _load_backends()
    try:
        return _REGISTRY[name]()
    except KeyError:
        raise ScalestudyError(
            f"unknown scheduler {name!r}; valid schedulers: {', '.join(sorted(_REGISTRY))}"
        ) from None


def names() -> list[str]:
    """Registered scheduler names."""
    _load_backends()
    return sorted(_REGISTRY)


def _load_backends() -> None:
    from scalestudy.schedulers import local, pbs, slurm  # noqa: F401  (they register)
