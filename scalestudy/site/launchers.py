"""Launchers: how ranks are started (srun, PALS/MPICH mpiexec, Open MPI mpirun, torchrun).

Pure: each builds the launch command of one run as a list of words. A plain `str`
word is shell-quoted by the template; a `Shell` word (a variable such as
"$PBS_NODEFILE") is written as is. Nothing from a spec ever becomes a `Shell` word.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scalestudy.core.errors import ScalestudyError
from scalestudy.core.grid import Run
from scalestudy.site.profiles import SystemProfile


class Shell(str):
    """A word the template writes verbatim (only scalestudy's own shell expressions)."""

    __slots__ = ()


Word = str  # str or Shell
RDZV_ENDPOINT = Shell('--rdzv-endpoint="${MASTER_ADDR}:${MASTER_PORT}"')
NODEFILE = Shell('"$PBS_NODEFILE"')


@dataclass(frozen=True)
class Launch:
    """What a launcher needs to know about one run."""

    run: Run
    system: SystemProfile
    python: str
    module_args: Sequence[str] | None  # `-m scalestudy.workload` arguments (bundled workload)
    command: Sequence[str] | None  # a `command` workload's argv
    threads: int
    env_names: Sequence[str] = ()  # variables an MPI launcher must pass on (mpirun -x)
    hostfile: str | None = None  # the scheduler's host list, a shell expression

    def program(self) -> list[Word]:
        """What every rank runs."""
        if self.command is not None:
            return list(self.command)
        return [self.python, "-m", "scalestudy.workload", *(self.module_args or ())]


def srun(launch: Launch, nodes: int | None = None, per_node: int | None = None,
         program: Sequence[Word] | None = None) -> list[Word]:
    """`srun` with the site's binding; rank discovery from SLURM_* variables."""
    run, opts = launch.run, launch.system.launcher_options
    per_node = per_node or run.ranks_per_node
    words: list[Word] = ["srun", f"--nodes={nodes or run.nodes}",
                         f"--ntasks-per-node={per_node}"]
    if program is None:
        words.append(f"--cpus-per-task={launch.threads}")
    if opts.cpu_bind:
        words.append(f"--cpu-bind={opts.cpu_bind}")
    if program is None and opts.gpus_per_task and launch.system.gpus_per_node:
        words.append(f"--gpus-per-task={opts.gpus_per_task}")
    if opts.gpu_bind and launch.system.gpus_per_node:
        words.append(f"--gpu-bind={opts.gpu_bind}")
    if opts.mpi:
        words.append(f"--mpi={opts.mpi}")
    words += opts.extra_args
    return [*words, *(program if program is not None else _wrapped(launch))]


def mpiexec(launch: Launch, nodes: int | None = None, per_node: int | None = None,
            program: Sequence[Word] | None = None) -> list[Word]:
    """PALS/MPICH `mpiexec` (Polaris, Aurora): ranks from PMI/PALS variables."""
    run, opts = launch.run, launch.system.launcher_options
    nodes, per_node = nodes or run.nodes, per_node or run.ranks_per_node
    words: list[Word] = ["mpiexec", "--np", str(nodes * per_node), "--ppn", str(per_node)]
    depth = opts.depth if program is None else None
    if depth:
        words += ["--depth", str(depth)]
    if opts.cpu_bind:
        words += ["--cpu-bind", opts.cpu_bind]
    words += ["--hostfile", NODEFILE, "--envall", *opts.extra_args]
    return [*words, *(program if program is not None else _wrapped(launch))]


def mpirun(launch: Launch, nodes: int | None = None, per_node: int | None = None,
           program: Sequence[Word] | None = None) -> list[Word]:
    """Open MPI `mpirun`: ranks per node with `--map-by ppr`, variables passed with `-x`."""
    run, opts = launch.run, launch.system.launcher_options
    nodes, per_node = nodes or run.nodes, per_node or run.ranks_per_node
    mapping = f"ppr:{per_node}:node"
    if program is None and launch.threads > 1:
        mapping += f":PE={launch.threads}"
    words: list[Word] = ["mpirun", "-np", str(nodes * per_node), "--map-by", mapping,
                         "--bind-to", opts.cpu_bind or ("core" if program is None else "none")]
    if launch.hostfile:  # PBS: $PBS_NODEFILE (Slurm: Open MPI asks Slurm itself)
        words += ["--hostfile", Shell(launch.hostfile)]
    for name in ("MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", *launch.env_names):
        words += ["-x", name]
    words += opts.extra_args
    return [*words, *(program if program is not None else _wrapped(launch))]


def _wrapped(launch: Launch) -> list[Word]:
    """The program, behind the site's per-rank GPU wrapper when it has one."""
    wrapper = launch.system.launcher_options.gpu_wrapper
    return [*([wrapper] if wrapper and launch.system.gpus_per_node else []), *launch.program()]


def torchrun(launch: Launch) -> list[Word]:
    """One torchrun agent per node, started by the site's launcher; c10d rendezvous on
    the first node (MASTER_ADDR:MASTER_PORT, set by the job script)."""
    run = launch.run
    via = launch.system.launcher_options.torchrun_via
    if via is None:
        raise ScalestudyError(
            f"system {launch.system.name}: launcher torchrun needs launcher_options."
            "torchrun_via (srun, mpiexec or mpirun) to start one agent per node"
        )
    agent: list[Word] = [
        launch.python, "-m", "torch.distributed.run", f"--nnodes={run.nodes}",
        f"--nproc-per-node={run.ranks_per_node}", "--rdzv-backend=c10d", RDZV_ENDPOINT,
        f"--rdzv-id={run.run_id}", "--max-restarts=0",
    ]
    if launch.command is not None:
        agent += ["--no-python", *launch.command]
    else:
        agent += ["-m", "scalestudy.workload", *(launch.module_args or ())]
    return LAUNCHERS[via](launch, nodes=run.nodes, per_node=1, program=agent)


LAUNCHERS: dict[str, Callable[..., list[Word]]] = {
    "srun": srun, "mpiexec": mpiexec, "mpirun": mpirun,
}


def launch_words(launch: Launch) -> list[Word]:
    """The launch command of a run on its system.

    Horovod ranks join through MPI (or Horovod's own gloo rendezvous), not torchrun's:
    on a torchrun system a Horovod run starts one process per rank with the launcher
    torchrun would have been started by.
    """
    name = launch.system.launcher
    if name == "torchrun" and launch.run.backend == "horovod":
        name = launch.system.launcher_options.torchrun_via or "torchrun"
    if name == "torchrun":
        return torchrun(launch)
    try:
        return LAUNCHERS[name](launch)
    except KeyError:
        raise ScalestudyError(
            f"unknown launcher {name!r}; valid launchers: "
            f"{', '.join(sorted([*LAUNCHERS, 'torchrun']))}"
        ) from None
