"""Run -> job script text, through a Jinja template (StrictUndefined, a quoting filter).

Pure: the caller writes the text. Every value from a spec reaches the script either
validated (names, numbers) or through the `q` filter (shlex quoting), so a spec can
never run a command it does not spell out as a command (`job.setup`, `command`).
"""

from __future__ import annotations

import os
import shlex
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from scalestudy import __version__
from scalestudy.grid import Run
from scalestudy.spec import Study
from scalestudy.systems import SystemProfile


def env_text(value: Any) -> str:
    """An environment value as text (booleans as 1/0, as NCCL and Horovod read them)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def quote(value: Any) -> str:
    """Shell-quote one value (numbers and booleans as their text)."""
    return shlex.quote(env_text(value))


@lru_cache(maxsize=8)
def environment(template_dir: str | None = None) -> jinja2.Environment:
    """The Jinja environment: shipped templates, or a user's directory first."""
    loaders: list[jinja2.BaseLoader] = []
    if template_dir:
        loaders.append(jinja2.FileSystemLoader(template_dir))
    loaders.append(jinja2.PackageLoader("scalestudy.templates", ""))
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["q"] = quote
    return env


def workload_argv(study: Study, run: Run, run_dir: Path) -> list[str]:
    """What every rank runs, as arguments after the launcher.

    The bundled benchmark runs as a module (`-m scalestudy.workload ...`); a
    `command` workload's arguments get the run's values in their `{placeholders}`.
    """
    w = study.workload
    if w.kind == "synthetic":
        return [
            "-m", "scalestudy.workload",
            "--model", w.model, "--image-size", str(w.image_size),
            "--num-classes", str(w.num_classes), "--batch-size", str(run.batch_size),
            "--precision", w.precision, "--warmup-iters", str(w.warmup_iters),
            "--iters", str(w.iters), "--batches-per-iter", str(w.batches_per_iter),
            "--backend", run.backend, "--metrics", str(run_dir / "metrics.jsonl"),
        ]
    values = {**run.params(), "run_dir": str(run_dir)}
    return [arg.format(**values) for arg in w.command]


def threads_per_rank(system: SystemProfile, run: Run) -> int:
    """OMP threads per rank: the profile's setting, else the node's cores shared by its
    ranks (at least 1). On the local system every "node" is this same host.
    """
    if system.threads_per_rank is not None:
        return system.threads_per_rank
    cores = system.cores_per_node or os.cpu_count() or 1
    sharing = run.world_size if system.scheduler == "local" else run.ranks_per_node
    return max(1, cores // sharing)


def context(study: Study, system: SystemProfile, run: Run, run_dir: Path,
            python: str | None = None) -> dict[str, Any]:
    """Everything a job template may use (`python`: the interpreter the job starts)."""
    tuning = study.tuning.get(run.tuning)
    env = dict(system.env)
    if tuning is not None:
        env.update({k: env_text(v) for k, v in tuning.env.items()})
    return {
        "version": __version__,
        "run": run.params(),
        "run_dir": str(run_dir),
        "python": python or sys.executable,
        "workload_kind": study.workload.kind,
        "program": workload_argv(study, run, run_dir),
        "env": env,
        "setup": [*system.setup, *study.job.setup],
        "threads": threads_per_rank(system, run),
        "walltime": study.job.walltime,
        "system": system.model_dump(),
    }


def render(study: Study, system: SystemProfile, run: Run, run_dir: Path,
           python: str | None = None) -> str:
    """The job script of one run."""
    template = environment().get_template(f"{system.scheduler}.sh.j2")
    return template.render(context(study, system, run, run_dir, python))
