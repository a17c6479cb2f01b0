"""What a scheduler can do, as small frozen records: callers ask these, never names.

Each is one capability of `Scheduler` (site.schedulers), set as a class attribute: its
job's logs (`logs`), what of its commands' failures is worth another try (`retry`), the
accounts a user may charge (`accounts`), keeping a job off nodes (`exclusion`), what a
job sees inside (`in_job`) and packed allocations (`packing`). Where a scheduler lacks
one that is optional, the attribute is None; the others have defaults that say "nothing
of its own".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scalestudy.core.states import Failure

__all__ = ["Accounts", "Exclusion", "InJob", "JobLogs", "Packing", "Retry"]


@dataclass(frozen=True)
class JobLogs:
    """Where the scheduler writes its own report of a job (the job script's output), and
    what it writes there and into a job's stderr (execute.diagnose reads them)."""

    #: The file the job script's own output goes to, in the run directory.
    name: str = "stdout.log"
    #: The scheduler joins a job's stderr into that file.
    joins_output: bool = False
    #: What its daemons write into a job's logs, per failure class (regexes, matched
    #: ignoring case): execute.diagnose weighs them with the generic ones.
    patterns: Mapping[Failure, str] = field(default_factory=dict)
    #: Starts of the lines its commands write into a job's stderr, which are never the
    #: program's last words (a regex; "": none).
    noise: str = ""


@dataclass(frozen=True)
class Retry:
    """What its commands print when a failure is worth another try (regexes, matched
    ignoring case; "": nothing of its own): execute.commands tries them again."""

    #: The controller is busy or restarting: such a failed query is tried again.
    transient: str = ""
    #: A failed submission queued nothing (tried again).
    not_queued: str = ""
    #: A submission refused for a job number already taken: nothing was queued and the
    #: number is used up, so the next try, at once, gets the next one (OpenPBS after an
    #: unclean restart, whose counter is behind its job history).
    number_taken: str = ""


@dataclass(frozen=True)
class Accounts:
    """The scheduler keeps a list of the accounts a user may charge: preflight asks it
    (`Scheduler.accounts_argv`/`parse_accounts`) and words its finding with these. A
    scheduler without such a list has none (preflight does not check the account)."""

    #: The command whose answer `parse_accounts` reads, as preflight names it.
    source: str
    #: What the scheduler does with a job charged to an account the user may not charge.
    unknown: str = "the scheduler may refuse such jobs"


@dataclass(frozen=True)
class Exclusion:
    """The scheduler can keep a job off named nodes (`job.exclude_nodes`). One that
    cannot has none (`validate` refuses the key)."""

    #: None: it excludes them in its directives. Else it cannot, and names at submission
    #: the hosts a job may use instead: the argv listing the hosts, whose output
    #: `Scheduler.parse_hosts` reads and `Scheduler.on_hosts` turns into submit arguments.
    hosts_argv: tuple[str, ...] | None = None


@dataclass(frozen=True)
class InJob:
    """What a job sees inside: the scheduler's variables and files (the job template and
    the run's records read them)."""

    #: The file listing the job's hosts, as a shell expression (MPI launchers read it;
    #: None: there is none, and a launcher that needs one is refused).
    hostfile: str | None = None
    #: Shell that prints the job's hosts, one line per node in rank order (the job
    #: template's hosts block; None: the template lists them its own way).
    nodes_command: str | None = None
    #: The variable holding the job's id inside the job (None: none).
    job_id_variable: str | None = None
    #: Prefixes of the variables it sets in a job: each run's env.txt records them.
    env_prefixes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Packing:
    """What a scheduler offers a packed allocation (`run --pack`: several runs as the
    steps of one job; execute.packing). A scheduler that cannot pack has none."""

    #: Shell that prints the allocation's nodes, one line per node or per rank slot, into
    #: the node file the engine hands out.
    nodes_command: str
    #: `nodes_command` names each node once: a step's host file says `slots=N`.
    slots_lines: bool = False
    #: A job is a Flux instance of its own: the steps are Flux jobs in it, whatever
    #: engine the spec asks for.
    job_is_flux_instance: bool = False
    #: Shell words that start a Flux instance over the whole job, one broker per node,
    #: followed by its first program (the `flux` engine); None: the scheduler has no way
    #: here to start one.
    starts_flux: str | None = None
    #: What a step's launcher prints when the allocation it was to start in has just
    #: ended (a regex): the step never ran, so its run was interrupted, not failed.
    allocation_gone: str = ""
