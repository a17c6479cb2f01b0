"""The one place that runs scheduler commands (sbatch, qsub, sacct, qstat, scancel, qdel),
with retries for transient failures; the study lock is passed on to each of them.

Both submission paths (the rendered script and submitit's) submit through `submit`,
so they share these guarantees.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path

from scalestudy.core.errors import SubmitError
from scalestudy.core.states import JobStatus
from scalestudy.execute.workspace import HELD_LOCKS
from scalestudy.site import schedulers
from scalestudy.site.schedulers import JobRequest, JobState, Scheduler

# (argv, cwd=None) -> (exit code, stdout, stderr). Tests may pass a recording fake here.
CommandRunner = Callable[..., tuple[int, str, str]]
TIMEOUT_S = 120.0


def run_command(argv: Sequence[str], cwd: Path | None = None) -> tuple[int, str, str]:
    """Run a scheduler command; a missing command is a SubmitError that names it."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=TIMEOUT_S,
                              stdin=subprocess.DEVNULL, cwd=cwd,
                              pass_fds=tuple(sorted(HELD_LOCKS)))
    except FileNotFoundError:
        raise SubmitError(
            f"{argv[0]}: command not found. Run scalestudy where the scheduler's commands "
            "are on PATH (a login node), or pick another `system:`"
        ) from None
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]} did not answer within {TIMEOUT_S:.0f} s"
    return done.returncode, done.stdout, done.stderr


# What a busy or restarting controller says, in any scheduler's words (each adds its
# own, `Scheduler.retry.transient`); such failures are worth another try. "did not answer":
# run_command's own timeout.
TRANSIENT = r"timed out|temporarily unable|try again|unable to contact|connection refused|" \
    r"communication|did not answer"
# A submission is tried again only when nothing can have been queued (each scheduler
# adds its own words, `Scheduler.retry.not_queued`): a timeout after sending may have queued
# the job, and a second sbatch would run it twice.
NOT_QUEUED = r"temporarily unable|unable to contact|connection refused"
RETRY_DELAYS_S = (1.0, 3.0, 9.0)
#: How many refusals for a job number already taken a submission goes past: OpenPBS
#: saves its counter every 1000 jobs, so an unclean restart puts it at most that far back.
NUMBERS_TAKEN_TRIES = 1000


def _joined(generic: str, attr: str) -> re.Pattern[str]:
    """`generic` and every registered scheduler's own words (its `retry.<attr>`), ignoring
    case."""
    return _compiled(generic, tuple(getattr(cls.retry, attr) for cls in schedulers.classes()))


@lru_cache(maxsize=8)
def _compiled(generic: str, words: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join([generic, *filter(None, words)]), re.I)


def _transient() -> re.Pattern[str]:
    return _joined(TRANSIENT, "transient")


def _not_queued() -> re.Pattern[str]:
    return _joined(NOT_QUEUED, "not_queued")


def _number_taken(said: str) -> bool:
    """Whether a refused submission says its job number was taken (no generic words:
    only a scheduler that hands numbers out again says so)."""
    words = tuple(filter(None, (cls.retry.number_taken for cls in schedulers.classes())))
    return bool(words) and bool(_compiled(words[0], words[1:]).search(said))


def run_retrying(runner: CommandRunner, argv: Sequence[str], cwd: Path | None = None,
                 idempotent: bool = True,
                 sleep: Callable[[float], None] = time.sleep) -> tuple[int, str, str]:
    """Run a scheduler command, trying again with backoff while it fails transiently
    (exit 255, a socket timeout, an unreachable controller); other failures return at
    once. A non-idempotent command (sbatch, qsub) is retried only when it says nothing
    was queued; refused for a job number already taken, it is tried again at once, up to
    NUMBERS_TAKEN_TRIES times (each refusal uses the number up)."""
    delays = iter((*RETRY_DELAYS_S, None))
    taken = 0
    while True:
        code, out, err = runner(argv, cwd=cwd)
        said = err or out or ""
        if code == 0:
            return code, out, err
        if not idempotent and taken < NUMBERS_TAKEN_TRIES and _number_taken(said):
            taken += 1
            continue
        if idempotent:
            transient = code == 255 or bool(_transient().search(said))
        else:
            transient = bool(_not_queued().search(said))
        delay = next(delays)
        if not transient or delay is None:
            return code, out, err
        sleep(delay)


def submit(scheduler: Scheduler, script: Path, runner: CommandRunner = run_command,
           extra: Sequence[str] | None = None, more: Sequence[str] = ()) -> str:
    """Submit one job script from its run directory (where a scheduler's default output
    files land); its job id, or SubmitError with the command's stderr. `more`: options
    for this job alone (PBS: the hosts it is put on), before the script."""
    argv = scheduler.submit_argv(str(script), extra)
    argv[-1:-1] = more
    code, out, err = run_retrying(runner, argv, cwd=script.parent, idempotent=False)
    return scheduler.parse_submit(code, out, err)


def query(scheduler: Scheduler, job_ids: Sequence[str],
          runner: CommandRunner = run_command) -> dict[str, JobState]:
    """States of many jobs in one call (falling back to the next query form on failure).

    An answer that leaves ids out is asked again for those, as long as each answer adds
    one: OpenPBS's `qstat -f -F json A B C` may print only A (openpbs#2672), and a job
    is never called lost for a reply that did not mention it. Jobs that no query knows
    are absent from the result.
    """
    if not job_ids:
        return {}
    errors = []
    for argv in scheduler.query_argvs(job_ids):
        code, out, err = run_retrying(runner, argv)
        try:
            found = scheduler.parse_states(argv, code, out, err)
        except SubmitError as exc:
            errors.append(str(exc))
            continue
        return _live(scheduler, _ask_again(scheduler, job_ids, found, argv, err, runner),
                     argv, runner)
    raise SubmitError("cannot query job states: " + "; ".join(errors))


def _live(scheduler: Scheduler, found: dict[str, JobState], argv: Sequence[str],
          runner: CommandRunner) -> dict[str, JobState]:
    """`found`, with the waiting jobs asked about again where the first answer cannot
    tell a hold (Slurm's accounting); the live answer wins for those it names."""
    waiting = [job.job_id for job in found.values()
               if job.state in (JobStatus.QUEUED, JobStatus.REQUEUED)]
    live = scheduler.live_argv(waiting) if waiting else None
    if live is None or list(live) == list(argv):
        return found
    code, out, err = run_retrying(runner, live)
    try:
        fresh = scheduler.parse_states(live, code, out, err)
    except SubmitError:  # the first answer stands
        return found
    ids = {scheduler.short_id(k): k for k in found}
    return {**found, **{ids[scheduler.short_id(k)]: v for k, v in fresh.items()
                        if scheduler.short_id(k) in ids}}


def _ask_again(scheduler: Scheduler, job_ids: Sequence[str], found: dict[str, JobState],
               argv: Sequence[str], said: str, runner: CommandRunner
               ) -> dict[str, JobState]:
    """`found`, completed by asking the same query form again for the ids it lacks and
    that the answer did not name (`said`: its stderr, where "Unknown Job Id X" answers
    for X)."""
    form = scheduler.query_argvs(job_ids).index(list(argv))
    named = set(re.findall(r"[\w.\[\]-]+", said))
    while found:
        known = {scheduler.short_id(k) for k in found}
        missing = [i for i in job_ids if scheduler.short_id(i) not in known
                   and i not in named and scheduler.short_id(i) not in named]
        if not missing:
            break
        again = scheduler.query_argvs(missing)[form]
        if again == list(argv):  # a form that lists every job whatever it is asked
            break
        code, out, err = run_retrying(runner, again)
        try:
            more = scheduler.parse_states(again, code, out, err)
        except SubmitError:
            break
        if not {scheduler.short_id(k) for k in more} - known:
            break
        found = {**found, **more}
        named |= set(re.findall(r"[\w.\[\]-]+", err))
        argv = again
    return found


def find(scheduler: Scheduler, names: Sequence[str],
         runner: CommandRunner = run_command) -> dict[str, set[str]]:
    """Job name -> ids of the jobs the scheduler knows by that name (union of every
    listing that answers); SubmitError when none answers."""
    found: dict[str, set[str]] = {}
    errors = []
    answered = False
    for argv in scheduler.find_argvs(names):
        try:
            code, out, err = run_retrying(runner, argv)
        except SubmitError as exc:  # a listing command this site lacks
            errors.append(str(exc).splitlines()[0])
            continue
        if code != 0:
            errors.append(f"{' '.join(argv[:2])}: exit {code}: {err.strip()[:300]}")
            continue
        answered = True
        for name, ids in scheduler.parse_found(argv, out).items():
            found.setdefault(name, set()).update(ids)
    if not answered:
        raise SubmitError("cannot list jobs by name: " + "; ".join(errors))
    return found


def cancel(scheduler: Scheduler, job_ids: Sequence[str],
           runner: CommandRunner = run_command) -> None:
    """Cancel jobs; SubmitError when the command fails."""
    if not job_ids:
        return
    argv = scheduler.cancel_argv(job_ids)
    code, out, err = run_retrying(runner, argv)
    problem = scheduler.cancel_failed(code, out, err)
    if problem is not None:
        raise SubmitError(f"{argv[0]} failed (exit {code}): {problem}")


def estimate_start(scheduler: Scheduler, job: JobRequest,
                   runner: CommandRunner = run_command) -> str | None:
    """When the scheduler would start a job of this shape if it were submitted now (ISO
    8601, its local time), without queueing anything; None where it has no such command
    or does not say."""
    argv = scheduler.estimate_argv(job)
    if argv is None:
        return None
    try:
        code, stdout, stderr = runner(argv)
    except SubmitError:  # the command is not here
        return None
    return scheduler.parse_estimate(code, stdout, stderr)
