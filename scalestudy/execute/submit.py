"""Submitting runs: what a run's job script is (a Submitter writes it), and one engine
that queues those scripts with one set of guarantees, whichever Submitter wrote them.

The guarantees (docs/reliability.md): an intent line in the journal before each
submit command and the job id right after it, both fsynced, so a restart after a
SIGKILL adopts a job instead of queueing it twice; the study lock passed on to the
submit command; transient failures retried only when nothing can have been queued;
the journal read once per batch, not once per run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from scalestudy.core.errors import SubmitError
from scalestudy.core.grid import Run
from scalestudy.core.states import RunState
from scalestudy.execute import commands
from scalestudy.execute import workspace as ws
from scalestudy.execute.images import digest_for
from scalestudy.execute.journal import Intent, Job, Journal, now
from scalestudy.execute.status import RunStatus, read_state, write_status
from scalestudy.execute.submitit_script import SubmititScript
from scalestudy.site.plan import Plan
from scalestudy.site.render import job_request, render
from scalestudy.site.routing import queue_for


class Submitter(Protocol):
    """How the job script of a run is made; the engine below submits it."""

    #: Its name in the journal and in `job: {submit: ...}`.
    via: str

    def write_script(self, plan: Plan, run: Run, run_dir: Path) -> Path:
        """Write the script (and whatever it reads) into the run directory; its path."""
        ...


class NativeScript:
    """The Jinja-rendered job script (templates/<scheduler>.sh.j2), submitted as it is."""

    via = "native"

    def write_script(self, plan: Plan, run: Run, run_dir: Path) -> Path:
        """runs/<id>/job.sh, rendered."""
        path = run_dir / ws.SCRIPT
        digest = digest_for(plan.study.container_named(run.container))
        ws.write_text_atomic(path, render(plan.study, plan.system, run, run_dir.resolve(),
                                          digest=digest), mode=0o755)
        return path


def submitter_for(plan: Plan) -> Submitter:
    """The study's `job.submit`: native (default) or submitit."""
    if plan.study.job.submit == "submitit":

        return SubmititScript()
    return NativeScript()


def journal(plan: Plan) -> Journal:
    """The study's journal of submitted jobs."""
    return Journal(plan.directory / "jobs.jsonl")


def prepare(plan: Plan, runs: Sequence[Run], force: bool = False) -> list[Run]:
    """Write run.json and the job script of each run that is not complete; those runs.

    A completed run's directory is left as it is: its script is the record of what ran
    (unless `force`: `run --rerun all` runs it again, its files kept in attempts/<n>/).
    """
    plan.directory.mkdir(parents=True, exist_ok=True)
    if plan.study.source is not None:
        ws.write_text_atomic(plan.directory / "study.yaml",
                             plan.study.source.read_text(encoding="utf-8"))
    submitter = submitter_for(plan) if plan.scheduler.queued else NativeScript()
    todo = []
    for run in runs:
        directory = plan.run_dir(run)
        if not force and read_state(directory) is RunState.COMPLETED:
            continue
        directory.mkdir(parents=True, exist_ok=True)
        ws.write_run(directory, run.params())
        submitter.write_script(plan, run, directory.resolve())
        todo.append(run)
    return todo


@dataclass(frozen=True)
class Submission:
    """What one `submit_runs` call did."""

    submitted: list[tuple[Run, str]]
    active: int  # jobs of the study in the queue now (including the new ones)
    waiting: list[Run]  # left for later by --max-jobs


#: How many of the study's jobs may be in the queue at once: all together (`--max-jobs`),
#: per queue (the queues' per-user limits: queue name -> limit, None for the scheduler's
#: default queue; a queue not named has none), or no limit (None).
JobLimit = int | dict[str | None, int] | None


def with_room(plan: Plan, runs: Sequence[Run], active: Sequence[str], limit: JobLimit
              ) -> tuple[list[Run], list[Run]]:
    """(the runs that fit in the queue now, those left for later), the study's `active`
    jobs (run ids) counted against the limit: all together, or those of each queue."""
    if limit is None:
        return list(runs), []
    if isinstance(limit, int):
        room = max(0, limit - len(active))
        return list(runs[:room]), list(runs[room:])

    by_id = {r.run_id: r for r in plan.runs}
    used: dict[str | None, int] = {}
    for run_id in active:
        if run_id in by_id:
            queue = queue_for(plan.study, plan.system, by_id[run_id])
            used[queue] = used.get(queue, 0) + 1
    now_runs, later = [], []
    for run in runs:
        queue = queue_for(plan.study, plan.system, run)
        cap = limit.get(queue)
        if cap is not None and used.get(queue, 0) >= cap:
            later.append(run)
            continue
        now_runs.append(run)
        used[queue] = used.get(queue, 0) + 1
    return now_runs, later


class Placer:
    """The hosts each job is put on where the scheduler cannot exclude nodes in its
    directives (PBS): `job.exclude_nodes` set, the up hosts outside it are listed once
    (free ones first) and handed out in turn, so that a batch of runs spreads over them."""

    def __init__(self, plan: Plan, runner: commands.CommandRunner) -> None:
        self.plan, self.runner = plan, runner
        self.excluded = set(plan.study.job.exclude_nodes)
        self.hosts: list[str] | None = None
        self.turn = 0

    def args(self, run: Run) -> list[str]:
        """Submit arguments naming `run`'s hosts ([]: nothing to name)."""
        scheduler = self.plan.scheduler
        argv = scheduler.exclusion.hosts_argv if scheduler.exclusion else None
        if not self.excluded or argv is None:
            return []
        if self.hosts is None:
            code, out, err = commands.run_retrying(self.runner, list(argv), idempotent=True)
            if code != 0:
                raise SubmitError(f"{' '.join(argv)} failed (exit {code}): "
                                  f"{(err or out).strip()[-300:]}; it lists the hosts a job "
                                  "may use outside job.exclude_nodes")
            self.hosts = [h for h in scheduler.parse_hosts(out) if h not in self.excluded]
        if len(self.hosts) < run.nodes:
            raise SubmitError(
                f"run {run.run_id} needs {run.nodes} node(s), and {len(self.hosts)} host(s) "
                f"are up outside job.exclude_nodes ({', '.join(sorted(self.excluded))}): "
                f"{scheduler.name} cannot exclude a node, so scalestudy names the hosts; "
                "shorten the exclude list or leave out the larger runs (--only 'nodes<=N')")
        hosts = [self.hosts[(self.turn + i) % len(self.hosts)] for i in range(run.nodes)]
        self.turn = (self.turn + run.nodes) % len(self.hosts)
        job = job_request(self.plan.study, self.plan.system, run, self.plan.run_dir(run))
        return scheduler.on_hosts(job, hosts)


def queue_runs(plan: Plan, runs: Sequence[Run], active: Sequence[str],
               max_jobs: JobLimit = None,
               runner: commands.CommandRunner = commands.run_command,
               force: bool = False) -> Submission:
    """Write and submit the scripts of `runs` (already chosen: not queued, not running),
    within the job limit with the `active` ones (run ids) already there.

    Each job id is written to the journal before the next submission starts. When a
    submission fails, what was submitted stays recorded and SubmitError says how many.
    """
    now_runs, later = with_room(plan, runs, active, max_jobs)
    submitter = submitter_for(plan)
    book = journal(plan)
    attempts = book.jobs_per_run()  # read once for the whole batch
    done: list[tuple[Run, str]] = []
    prepare(plan, now_runs, force=True)
    placer = Placer(plan, runner)
    for run in now_runs:
        run_dir = plan.run_dir(run).resolve()
        ws.archive_attempt(run_dir, plan.campaign)
        try:
            job_id = submit_recorded(plan, book, [run], attempts, run_dir / ws.SCRIPT,
                                     submitter.via, runner, placer.args(run))
        except SubmitError as exc:
            raise SubmitError(
                f"{exc}\n{len(done)} job(s) were submitted before this and are recorded in "
                f"{book.path}; run the same command again to submit the rest"
            ) from None
        done.append((run, job_id))
    return Submission(done, len(active) + len(done), later)


def submit_recorded(plan: Plan, book: Journal, runs: Sequence[Run], attempts: dict[str, int],
                    script: Path, via: str, runner: commands.CommandRunner,
                    more: Sequence[str] = (), allocation: str | None = None,
                    reason: str | None = None) -> str:
    """Queue one job script for `runs` (one run, or the steps of a packed `allocation`)
    with the journal's guarantees: each run's intent before the submit command, its job
    line and QUEUED status (with `reason`) after; `attempts` (run id -> attempts so far)
    counts them. Its job id; SubmitError as the command said it (nothing recorded after
    the intents)."""
    scheduler = plan.scheduler
    attempt = {r.run_id: attempts.get(r.run_id, 0) + 1 for r in runs}
    for run in runs:
        book.record(Intent(run.run_id, attempt[run.run_id], now(), allocation))
    job_id = commands.submit(scheduler, script, runner,
                             plan.system.scheduler_options.submit_args, more)
    at = now()
    for run in runs:
        book.record(Job(run.run_id, job_id, attempt[run.run_id], scheduler.name, via, at,
                        allocation=allocation))
        write_status(plan.run_dir(run), RunStatus(RunState.QUEUED, job_id=job_id,
                                                  submitted_at=at, reason=reason))
        attempts[run.run_id] = attempt[run.run_id]
    return job_id
