"""Preflight, the pure part: a study's jobs held against what its scheduler and this host
said (or its profile's queue limits where the scheduler could not be asked); one problem
a line, each with its fix. execute.preflight asks; this module judges."""

from __future__ import annotations

import sys

from scalestudy.site import joboptions, needs, queue_check
from scalestudy.site.plan import Plan, backend_module
from scalestudy.site.queue_check import (
    offline,
    profile_job_limit,
    profile_job_limits,
    profile_queue_limits,
)
from scalestudy.site.verdict import (
    ERROR,
    NOTE,
    WARNING,
    Facts,
    Preflight,
    Problem,
    PythonAnswer,
)

__all__ = ["ERROR", "NOTE", "WARNING", "Facts", "Preflight", "Problem", "PythonAnswer",
           "check", "offline", "profile_job_limit", "profile_job_limits", "profile_queue_limits",
           "python_request"]
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
    _found(out, needs.runtimes(plan, facts.runtimes, facts.host))
    _found(out, needs.images(plan, facts.images, facts.image_targets, facts.host))
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
    accounts = plan.scheduler.accounts
    if accounts is None or plan.scheduler.accounts_argv(facts.user) is None:
        out.checked.append(f"account {account} not checked ({plan.system.scheduler} keeps no "
                           "list of accounts to ask)")
        return
    if facts.accounts is None:
        out.add(NOTE, f"account {account} not checked: {facts.accounts_note or 'no answer'}")
        return
    line = plan.study.line_of(("job", "account"))
    sched = plan.scheduler
    queues = facts.accounts.get(account.lower())
    if queues is None:
        known = ", ".join(sorted(facts.accounts)) or "none"
        source = accounts.source or f"{plan.system.scheduler}'s account list"
        out.add(ERROR, f"{line}: account {account} is not one that user {facts.user} may "
                f"charge ({source} lists: {known}): set job.account to one of "
                f"them, or ask your centre to add {facts.user} to {account}; "
                f"{accounts.unknown}")
        return
    kind = sched.queue_key or "queue"
    for queue, _, _ in queue_check.routed(plan, facts):
        if "" not in queues and queue and queue not in queues:
            out.add(ERROR, f"{line}: account {account} may charge jobs in {kind}(s) "
                    f"{', '.join(sorted(queues))} only, not {queue}: set "
                    f"{joboptions.label(plan.study, sched, kind)} to one of them, or "
                    f"job.account to an account of that {kind}")
            return
    out.checked.append(f"account {account} known")


def _queues(plan: Plan, facts: Facts, out: Preflight) -> None:
    if facts.refused:
        out.add(ERROR, facts.refused)
        return
    answered = {} if facts.missing else facts.queues.queues
    kind = plan.scheduler.queue_key or "queue"
    if not answered:
        why = (f"{', '.join(facts.missing)} not on PATH on {facts.host}" if facts.missing
               else f"could not ask {plan.system.scheduler} for its {kind}s "
                    f"({'; '.join(facts.queue_errors) or 'no answer'})")
        fallback = (f"checked against profile {plan.system.name}'s limits instead"
                    if plan.system.scheduler_options.queues else "limits not checked")
        out.add(WARNING, f"{why}; {fallback}")
        queue_check.profile_queues(plan, facts, out)
    else:
        key = plan.scheduler.queue_key
        for name, where, runs in queue_check.routed(plan, facts):
            if not (name and key):
                continue
            limits = answered.get(name)
            if limits is None:
                listed = ", ".join(sorted(answered))
                out.add(ERROR, f"{where}: {kind} {name} does not exist "
                        f"({queue_check.answer_source(facts, kind)} lists {listed}): set "
                        f"{joboptions.label(plan.study, plan.scheduler, key)} to one of them")
            else:
                out.queue_limits = out.queue_limits or limits
                queue_check.check_limits(plan, facts, out, kind, key, where, limits,
                                         answered, runs)
    queue_check.check_pools(plan, facts, out)


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
