"""What every rank of a run runs (its Program), built once per run from the run's workload.

Pure. The bundled benchmark is `python -m scalestudy.workload ARGS`; a `command`
workload is the user's argv, its `{placeholders}` filled. In a container, each rank's
command is the runtime's prefix, then the image's Python (or the command). Launchers and
the submitit task take the Program and ask it for its words; nobody takes an argv apart
again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from scalestudy.core.grid import Run, lr_values, run_options
from scalestudy.core.spec import Study
from scalestudy.site.containers import Boxed

if TYPE_CHECKING:  # profiles names the launchers, which name programs
    from scalestudy.site.profiles import SystemProfile

#: The bundled benchmark's module.
WORKLOAD_MODULE = "scalestudy.workload"


@dataclass(frozen=True)
class Program:
    """A run's program: the interpreter the job starts, the arguments, and whether it is
    the bundled benchmark (`args` are then the module's arguments, else the whole argv)."""

    python: str
    args: tuple[str, ...]
    bundled: bool
    container: Boxed | None = None  # what each rank runs in (None: on the node itself)

    def argv(self) -> list[str]:
        """A rank's command line: `python -m scalestudy.workload ARGS`, or the command;
        in a container, after the runtime's words, with the image's Python."""
        if self.container is not None:
            inner = [self.container.python, "-m", WORKLOAD_MODULE, *self.args] \
                if self.bundled else list(self.args)
            return [*self.container.prefix, *inner]
        if self.bundled:
            return [self.python, "-m", WORKLOAD_MODULE, *self.args]
        return list(self.args)

    def torchrun_args(self) -> list[str]:
        """What follows torchrun's options: `-m scalestudy.workload ARGS` (torchrun starts
        it with its own Python), or `--no-python` and the command (a container's: the
        agent stays outside, each rank it starts is a container)."""
        if self.bundled and self.container is None:
            return ["-m", WORKLOAD_MODULE, *self.args]
        return ["--no-python", *self.argv()]


def program(study: Study, system: SystemProfile, run: Run, run_dir: Path, python: str,
            extra: Sequence[str] = (), container: Boxed | None = None) -> Program:
    """The Program of a run on a system (`extra`: more arguments for the bundled
    benchmark, e.g. the batch-size probe's). On a GPU system the benchmark must find a
    GPU rather than fall back to CPU; the profile's peaks are MFU's denominator."""
    workload = study.workload
    if study.target is not None and workload.bundled:
        extra = [*study.target.workload_args(), *extra]  # a measured target, else none
    args = workload.program_args(run, run_options(study, run), lr_values(study, run), run_dir,
                                 gpus=system.gpus_per_node > 0, extra=extra,
                                 peaks=system.peak_tflops, device=system.gpu_api)
    return Program(python=python, args=tuple(args), bundled=workload.bundled,
                   container=container)
