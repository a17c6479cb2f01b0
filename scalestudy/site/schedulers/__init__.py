"""Schedulers: how a job is queued, as one protocol; pure functions over strings.

A scheduler renders its directive header, names its job template, declares its own
`job:` options (`options`, a model: the spec's `job.<name>:` section), builds the argv
to submit, query and cancel, and parses what those commands print. It never runs a
process (scalestudy.execute.commands does). How ranks start is the launcher's business
(site.launchers); the two meet in the template.

To add a scheduler: one module with a `Scheduler` subclass, named in the entry-point
group `scalestudy.schedulers` of its package (or decorated `@register`), and its job
template's blocks. A template extends templates/_job.sh.j2, the script every
scheduler shares, and fills what differs (submit hint, output, hosts, rendezvous port):
as a file, templates/<name>.sh.j2, or as the class's `template_source`, so that a
scheduler kept outside the package (tests/nohup_scheduler.py) is one module. What it can
do it says in small capability objects (capabilities.py, re-exported here), set as class
attributes: `logs = JobLogs(...)`, `retry = Retry(...)`, `accounts = Accounts(...)`,
`exclusion = Exclusion(...)`, `in_job = InJob(...)`, `packing = Packing(...)`; one it
leaves out keeps the base's (None where the capability is optional). Callers ask
capabilities, never names.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict

from scalestudy.core import plugins
from scalestudy.core.errors import ScalestudyError, SubmitError
from scalestudy.core.spec import TOKEN_PATTERN
from scalestudy.core.states import Failure, JobStatus
from scalestudy.site.queues import QueueAnswer
from scalestudy.site.schedulers.capabilities import (
    Accounts,
    Exclusion,
    InJob,
    JobLogs,
    Packing,
    Retry,
)

__all__ = ["Accounts", "Exclusion", "Failure", "InJob", "JobLogs", "JobRequest", "JobState",
           "JobStatus", "Options", "Packing", "Retry", "Scheduler", "SubmitError",
           "check_token", "classes", "env_prefixes", "get", "names", "options_of",
           "register", "template_source"]


class Options(BaseModel):
    """Base of a scheduler's own `job:` options (the spec's `job.<scheduler>:` section,
    over the profile's `scheduler_options` of the same names): strict, unknown keys are
    errors, every field says what it asks in its description. This one has none."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


OptionsT = TypeVar("OptionsT", bound=Options)


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
    #: The queue (or partition) this run goes to, routed (site.routing) from the one or
    #: several its options name.
    queue: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    #: The scheduler's own options (an instance of its `options`; None: all defaults).
    options: Options | None = None
    extra: tuple[str, ...] = ()
    exclude_nodes: tuple[str, ...] = ()  # nodes the job must not run on


@dataclass(frozen=True)
class JobState:
    """A job's status as scalestudy names it, with the scheduler's own words kept."""

    job_id: str
    state: JobStatus
    raw: str
    exit_code: int | None = None
    reason: str | None = None
    #: The job's energy (J) and elapsed time (s) from the scheduler's accounting, where
    #: the site measures energy (Slurm: ConsumedEnergyRaw); None elsewhere.
    energy_j: float | None = None
    elapsed_s: float | None = None
    #: The failure class the scheduler's own answer decides (its state or exit status
    #: says memory, walltime, node failure, preemption, ...); None: the logs decide.
    failure: Failure | None = None
    #: The exit code is 128 + the signal that killed the job's shell (Slurm's `0:N`),
    #: not the program's: the run's own exit_code file, where written, says more.
    signalled: bool = False

    @property
    def done(self) -> bool:
        """The job has ended (whatever the outcome)."""
        return self.state.done


# Directive values are written into `#SBATCH`/`#PBS` lines, where no shell quoting
# applies: they must be plain tokens.
_TOKEN = re.compile(TOKEN_PATTERN)


def check_token(what: str, value: str) -> str:
    """A directive value, or an error saying why it cannot be written safely."""
    if not _TOKEN.match(value):
        raise ScalestudyError(
            f"{what}: {value!r} cannot go into a job directive: use letters, digits and "
            "_ . , : @ % + = / & | ! ( ) * [ ] - only (no spaces, quotes or newlines)"
        )
    return value


class Scheduler:
    """Base of the scheduler backends; subclasses register themselves by `name`.

    Its kind and capabilities are class attributes (the capabilities as small frozen
    records), so callers ask what a scheduler can do instead of which one it is. Queue
    commands exist only where `queued` is true.
    """

    name: ClassVar[str] = ""
    #: What starts a directive line (`#SBATCH`, `#PBS`).
    prefix: ClassVar[str] = ""
    #: Jobs wait in a queue and have ids (false: runs execute directly on this host).
    queued: ClassVar[bool] = True
    #: Every "node" of a run is this same host (its cores are shared by all ranks).
    one_host: ClassVar[bool] = False
    #: The job template's name: in templates/ (or a study's own template_dir), or the
    #: class's `template_source`.
    template: ClassVar[str] = ""
    #: The job template's text (its blocks, extending "_job.sh.j2"); None: the file.
    template_source: ClassVar[str | None] = None
    #: Its own `job:` options: the model of the spec's `job.<name>:` section (strict,
    #: extra="forbid", a description on each field). A field named as one of the old
    #: flat keys (core.spec.LEGACY_KEYS: job.qos, ...) also reads that key.
    options: ClassVar[type[Options]] = Options
    #: The field of `options` that names the queue (`partition` on Slurm, `queue` on PBS).
    queue_key: ClassVar[str | None] = None
    #: Another field of `options` that names a pool with limits of its own, which
    #: preflight holds a study against like a queue, and its word in messages (Slurm's
    #: ("qos", "QOS")); the limits answer (`parse_limits`) lists the pools.
    limited_option: ClassVar[tuple[str, str] | None] = None
    #: Its settings that are facts of a site, not a job's request (a model like
    #: `options`): keys of a profile's `scheduler_options`, beside `options`' defaults.
    site_options: ClassVar[type[Options]] = Options
    #: The starters of site.launchers that start ranks in its jobs (a profile's
    #: `launcher`, or torchrun's `torchrun_via`): a profile naming another is refused as
    #: it loads. None: any (a starter from a plugin is not checked against it).
    launchers: ClassVar[frozenset[str] | None] = None
    #: Whether submitit can submit to it (`job: {submit: submitit}`).
    submitit: ClassVar[bool] = False
    # What it can do, as capability objects (site.schedulers.capabilities); an optional
    # one it lacks is None.
    #: Where its own report of a job goes, and what it writes into a job's logs.
    logs: ClassVar[JobLogs] = JobLogs()
    #: What its commands print when a failure is worth another try.
    retry: ClassVar[Retry] = Retry()
    #: The list of accounts a user may charge, as preflight words it; None: it keeps none.
    accounts: ClassVar[Accounts | None] = None
    #: How it keeps a job off named nodes (`job.exclude_nodes`); None: it cannot.
    exclusion: ClassVar[Exclusion | None] = None
    #: What a job sees inside (host file, host list, its id, its variables).
    in_job: ClassVar[InJob] = InJob()
    #: What it offers a packed allocation (`run --pack`); None: it cannot pack.
    packing: ClassVar[Packing | None] = None

    def misnamed_queue(self, site: Options, name: str) -> str | None:
        """Why `name`, given as the queue, is something else at this site (`site`: its
        `site_options`), and how to write it; None: it may be a queue."""
        return None

    def directives(self, job: JobRequest) -> list[str]:
        """The directive lines of the job script's header."""
        raise NotImplementedError

    def submit_argv(self, script: str, extra: Sequence[str] | None = None) -> list[str]:
        """argv that submits a script file (`extra`: the profile's submit arguments;
        None: the scheduler's own default)."""
        raise NotImplementedError

    def parse_hosts(self, stdout: str) -> list[str]:
        """The hosts that can take a job now, from `exclusion.hosts_argv`'s output, in the
        order to use them (free ones first)."""
        raise NotImplementedError

    def on_hosts(self, job: JobRequest, hosts: Sequence[str]) -> list[str]:
        """Submit arguments that put `job` on exactly `hosts` (one per node)."""
        raise NotImplementedError

    def parse_submit(self, exit_code: int, stdout: str, stderr: str) -> str:
        """The job id from the submit command's output, or SubmitError."""
        raise NotImplementedError

    def query_argvs(self, job_ids: Sequence[str]) -> list[list[str]]:
        """argv of the state query for many jobs at once, best first (fallbacks after)."""
        raise NotImplementedError

    def parse_states(self, argv: Sequence[str], exit_code: int, stdout: str,
                     stderr: str) -> dict[str, JobState]:
        """Job id -> state from one query's output (jobs it does not mention are absent);
        SubmitError when the output is not an answer (the next query form is tried)."""
        raise NotImplementedError

    def live_argv(self, job_ids: Sequence[str]) -> list[str] | None:
        """argv asking the live queue about jobs the first answer says are waiting, where
        that answer cannot tell a hold (None: it can)."""
        return None

    def cancel_argv(self, job_ids: Sequence[str]) -> list[str]:
        """argv that cancels jobs."""
        raise NotImplementedError

    def refused(self, exit_code: int, stdout: str, stderr: str) -> str | None:
        """Why the scheduler refuses this user outright (nothing they submit could
        run), from a failed query; None: it did not say so."""
        return None

    def cancel_failed(self, exit_code: int, stdout: str, stderr: str) -> str | None:
        """Why a cancel command failed, or None when every job is cancelled or had ended
        already (cancelling a finished job is not an error)."""
        return None if exit_code == 0 else (stderr or stdout).strip() or f"exit {exit_code}"

    def find_argvs(self, names: Sequence[str]) -> list[list[str]]:
        """argvs listing the jobs (queued, running or ended) with these names; every one
        that answers is read (a just-queued job may be missing from accounting)."""
        raise NotImplementedError

    def parse_found(self, argv: Sequence[str], stdout: str) -> dict[str, set[str]]:
        """Job name -> the job ids one `find_argvs` command listed."""
        raise NotImplementedError

    @staticmethod
    def short_id(job_id: str) -> str:
        """The part of a job id every command of this scheduler agrees on."""
        return job_id.split(".")[0]

    def needed_commands(self) -> tuple[str, ...]:
        """The commands submitting, tracking and cancelling run (preflight looks for them)."""
        return ()

    def estimate_argv(self, job: JobRequest) -> list[str] | None:
        """A command that asks the scheduler when a job of this shape would start if
        submitted now, without queueing it (None: it has none)."""
        return None

    def parse_estimate(self, exit_code: int, stdout: str, stderr: str) -> str | None:
        """The start time the estimate command gives (ISO 8601, the scheduler's local
        time), or None where it gives none."""
        return None

    def accounts_argv(self, user: str) -> list[str] | None:
        """argv listing the accounts `user` may charge; None where the scheduler keeps no
        such list (preflight then does not check the account)."""
        return None

    def parse_accounts(self, exit_code: int, stdout: str, stderr: str
                       ) -> dict[str, set[str]] | None:
        """Account (lower case) -> the queues it is limited to ("" = any); None when the
        answer says accounting is not there to ask."""
        return None

    def limits_argvs(self) -> list[list[str]]:
        """argvs whose answers give the queues' limits and the default queue (each one that
        answers is read)."""
        return []

    def parse_limits(self, argv: Sequence[str], exit_code: int, stdout: str,
                     stderr: str) -> QueueAnswer | None:
        """What one `limits_argvs` command said; None when it did not answer."""
        return None


_REGISTRY: dict[str, type[Scheduler]] = {}
_INSTANCES: dict[type[Scheduler], Scheduler] = {}
_LOADED: list[bool] = []  # the shipped backends are imported (once)


def register(cls: type[Scheduler]) -> type[Scheduler]:
    """Class decorator: make a scheduler available by its name (once)."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    if cls.name in _REGISTRY:
        raise ValueError(f"scheduler {cls.name!r} is registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def get(name: str) -> Scheduler:
    """The scheduler called `name` (one instance per class: a scheduler holds no state);
    the error lists the valid ones."""
    _load_backends()
    try:
        cls = _REGISTRY[name]
    except KeyError:
        raise ScalestudyError(
            f"unknown scheduler {name!r}; valid schedulers: {', '.join(sorted(_REGISTRY))}"
        ) from None
    made = _INSTANCES.get(cls)
    if made is None:
        made = _INSTANCES[cls] = cls()
    return made


def template_source(template: str) -> str | None:
    """The text of the job template a registered scheduler carries itself, by its name
    (None: no scheduler does; the template is a file)."""
    _load_backends()
    return next((cls.template_source for cls in _REGISTRY.values()
                 if cls.template == template and cls.template_source), None)


def env_prefixes() -> tuple[str, ...]:
    """The variable prefixes of every registered scheduler, by scheduler name."""
    return tuple(p for cls in classes() for p in cls.in_job.env_prefixes)


def options_of(job: JobRequest, model: type[OptionsT]) -> OptionsT:
    """A request's options as `model` (its defaults where the request carries none)."""
    return job.options if isinstance(job.options, model) else model()


def classes() -> list[type[Scheduler]]:
    """Every registered scheduler class, by name (what callers ask of them all)."""
    _load_backends()
    return [_REGISTRY[name] for name in sorted(_REGISTRY)]


def names() -> list[str]:
    """Registered scheduler names."""
    _load_backends()
    return sorted(_REGISTRY)


#: The entry-point group schedulers load from (pyproject.toml names the built-ins there).
GROUP = "scalestudy.schedulers"
#: The built-ins, imported directly where no package metadata says so (a source tree on
#: PYTHONPATH, not installed).
_BUILT_IN = ("flux", "local", "pbs", "slurm")


def _load_backends() -> None:
    """Register every scheduler the entry-point group names (once): a built-in registers
    itself as its module loads; a third-party class is registered here. One that fails
    to load is an error naming its package, never a silent absence."""
    if _LOADED:
        return
    for module in _BUILT_IN:  # always there, installed or not
        importlib.import_module(f"{__name__}.{module}")
    for name, cls, where, dist in plugins.loaded(GROUP, "scheduler"):
        if not (isinstance(cls, type) and issubclass(cls, Scheduler)):
            raise ScalestudyError(f"{where} is not a Scheduler subclass")
        if cls.name != name:
            raise ScalestudyError(f"{where} calls itself {cls.name!r}: the entry point's "
                                  "name must be the scheduler's")
        if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
            taken = _REGISTRY[cls.name]
            raise ScalestudyError(f"{where} takes the name of {taken.__module__}."
                                  f"{taken.__name__}: uninstall one of them ({dist})")
        _REGISTRY[cls.name] = cls
    _LOADED.append(True)
