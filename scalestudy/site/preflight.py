"""Preflight, the pure part: a study's jobs held against what its scheduler and this host
said (or its profile's queue limits where the scheduler could not be asked); one problem
a line, each with its fix. execute.preflight asks; this module judges."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from scalestudy.core.spec import walltime_seconds
from scalestudy.site import needs
from scalestudy.site.plan import Plan, backend_module
from scalestudy.site.queues import QueueAnswer, QueueLimits, hms

ERROR, WARNING, NOTE = needs.ERROR, needs.WARNING, "note"
#: What the Python probe prints before its JSON record.
MARK = "SCALESTUDY-PREFLIGHT "
#: The probe: imports torch and the modules named as arguments; prints one JSON line.
PROBE = r"""
import json, sys
out = {"version": sys.version.split()[0], "executable": sys.executable, "modules": {}}
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda"] = getattr(torch.version, "cuda", None)
    out["hip"] = getattr(torch.version, "hip", None)
except Exception as exc:
    out["torch_error"] = "%s: %s" % (type(exc).__name__, exc)
for name in sys.argv[1:]:
    try:
        __import__(name)
        out["modules"][name] = None
    except Exception as exc:
        out["modules"][name] = "%s: %s" % (type(exc).__name__, exc)
print("SCALESTUDY-PREFLIGHT " + json.dumps(out))
"""


@dataclass(frozen=True)
class Problem:
    """One thing that would make jobs fail, wait or mismeasure, with its fix."""

    severity: str  # error (stops `run`), warning, note
    text: str

    def line(self) -> str:
        """`preflight: error: ...`."""
        return f"preflight: {self.severity}: {self.text}"


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


@dataclass
class Preflight:
    """The problems found, and what was checked (the one line of a clean pass)."""

    problems: list[Problem] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    #: The most jobs of one user the study's queue takes at once, and where that is said
    #: (`run --max-jobs` defaults to it); None where no limit is known.
    job_limit: tuple[int, str] | None = None
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


def python_request(plan: Plan) -> tuple[str, str, list[str]] | None:
    """(the Python the jobs run, where it is named, the backend modules to import), or
    None for a `command` workload (its own program, nothing of ours to check)."""
    if not plan.study.workload.bundled:
        return None
    modules = [found[0] for b in plan.study.grid.backend if (found := backend_module(b))]
    if plan.study.job.python:
        return plan.study.job.python, plan.study.line_of(("job", "python")), modules
    if plan.system.python:
        return plan.system.python, f"profile {plan.system.name}: python", modules
    return sys.executable, "the Python running scalestudy", modules


def check(plan: Plan, facts: Facts) -> Preflight:
    """Every check whose facts are there: commands, account, queue and QOS limits,
    cores against ranks, the jobs' Python."""
    out = Preflight()
    if plan.scheduler.queued:
        _commands(plan, facts, out)
        _account(plan, facts, out)
        _queues(plan, facts, out)
    _cores(plan, facts, out)
    if plan.scheduler.queued:
        _found(out, needs.helpers(plan, facts.helpers, facts.host))
    if facts.python is not None:
        _python(plan, facts.python, out)
        if plan.scheduler.queued:
            answer = facts.python
            _found(out, needs.shared(plan, answer.python, answer.where, facts.host,
                                     facts.venv_home))
    return out


def _found(out: Preflight, found: needs.Found) -> None:
    problems, checked = found
    for severity, text in problems:
        out.add(severity, text)
    out.checked.extend(checked)


def _commands(plan: Plan, facts: Facts, out: Preflight) -> None:
    name = plan.system.scheduler
    if facts.missing:
        out.add(ERROR, f"{', '.join(facts.missing)}: not found on PATH on {facts.host}; "
                f"scalestudy submits and follows {name} jobs with them: run it on a login "
                f"node of the cluster (or load the module that provides them), or pick "
                f"another `system:` than {plan.system.name}")
    elif facts.queues.queues:
        out.checked.append(f"{name} answers")
    else:
        out.checked.append(f"{', '.join(plan.scheduler.needed_commands())} on PATH")


def _account(plan: Plan, facts: Facts, out: Preflight) -> None:
    account = plan.study.job.account
    if not account or facts.missing:
        return
    if plan.scheduler.accounts_argv(facts.user) is None:
        out.checked.append(f"account {account} not checked ({plan.system.scheduler} keeps no "
                           "list of accounts to ask)")
        return
    if facts.accounts is None:
        out.add(NOTE, f"account {account} not checked: {facts.accounts_note or 'no answer'}")
        return
    line = plan.study.line_of(("job", "account"))
    partitions = facts.accounts.get(account.lower())
    if partitions is None:
        known = ", ".join(sorted(facts.accounts)) or "none"
        out.add(ERROR, f"{line}: account {account} is not one that user {facts.user} may "
                f"charge (sacctmgr show assoc lists: {known}): set job.account to one of "
                f"them, or ask your centre to add {facts.user} to {account}; Slurm refuses "
                "such jobs where it enforces associations and charges your default account "
                "elsewhere")
        return
    queue = _queue_name(plan, facts)[0]
    if "" not in partitions and queue and queue not in partitions:
        out.add(ERROR, f"{line}: account {account} may charge jobs in partition(s) "
                f"{', '.join(sorted(partitions))} only, not {queue}: set job.partition to one "
                "of them, or job.account to an account of that partition")
        return
    out.checked.append(f"account {account} known")


def _queue_name(plan: Plan, facts: Facts) -> tuple[str | None, str]:
    """(the queue the jobs go to, where it is named): spec, profile, scheduler default."""
    key = plan.scheduler.queue_key
    if key is None:
        return None, ""
    named = getattr(plan.study.job, key)
    if named:
        return named, plan.study.line_of(("job", key))
    if plan.system.scheduler_options.queue:
        return (plan.system.scheduler_options.queue,
                f"profile {plan.system.name}: scheduler_options.queue")
    return facts.queues.default, f"the default {key} of {plan.system.scheduler}"


def _profile_limits(plan: Plan, name: str) -> QueueLimits | None:
    q = plan.system.scheduler_options.queues.get(name)
    if q is None:
        return None
    seconds = {k: walltime_seconds(v) if v else None
               for k, v in (("min", q.min_walltime), ("max", q.max_walltime))}
    source = f"profile {plan.system.name}, from the site's docs"
    return QueueLimits(
        name, source, q.min_nodes, q.max_nodes,
        min_walltime_s=seconds["min"], max_walltime_s=seconds["max"],
        walltime_by_nodes=tuple((n, walltime_seconds(t))
                                for n, t in sorted(q.walltime_by_nodes.items())),
        max_jobs=q.max_jobs_per_user, max_running=q.max_running_per_user,
        jobs_source=f"{source}: {q.limits_source}" if q.limits_source else None)


def profile_queue_limits(plan: Plan) -> QueueLimits | None:
    """The limits of the study's queue as its profile documents them (None: unknown)."""
    key = plan.scheduler.queue_key
    name = (getattr(plan.study.job, key) if key else None) or plan.system.scheduler_options.queue
    return _profile_limits(plan, name) if name else None


def profile_job_limit(plan: Plan) -> tuple[int, str] | None:
    """The per-user job limit of the study's queue as its profile documents it (what
    `run --max-jobs` defaults to when no preflight asked the scheduler)."""
    key = plan.scheduler.queue_key
    name = (getattr(plan.study.job, key) if key else None) or plan.system.scheduler_options.queue
    limits = _profile_limits(plan, name) if name else None
    if limits is None or not limits.max_jobs:
        return None
    return limits.max_jobs, (f"queue {name}'s per-user limit "
                             f"({limits.jobs_source or limits.source})")


def _queues(plan: Plan, facts: Facts, out: Preflight) -> None:
    if facts.missing:
        return
    if facts.refused:
        out.add(ERROR, facts.refused)
        return
    answered = facts.queues.queues
    key = plan.scheduler.queue_key
    kind = key or "queue"
    if not answered:
        errors = "; ".join(facts.queue_errors) or "no answer"
        fallback = (f"checked against profile {plan.system.name}'s limits instead"
                    if plan.system.scheduler_options.queues else "limits not checked")
        out.add(WARNING, f"could not ask {plan.system.scheduler} for its {kind}s ({errors}); "
                f"{fallback}")
    name, where = _queue_name(plan, facts)
    if name and key:
        limits = answered.get(name) if answered else _profile_limits(plan, name)
        if answered and limits is None:
            out.add(ERROR, f"{where}: {kind} {name} does not exist ({_source(facts, kind)} "
                    f"lists {', '.join(sorted(answered))}): set job.{key} to one of them")
        elif limits is not None:
            out.queue_limits = limits
            known = answered or {n: lim for n in plan.system.scheduler_options.queues
                                 if (lim := _profile_limits(plan, n))}
            _limits(plan, facts, out, kind, key, where, limits, known)
    qos = plan.study.job.qos or plan.system.scheduler_options.qos
    if qos and "qos" in plan.scheduler.job_options:
        where = (plan.study.line_of(("job", "qos")) if plan.study.job.qos
                 else f"profile {plan.system.name}: scheduler_options.qos")
        if facts.queues.qos:
            limits = facts.queues.qos.get(qos.lower())
            if limits is None:
                out.add(ERROR, f"{where}: QOS {qos} does not exist (sacctmgr show qos lists "
                        f"{', '.join(sorted(facts.queues.qos))}): set job.qos to one of them")
                return
        else:
            limits = _profile_limits(plan, qos)
        if limits is not None:
            _limits(plan, facts, out, "QOS", "qos", where, limits, {})


def _source(facts: Facts, kind: str) -> str:
    return next(iter(facts.queues.queues.values())).source if facts.queues.queues else kind


def _limits(plan: Plan, facts: Facts, out: Preflight, kind: str, key: str, where: str,
            limits: QueueLimits, known: dict[str, QueueLimits]) -> None:
    """The runs' node counts and walltime against one queue's (or QOS's) limits."""
    study, name, src = plan.study, limits.name, limits.source
    wall = walltime_seconds(study.job.walltime)
    counts = sorted({r.nodes for r in plan.runs})
    nodes_at = study.line_of(("grid", "nodes"))
    before = len(out.problems)

    def others(n: int) -> str:
        fits = sorted(q for q, lim in known.items() if q != name and lim.takes(n, wall))
        verb = "they take" if len(fits) > 1 else "it takes"
        return (f"set job.{key} to {' or '.join(fits)} ({verb} {n}-node jobs of "
                f"{study.job.walltime}) for those runs, or " if fits else "")

    if limits.closed:
        out.add(ERROR, f"{where}: {kind} {name} takes no jobs now ({limits.closed}, {src}): "
                f"its jobs would wait until it reopens; use another {kind}")
    high = min(x for x in (limits.max_nodes, limits.total_nodes) if x) if (
        limits.max_nodes or limits.total_nodes) else None
    for bad, bound, word in (
            ([n for n in counts if high and n > high], high, "at most"),
            ([n for n in counts if limits.min_nodes and n < limits.min_nodes],
             limits.min_nodes, "at least")):
        if bad:
            runs = sum(1 for r in plan.runs if r.nodes in bad)
            out.add(ERROR, f"{nodes_at}: {', '.join(map(str, bad))} node(s): {kind} {name} "
                    f"takes {word} {bound} nodes ({src}), so {runs} run(s) would be refused "
                    f"or wait for ever; {others(bad[0])}keep grid.nodes {word} {bound} (or "
                    "exclude those node counts)")
    over = [n for n in counts if (cap := limits.longest(n)) and wall > cap]
    if over:
        cap = min(limits.longest(n) or wall for n in over)
        instead = others(over[0]).removesuffix(", or ") or f"pick another {kind}"
        sizes = f" for {', '.join(map(str, over))} node(s)" if limits.walltime_by_nodes else ""
        out.add(ERROR, f"{study.line_of(('job', 'walltime'))}: {study.job.walltime} is longer "
                f"than {kind} {name} allows ({hms(cap)}{sizes}, {src}): the jobs would be "
                f"refused or never start; lower job.walltime to {hms(cap)}, or {instead}")
    if limits.min_walltime_s and wall < limits.min_walltime_s:
        out.add(ERROR, f"{study.line_of(('job', 'walltime'))}: {study.job.walltime} is "
                f"shorter than {kind} {name} accepts ({hms(limits.min_walltime_s)}, {src}): "
                f"raise job.walltime to {hms(limits.min_walltime_s)}")
    for what, allowed, value in (("account", limits.allow_accounts, study.job.account),
                                 ("QOS", limits.allow_qos, study.job.qos)):
        if allowed is not None and value and value.lower() not in allowed:
            out.add(ERROR, f"{where}: {kind} {name} admits the {what}s "
                    f"{', '.join(sorted(allowed))} only, not {value} ({src}): use one of "
                    f"them, or another {kind}")
    down = facts.queues.down_nodes.get(name)
    if down and limits.total_nodes:
        up = limits.total_nodes - down
        waiting = [n for n in counts if up < n <= limits.total_nodes]
        if waiting:
            out.add(WARNING, f"only {up} of the {limits.total_nodes} nodes of {kind} {name} "
                    f"take jobs now (sinfo: {down} down, drained or failing): the "
                    f"{', '.join(map(str, waiting))}-node runs wait until enough return")
    _job_limits(plan, out, kind, name, limits.jobs_source or src, limits)
    if len(out.problems) == before:
        out.checked.append(f"{kind} {name} takes {limits.describe()}"
                           + (f" ({src})" if src.startswith("profile ") else ""))


def _job_limits(plan: Plan, out: Preflight, kind: str, name: str, src: str,
                limits: QueueLimits) -> None:
    """One user's jobs at once in the queue: `run` keeps within it (its --max-jobs
    default), and what that means for the study's wall time."""
    most = limits.max_jobs or limits.max_running
    if not most:
        return
    if out.job_limit is None or most < out.job_limit[0]:
        out.job_limit = (most, f"{kind} {name}'s per-user limit ({src})")
    runs, running = len(plan.runs), limits.max_running or most
    if runs <= running:
        return
    wall = walltime_seconds(plan.study.job.walltime)
    rounds = -(-runs // running)
    out.add(WARNING, f"{kind} {name} lets one user have {most} job(s) in it at once"
            + (f", {running} running" if limits.max_running and limits.max_running < most
               else "") + f" ({src}): `run` keeps at most {most} of the study's {runs} jobs "
            f"there (its --max-jobs default), so they run {running} at a time: at least "
            f"{rounds} × {plan.study.job.walltime} = {hms(rounds * wall)} of walltime-long "
            "runs one after another, plus the queue waits; use a queue that takes more jobs "
            "per user, or fewer runs (--only)")


def _cores(plan: Plan, facts: Facts, out: Preflight) -> None:
    """Ranks against cores: on this host (a local system), or per node where the profile
    says a node's cores."""
    one_host = plan.scheduler.one_host
    cores = plan.system.cores_per_node or (facts.cores if one_host else None)
    if not cores:
        return
    threads = plan.system.threads_per_rank or 1
    per_host = {r.run_id: (r.world_size if one_host else r.ranks_per_node) for r in plan.runs}
    most = max(per_host.values())
    over = sorted({r.world_size if one_host else r.ranks_per_node for r in plan.runs
                   if per_host[r.run_id] * threads > cores})
    host = "this host" if one_host else f"a {plan.system.name} node"
    what = "world_size" if one_host else "ranks_per_node"
    if not over:
        out.checked.append(f"at most {most} rank(s) on {host}'s {cores} cores")
        return
    runs = sum(1 for r in plan.runs if per_host[r.run_id] * threads > cores)
    out.add(WARNING, f"{runs} run(s) put more ranks on {host} than its {cores} cores "
            f"({what} {', '.join(map(str, over))}"
            + (f", {threads} threads each" if threads > 1 else "")
            + "): ranks share cores, so compute slows and efficiency understates how "
            f"communication scales; keep {what} at most {max(1, cores // threads)} for clean "
            "numbers (the report flags such points `oversubscribed`)")


def _python(plan: Plan, answer: PythonAnswer, out: Preflight) -> None:
    here = f"checked on this host, {answer.host}; the compute nodes run it after the setup lines"
    who = f"{answer.python} ({answer.where})"
    if answer.error or answer.record is None:
        out.add(ERROR, f"{who} {answer.error or 'printed no answer'} ({here}): set "
                "job.python (or the profile's `python:`) to an interpreter that has torch, "
                "or install torch in it")
        return
    rec = answer.record
    if rec.get("torch_error"):
        out.add(ERROR, f"{who} cannot import torch ({rec['torch_error']}; {here}): install "
                "torch in it (pip install torch), or set job.python (or the profile's "
                "`python:`) to an interpreter that has it")
        return
    bad = False
    for backend in plan.study.grid.backend:
        found = backend_module(backend)
        error = rec.get("modules", {}).get(found[0]) if found else None
        if found and error:
            bad = True
            out.add(ERROR, f"{plan.study.line_of(('grid', 'backend'))}: backend {backend} "
                    f"needs {found[0]}, which {who} cannot import ({error}; {here}): "
                    f"{found[1]}, or remove {backend} from grid.backend")
    build = f"CUDA {rec['cuda']}" if rec.get("cuda") else (
        f"ROCm {rec['hip']}" if rec.get("hip") else "CPU-only")
    if plan.system.gpus_per_node and build == "CPU-only" and plan.system.gpu_api == "cuda":
        out.add(ERROR, f"{who} has torch {rec['torch']}, a CPU-only build ({here}), but system "
                f"{plan.system.name} has {plan.system.gpus_per_node} GPUs per node and every "
                "run of the benchmark asks for one (--device cuda): install a CUDA or ROCm "
                "build of torch there, or set job.python (or the profile's `python:`) to "
                "one that has it")
        return
    if not bad:
        out.checked.append(f"{answer.python} imports torch {rec['torch']} ({build}) on this "
                           f"host, {answer.host}")
