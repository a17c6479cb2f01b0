"""What a preflight judges and finds: the facts asked on this host, and the problems
(one line each, with its fix) and checks it reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scalestudy.site import needs
from scalestudy.site.queues import QueueAnswer, QueueLimits

ERROR, WARNING, NOTE = needs.ERROR, needs.WARNING, "note"


@dataclass(frozen=True)
class Problem:
    """One thing that would make jobs fail, wait or mismeasure, with its fix."""

    severity: str  # error (stops `run`), warning, note
    text: str

    def line(self, what: str = "preflight") -> str:
        """`preflight: error: ...` (`what`: the check that found it)."""
        return f"{what}: {self.severity}: {self.text}"


@dataclass(frozen=True)
class PythonAnswer:
    """What the jobs' Python said when run on this host (or why it could not)."""

    python: str
    where: str  # where that interpreter was named
    host: str
    record: dict[str, Any] | None = None
    error: str | None = None


@dataclass
class Facts:
    """What execute.preflight found out on this host."""

    user: str
    host: str
    missing: list[str] = field(default_factory=list)  # needed commands not on PATH
    accounts: dict[str, set[str]] | None = None
    accounts_note: str | None = None  # why the accounts are unknown, when asked
    queues: QueueAnswer = field(default_factory=QueueAnswer)
    queue_errors: list[str] = field(default_factory=list)
    #: the scheduler refuses this user outright (another user's Flux instance)
    refused: str | None = None
    python: PythonAnswer | None = None
    cores: int | None = None  # this host's, for a system whose ranks run here
    #: the commands the job script calls by name -> where this host's PATH finds them
    helpers: dict[str, str | None] = field(default_factory=dict)
    #: the `home` of the jobs' Python's venv (pyvenv.cfg): the Python it was built on
    venv_home: str | None = None
    #: the container runtimes' commands -> where this host's PATH finds them
    runtimes: dict[str, str | None] = field(default_factory=dict)
    #: each container image -> what this host sees there: "file", "directory", "missing"
    #: or "reference" (a registry's, not looked up); and a directory image's bind targets
    #: -> whether each exists inside it
    images: dict[str, str] = field(default_factory=dict)
    image_targets: dict[str, dict[str, bool]] = field(default_factory=dict)


@dataclass
class Preflight:
    """The problems found, and what was checked (the one line of a clean pass)."""

    problems: list[Problem] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    #: The most jobs of one user the study's queue takes at once, and where that is said
    #: (`run --max-jobs` defaults to it); None where no limit is known.
    job_limit: tuple[int, str] | None = None
    #: Each queue's per-user job limit (queue -> (limit, where it is said)): what `run`
    #: keeps each queue's jobs within.
    job_limits: dict[str, tuple[int, str]] = field(default_factory=dict)
    #: The limits of the queue the jobs go to (the scheduler's answer, else the
    #: profile's); what `run --pack` splits a study by. None: not known.
    queue_limits: QueueLimits | None = None

    @property
    def errors(self) -> list[Problem]:
        """The problems that make jobs fail or wait for ever."""
        return [p for p in self.problems if p.severity == ERROR]

    def add(self, severity: str, text: str) -> None:
        """Record a problem."""
        self.problems.append(Problem(severity, text))

    def ok_line(self) -> str:
        """`preflight: ok: ...` (what was checked and found right)."""
        return "preflight: ok: " + ("; ".join(self.checked) or "nothing to check")
