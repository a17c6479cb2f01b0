"""Run -> job script text, through a Jinja template (StrictUndefined, a quoting filter).

Pure: the caller writes the text. Every value from a spec reaches the script either
validated (names, numbers) or through the `q` filter (shlex quoting), so a spec can
never run a command it does not spell out as a command (`job.setup`, `command`).
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import traceback
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import jinja2

from scalestudy import __version__
from scalestudy.core.errors import ScalestudyError
from scalestudy.core.grid import Run, describe_run, job_name
from scalestudy.core.spec import Study
from scalestudy.core.values import JSONObject
from scalestudy.site import containers, envrecord, joboptions, ports, schedulers
from scalestudy.site.context import TemplateContext
from scalestudy.site.launchers import Launch, Shell, launch_words
from scalestudy.site.profiles import SystemProfile
from scalestudy.site.program import program as make_program
from scalestudy.site.routing import queue_for
from scalestudy.site.schedulers import JobRequest

#: The variable that holds the run directory in the job and on every rank.
RUN_DIR_VARIABLE = "SCALESTUDY_RUN_DIR"
#: A packed step's host file (its nodes' lines of the allocation's), set by the step runner.
STEP_HOSTFILE = '"$SCALESTUDY_STEP_HOSTFILE"'


def env_text(value: object) -> str:
    """An environment value as text (booleans as 1/0, as NCCL and Horovod read them)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


#: What sends a value down the careful path: a control character, DEL, a lone surrogate.
_UNUSUAL = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")


def quote(value: object) -> str:
    """Shell-quote one value (numbers and booleans as their text).

    A value with control characters (a newline, ESC, ...) is written as bash's $'...'
    with escapes, so a value never starts a line of the script (no `#SBATCH` line can
    be smuggled in); a NUL, which no argument or variable can hold, is refused. Plain
    text (nearly every value) is found plain by one regex scan; every text's quoting is
    cached (the same words recur in every script of a study)."""
    return _quoted(value if value.__class__ is str else env_text(value))


@lru_cache(maxsize=65536)
def _quoted(text: str) -> str:
    if _UNUSUAL.search(text) is None:
        return shlex.quote(text)
    if "\x00" in text:
        raise ScalestudyError(
            f"{text!r}: a NUL character cannot be part of a command argument or an "
            "environment value: remove it from the spec")
    if any("\ud800" <= ch <= "\udfff" for ch in text):
        raise ScalestudyError(
            f"{text!r}: a lone surrogate (an escape such as \\ud800) is not text a script "
            "can hold: write the character itself, or its full escape, in the spec")
    if not any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        return shlex.quote(text)
    escaped = "".join(
        "\\\\" if ch == "\\" else "\\'" if ch == "'" else
        f"\\x{ord(ch):02x}" if ord(ch) < 32 or ord(ch) == 127 else ch
        for ch in text)
    return f"$'{escaped}'"


def shell_words(words: list[str]) -> str:
    """A command line: plain words shell-quoted, scalestudy's own `Shell` words as they are."""
    return " ".join([w if isinstance(w, Shell) else quote(w) for w in words])


@lru_cache(maxsize=8)
def environment(template_dir: str | None = None) -> jinja2.Environment:
    """The Jinja environment: a user's directory first, then the templates schedulers
    carry in their classes, then the shipped ones."""
    loaders: list[jinja2.BaseLoader] = []
    if template_dir:
        loaders.append(jinja2.FileSystemLoader(template_dir))
    loaders.append(jinja2.FunctionLoader(schedulers.template_source))
    loaders.append(jinja2.PackageLoader("scalestudy.templates", ""))
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        auto_reload=False,  # templates do not change under a run: no stat() per script
    )
    env.filters["q"] = quote
    env.filters["words"] = shell_words
    return env


@lru_cache(maxsize=1)
def _cpus() -> int:
    """This host's CPUs (asked once: a render asks for every run)."""
    return os.cpu_count() or 1


def threads_per_rank(system: SystemProfile, run: Run) -> int:
    """OMP threads per rank: the profile's setting, else the node's cores shared by its
    ranks (at least 1). On the local system every "node" is this same host.
    """
    if system.threads_per_rank is not None:
        return system.threads_per_rank
    cores = system.cores_per_node or _cpus()
    one_host = schedulers.get(system.scheduler).one_host
    sharing = run.world_size if one_host else run.ranks_per_node
    return max(1, cores // sharing)


def job_request(study: Study, system: SystemProfile, run: Run, run_dir: Path) -> JobRequest:
    """The scheduler request of a run: the profile's defaults, the spec's `job:` on top."""
    job, opts = study.job, system.scheduler_options
    scheduler = schedulers.get(system.scheduler)
    return JobRequest(
        name=job_name(study.name, run.run_id),
        nodes=run.nodes,
        ranks_per_node=run.ranks_per_node,
        walltime=job.walltime,
        gpus_per_node=system.gpus_per_node,
        cpus_per_task=threads_per_rank(system, run),
        cores_per_node=system.cores_per_node,
        account=job.account,
        queue=queue_for(study, system, run),
        # PBS joins both streams into its own log (the script then writes stdout.log and
        # stderr.log itself: Torque-style qsub wrappers override -o).
        stdout=str(run_dir / scheduler.logs.name),
        stderr=str(run_dir / "stderr.log"),
        options=joboptions.request_options(study, system),
        extra=(*opts.extra, *job.extra_directives),
        exclude_nodes=tuple(job.exclude_nodes),
    )


def context(study: Study, system: SystemProfile, run: Run, run_dir: Path,
            python: str | None = None, extra_args: Sequence[str] = (),
            step: bool = False, digest: str | None = None) -> TemplateContext:
    """Everything a job template may use (`python`: the interpreter the job starts;
    `extra_args`: more workload arguments, e.g. the batch-size probe's; `step`: the
    script is a step of a packed allocation, started on its nodes, no directives;
    `digest`: the container image's, read where the script is written)."""
    tuning = study.tuning.get(run.tuning)
    env = dict(system.env)
    if tuning is not None:
        env.update({k: env_text(v) for k, v in tuning.env.items()})
    python = python or study.job.python or system.python or sys.executable
    container = study.container_named(run.container)
    box = containers.boxed(
        container, system.containers.get(container.runtime), str(run_dir.parent.parent),
        ("MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", *env, RUN_DIR_VARIABLE),
    ) if container is not None else None
    program = make_program(study, system, run, run_dir, python, extra_args, box)
    threads = threads_per_rank(system, run)
    scheduler = schedulers.get(system.scheduler)
    # mpirun passes only the variables it is told (-x) to the ranks on other nodes.
    # (a container runtime reads USER on every node: ch-run refuses to start without)
    launch = Launch(run=run, system=system, program=program, threads=threads,
                    env_names=(*env, RUN_DIR_VARIABLE, *(("USER",) if box else ())),
                    hostfile=STEP_HOSTFILE if step else scheduler.in_job.hostfile,
                    one_host=scheduler.one_host, step=step)
    return {
        "version": __version__,
        "run": run.params(),
        "what": describe_run(study, run),
        # where the profile was found, when the spec gave a file (provenance keeps it)
        "system_file": str(study.system_file or ""),
        "run_dir": str(run_dir),
        "workdir": str(workdir(study)),
        "python": python,
        "program": program,  # the submitit task runs it (execute.submitit_script)
        # (a scheduler without a queue has no directives: no request to build per run)
        "directives": (scheduler.directives(job_request(study, system, run, run_dir))
                       if scheduler.queued and not step else []),
        "step": step,
        "digest": digest,
        "nodes_command": scheduler.in_job.nodes_command,  # prints the job's hosts (its block)
        "port_base": ports.BASE, "port_span": ports.SPAN,
        "launch": launch_words(launch),
        "env": env,
        # env.txt: the allowlist, the spec's variables and job.record_env (site.envrecord)
        "record_env_pattern": envrecord.case_pattern([*env, *study.job.record_env]),
        "secret_name_ere": envrecord.SECRET_NAME,
        "redacted": envrecord.REDACTED,
        "setup": [*system.setup, *study.job.setup, *(box.setup if box else ())],
        "threads": threads,
        "walltime": study.job.walltime,
        "system": _dumped(system),
        "tags": list(study.tags),
    }


_DUMPS: dict[int, tuple[SystemProfile, JSONObject]] = {}


def _dumped(system: SystemProfile) -> JSONObject:
    """The profile as a dict for the templates, made once per (frozen) profile."""
    held = _DUMPS.get(id(system))
    if held is None or held[0] is not system:
        held = _DUMPS[id(system)] = (system, system.model_dump())
    return held[1]


def workdir(study: Study) -> Path:
    """Where a job's setup lines and program run: the spec file's directory (relative
    paths in `command` and `job.setup` resolve where the spec was written), or the
    current directory for a study without a file."""
    return _workdir(study.source, os.getcwd())


@lru_cache(maxsize=64)
def _workdir(source: Path | None, cwd: str) -> Path:
    """The work directory resolved once per spec file and current directory (a relative
    spec path depends on the current directory: it is part of the key)."""
    where = source.parent if source else Path(cwd)
    return (where if where.is_absolute() else Path(cwd) / where).resolve()


def template_dir(study: Study) -> str | None:
    """The spec's own template directory (relative to the spec file), if any."""
    if not study.job.template_dir:
        return None
    base = study.source.parent if study.source else Path.cwd()
    return str((base / study.job.template_dir).resolve())


def render(study: Study, system: SystemProfile, run: Run, run_dir: Path,
           python: str | None = None, extra_args: Sequence[str] = (), step: bool = False,
           digest: str | None = None) -> str:
    """The job script of one run.

    The repeats of one grid point differ only in their run id and repeat number: once
    two of them, rendered in full, prove that swapping those two values turns one
    script into the other, the point's further repeats are made by that swap (the same
    text a render gives, at a fraction of the cost)."""
    key = (str(run_dir.parent), run_dir.name == run.run_id, python, tuple(extra_args), step,
           digest, os.getcwd(), *((k, repr(v)) for k, v in run.params().items()
                          if k not in ("run_id", "repeat")))
    point = _points(study, system).setdefault(key, _Repeats())
    made = point.made(run)
    if made is not None:
        return made
    text = _render(study, system, run, run_dir, python, extra_args, step, digest)
    point.learn(run, text)
    return text


class _Repeats:
    """What one grid point's scripts taught: the first script and its run, and whether
    swapping the run id and repeat number reproduces the second (None: not known yet)."""

    def __init__(self) -> None:
        self.first: tuple[str, str, int] | None = None  # text, run id, repeat
        self.swaps: bool | None = None

    def made(self, run: Run) -> str | None:
        """The run's script by the swap, once proven; else None (render it)."""
        if not self.swaps or self.first is None:
            return None
        return _swap(self.first, run)

    def learn(self, run: Run, text: str) -> None:
        if self.first is None:
            self.first = (text, run.run_id, run.repeat)
        elif self.swaps is None and run.run_id != self.first[1]:
            self.swaps = _swap(self.first, run) == text


def _swap(first: tuple[str, str, int], run: Run) -> str:
    text, run_id, repeat = first
    return text.replace(run_id, run.run_id).replace(f"(repeat {repeat})",
                                                    f"(repeat {run.repeat})")


#: What makes two runs' scripts the same point (`script`'s key).
_Key = tuple[object, ...]
#: The studies whose points' scripts are remembered (the most recent few).
_STUDIES: dict[tuple[int, int], tuple[Study, SystemProfile, dict[_Key, _Repeats]]] = {}
MAX_STUDIES = 4


def _points(study: Study, system: SystemProfile) -> dict[_Key, _Repeats]:
    """The points of a (study, system) pair, kept while the objects are (by identity:
    the entry holds them, so an id is never reused for another study)."""
    held = _STUDIES.get((id(study), id(system)))
    if held is None or held[0] is not study or held[1] is not system:
        while len(_STUDIES) >= MAX_STUDIES:
            del _STUDIES[next(iter(_STUDIES))]
        held = _STUDIES[(id(study), id(system))] = (study, system, {})
    return held[2]


def _render(study: Study, system: SystemProfile, run: Run, run_dir: Path,
            python: str | None = None, extra_args: Sequence[str] = (), step: bool = False,
            digest: str | None = None) -> str:
    """The job script of one run, from its template."""
    env = environment(template_dir(study))
    try:
        template = env.get_template(schedulers.get(system.scheduler).template)
        return template.render(context(study, system, run, run_dir, python, extra_args, step,
                                       digest))
    except jinja2.TemplateError as exc:
        where = getattr(exc, "filename", None) or schedulers.get(system.scheduler).template
        line = getattr(exc, "lineno", None)
        # Runtime errors (an undefined variable) carry the place in Jinja's traceback.
        frames = [f for f in traceback.extract_tb(exc.__traceback__)
                  if f.filename.endswith(".j2")]
        if line is None and frames:
            where, line = frames[-1].filename, frames[-1].lineno
        raise ScalestudyError(
            f"{where}{':' + str(line) if line else ''}: job template error: {exc.message}"
        ) from None
