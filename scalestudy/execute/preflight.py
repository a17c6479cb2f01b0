"""Preflight, the side effects: look for the scheduler's commands on PATH, ask it for
the user's accounts and its queues' limits (through execute.commands, so retries and
the study lock apply), and run the jobs' Python on this host; site.preflight judges."""

from __future__ import annotations

import getpass
import json
import os
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

from scalestudy.core.errors import SubmitError
from scalestudy.execute import images
from scalestudy.execute.commands import CommandRunner, run_command, run_retrying
from scalestudy.site import needs
from scalestudy.site import preflight as pf
from scalestudy.site.plan import Plan
from scalestudy.site.schedulers import Scheduler

#: How long the jobs' Python may take to import torch and the backends (a cold shared
#: filesystem on a login node takes tens of seconds).
PYTHON_TIMEOUT_S = 180.0
Which = Callable[[str], str | None]


def preflight(plan: Plan, python: bool = True, runner: CommandRunner = run_command,
              which: Which = shutil.which) -> pf.Preflight:
    """Ask, then judge: the problems that would make the study's jobs fail, wait or
    mismeasure, and what was found right. `python`: also run the jobs' Python here."""
    return pf.check(plan, facts(plan, python, runner, which))


def facts(plan: Plan, python: bool = True, runner: CommandRunner = run_command,
          which: Which = shutil.which) -> pf.Facts:
    """What this host and the scheduler say about the study's needs."""
    scheduler = plan.scheduler
    found = pf.Facts(user=_user(), host=socket.gethostname(), cores=os.cpu_count())
    if scheduler.queued:
        found.missing = [c for c in scheduler.needed_commands() if which(c) is None]
        if not found.missing:
            _accounts(scheduler, found, runner)
            _limits(scheduler, found, runner)
    if scheduler.queued:
        found.helpers = {name: which(name) for name in needs.helper_names(plan)}
    found.runtimes = {name: which(name) for name in needs.runtime_commands(plan)}
    for image, targets in needs.image_targets(plan).items():
        found.images[image] = images.kind(image)
        if found.images[image] == "directory":
            found.image_targets[image] = {t: Path(image, t.lstrip("/")).exists()
                                          for t in targets}
    request = pf.python_request(plan) if python else None
    if request is not None:
        found.python = ask_python(*request, host=found.host)
        found.venv_home = venv_home(request[0])
    return found


def venv_home(python: str) -> str | None:
    """The Python a venv's interpreter was built on (`home` in its pyvenv.cfg), or None
    for an interpreter that is no venv's."""
    cfg = Path(python).parent.parent / "pyvenv.cfg"
    try:
        text = cfg.read_text(encoding="utf-8")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            return value.strip()
    return None


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return os.environ.get("USER", "unknown")


def _said(argv: list[str], code: int, out: str, err: str) -> str:
    """`sacctmgr: exit 1: its first line`."""
    lines = [ln.strip() for ln in (err or out).splitlines() if ln.strip()]
    return f"{argv[0]}: exit {code}: {lines[0][:200] if lines else 'no output'}"


def _accounts(scheduler: Scheduler, found: pf.Facts, runner: CommandRunner) -> None:
    argv = None if scheduler.accounts is None else scheduler.accounts_argv(found.user)
    if argv is None:  # it keeps no list of accounts to ask
        return
    try:
        code, out, err = run_retrying(runner, argv)
    except SubmitError:
        found.accounts_note = (f"{argv[0]} is not on PATH on {found.host} (a cluster "
                               "without accounting): the scheduler checks it at submission")
        return
    found.accounts = scheduler.parse_accounts(code, out, err)
    if found.accounts is None:
        found.accounts_note = (f"{_said(argv, code, out, err)} (accounting could not be "
                               "asked): the scheduler checks it at submission")


def _limits(scheduler: Scheduler, found: pf.Facts, runner: CommandRunner) -> None:
    for argv in scheduler.limits_argvs():
        try:
            code, out, err = run_retrying(runner, argv)
        except SubmitError:
            found.queue_errors.append(f"{argv[0]}: not on PATH")
            continue
        answer = scheduler.parse_limits(argv, code, out, err)
        found.refused = found.refused or scheduler.refused(code, out, err)
        if answer is None:
            found.queue_errors.append(_said(argv, code, out, err))
        else:
            found.queues.merge(answer)


def ask_python(python: str, where: str, modules: list[str], host: str,
               timeout: float = PYTHON_TIMEOUT_S) -> pf.PythonAnswer:
    """Run the jobs' Python here: does it import torch and the backends' modules?"""
    try:
        done = subprocess.run([python, "-c", pf.PROBE, *modules], capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return pf.PythonAnswer(python, where, host, error="was not found")
    except PermissionError:
        return pf.PythonAnswer(python, where, host, error="is not executable")
    except subprocess.TimeoutExpired:
        return pf.PythonAnswer(python, where, host,
                               error=f"did not answer within {timeout:.0f} s")
    except OSError as exc:
        return pf.PythonAnswer(python, where, host, error=f"could not run: {exc}")
    for line in done.stdout.splitlines():
        if line.startswith(pf.MARK):
            try:
                return pf.PythonAnswer(python, where, host, record=json.loads(
                    line.removeprefix(pf.MARK)))
            except ValueError:
                break
    last = [ln for ln in done.stderr.splitlines() if ln.strip()][-1:] or ["no output"]
    return pf.PythonAnswer(python, where, host,
                           error=f"exited {done.returncode} without an answer: {last[0][:200]}")
