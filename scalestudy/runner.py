"""A study from spec to report: plan, render the run directories, execute, collect, report.

The CLI calls these functions and prints; they never print themselves (a callback
reports progress). Heavy modules (pandas, matplotlib) are imported only where used.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalestudy import state
from scalestudy.errors import SpecError
from scalestudy.grid import Run, expand, select
from scalestudy.render import render
from scalestudy.spec import Study, load_study, walltime_seconds
from scalestudy.systems import SystemProfile, load_system


@dataclass(frozen=True)
class Plan:
    """A validated study with its system and runs."""

    study: Study
    system: SystemProfile
    runs: list[Run]
    results: Path

    @property
    def directory(self) -> Path:
        """results/<study>."""
        return state.study_dir(self.results, self.study.name)

    def run_dir(self, run: Run) -> Path:
        """results/<study>/runs/<run-id>."""
        return state.run_dir(self.results, self.study.name, run.run_id)


def make_plan(path: str | Path, results: Path = Path("results")) -> Plan:
    """Load, validate and expand a study; check it against its system. Writes nothing."""
    study = load_study(path)
    try:
        name = study.system
        if name.endswith((".yaml", ".yml")) and study.source is not None:
            name = str(study.source.parent / name)
        system = load_system(name)
    except SpecError as exc:
        msg = str(exc).removeprefix("system: ")
        raise SpecError(f"{study.line_of(('system',))}: {msg}") from None
    runs = expand(study)
    problems = [f"{study.line_of(loc)}: {msg}" for loc, msg in system_checks(study, system)]
    if problems:
        raise SpecError("\n".join(problems))
    return Plan(study, system, runs, results)


# Job options that only one kind of scheduler can express.
_ONLY = {"partition": "slurm", "qos": "slurm", "constraint": "slurm", "queue": "pbs",
         "filesystems": "pbs"}


def system_checks(study: Study, system: SystemProfile) -> list[tuple[tuple[str | int, ...], str]]:
    """What the study asks that its system cannot give, each with the key to fix."""
    problems: list[tuple[tuple[str | int, ...], str]] = []
    too_big = sorted({n for n in study.grid.nodes if n > system.max_nodes})
    if too_big:
        problems.append((("grid", "nodes"), (
            f"{', '.join(map(str, too_big))} node(s) is more than system {system.name!r} "
            f"allows ({system.max_nodes}): lower grid.nodes")))
    job = study.job
    for key, scheduler in _ONLY.items():
        if getattr(job, key) and system.scheduler != scheduler:
            problems.append((("job", key), (
                f"system {system.name!r} uses {system.scheduler}, which has no {key}; "
                f"{key} is a {scheduler} option: remove it")))
    if system.scheduler != "local" and system.scheduler_options.account_required \
            and not job.account:
        problems.append((("job",), (
            f"system {system.name!r} requires an account: add `account: <project>` under job")))
    limit = system.scheduler_options.max_walltime
    if limit and walltime_seconds(job.walltime) > walltime_seconds(limit):
        problems.append((("job", "walltime"), (
            f"{job.walltime} is longer than system {system.name!r} allows ({limit})")))
    if job.submit == "submitit" and system.scheduler != "slurm":
        problems.append((("job", "submit"), (
            f"submitit submits to Slurm only; system {system.name!r} uses {system.scheduler}: "
            "use `submit: native`")))
    if system.scheduler == "local":
        problems += _local_backend_checks(study)
    return problems


#: Optional backends: the module to import, and how to get it.
_OPTIONAL_BACKENDS = {
    "horovod": ("horovod.torch", "build it with `scripts/build-horovod` (see the README, "
                "'Optional backends')"),
    "deepspeed": ("deepspeed", "install it with `pip install 'scalestudy[deepspeed]'`"),
}


def _local_backend_checks(study: Study) -> list[tuple[tuple[str | int, ...], str]]:
    """On this machine the jobs run this Python: an optional backend it lacks is a
    mistake in the study, said before any run starts."""
    import importlib.util
    import sys

    problems: list[tuple[tuple[str | int, ...], str]] = []
    for i, backend in enumerate(study.grid.backend):
        module, hint = _OPTIONAL_BACKENDS.get(backend, (None, ""))
        if module is None:
            continue
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            problems.append((("grid", "backend", i), (
                f"backend {backend} needs {module.split('.')[0]}, which {sys.executable} "
                f"cannot import: {hint}, or remove {backend} from grid.backend")))
    return problems


def plan_summary(plan: Plan) -> dict[str, Any]:
    """What `plan --json` prints: the runs and the totals."""
    from scalestudy.grid import node_hours

    return {
        "study": plan.study.name,
        "system": plan.system.name,
        "scaling": plan.study.scaling,
        "runs": [{**r.params(), "state": state.run_state(plan.run_dir(r))} for r in plan.runs],
        "run_count": len(plan.runs),
        "node_hours_max": round(node_hours(plan.study, plan.runs), 3),
        "walltime": plan.study.job.walltime,
    }


def prepare(plan: Plan, runs: Sequence[Run], force: bool = False) -> list[Run]:
    """Write run.json and job.sh for each run that is not complete; return those runs.

    A completed run's directory is left as it is: its script is the record of what ran
    (unless `force`: `run --rerun all` runs it again, its files kept in attempts/<n>/).
    """
    plan.directory.mkdir(parents=True, exist_ok=True)
    if plan.study.source is not None:
        state.write_text_atomic(plan.directory / "study.yaml",
                                plan.study.source.read_text(encoding="utf-8"))
    todo = []
    for run in runs:
        directory = plan.run_dir(run)
        if not force and state.run_state(directory) == "completed":
            continue
        directory.mkdir(parents=True, exist_ok=True)
        state.write_json_atomic(directory / state.RUN_JSON, run.params())
        script = render(plan.study, plan.system, run, directory.resolve())
        state.write_text_atomic(directory / state.SCRIPT, script, mode=0o755)
        todo.append(run)
    return todo


Progress = Callable[[Run, dict[str, Any] | None], None]


def execute_runs(plan: Plan, runs: Sequence[Run], progress: Progress | None = None) -> list[dict]:
    """Execute the runs one after the other (they would share this host's cores)."""
    from scalestudy.executor import execute

    timeout = walltime_seconds(plan.study.job.walltime)
    workload = plan.study.workload
    regex = workload.throughput_regex if workload.kind == "command" else None
    statuses = []
    for run in runs:
        if progress:
            progress(run, None)
        status = execute(plan.run_dir(run).resolve(), run.params(), timeout, regex)
        statuses.append(status)
        if progress:
            progress(run, status)
    return statuses


#: What `run --rerun` accepts: failed (and lost) runs, or every selected run.
RERUN_CHOICES = ("failed", "all")
#: Attempts a run gets at most, unless `run --max-attempts` says otherwise.
MAX_ATTEMPTS = 3


@dataclass(frozen=True)
class Selection:
    """The runs a `run` starts now, and the failed ones it leaves as they are."""

    todo: list[Run]
    failed_kept: list[Run]  # failed, and --rerun not asked
    exhausted: list[Run]  # failed after --max-attempts attempts


def choose_runs(plan: Plan, only: str | None, rerun: str | None = None,
                max_attempts: int = MAX_ATTEMPTS,
                states: dict[str, str] | None = None) -> Selection:
    """Which selected runs to (re)start: `run` resumes (runs never started, or stopped
    half-way on this machine); `rerun="failed"` adds failed and lost runs; `rerun="all"`
    every run, completed ones too. A run that has had `max_attempts` attempts is left.

    `states` (run id -> state) comes from the scheduler when there is one; runs queued
    or running there are never chosen.
    """
    if rerun is not None and rerun not in RERUN_CHOICES:
        raise SpecError(f"--rerun {rerun!r}: use one of {', '.join(RERUN_CHOICES)}")
    todo: list[Run] = []
    failed_kept: list[Run] = []
    exhausted: list[Run] = []
    local = plan.system.scheduler == "local"
    for run in select(plan.runs, only):
        directory = plan.run_dir(run)
        current = states[run.run_id] if states is not None else state.run_state(directory)
        if current == "pending" or (local and current in ("submitted", "running")):
            todo.append(run)
        elif current in ("submitted", "running") or (current == "completed" and rerun != "all"):
            continue
        elif current == "failed" and rerun is None:
            failed_kept.append(run)
        elif state.attempt_count(directory) >= max_attempts:
            exhausted.append(run)
        else:
            todo.append(run)
    return Selection(todo, failed_kept, exhausted)


def collect(plan: Plan) -> Any:
    """Gather every planned run into results/<study>/runs.csv; returns the DataFrame.

    On a scheduler, jobs that ended since the last look are settled first (one query);
    where the scheduler cannot be asked (results copied elsewhere), the files decide.
    """
    from scalestudy.collect import collect as collect_runs

    if plan.system.scheduler != "local" and (plan.directory / "jobs.jsonl").exists():
        from scalestudy.schedulers import SubmitError
        from scalestudy.tracking import refresh

        with contextlib.suppress(SubmitError):
            refresh(plan)

    return collect_runs(plan.directory, [r.params() for r in plan.runs])


def report(plan: Plan) -> tuple[Path, Any]:
    """Collect, analyze and write the report (default options, the study's own
    references checked, as `scalestudy report` does); returns (index.html, scaling table)."""
    from scalestudy.report import report_study

    built = report_study(plan)
    return built.html, built.table
