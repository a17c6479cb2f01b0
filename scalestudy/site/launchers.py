"""Launchers: how ranks start (srun, PALS mpiexec, Open MPI mpirun, flux run, torchrun, local).

Pure: each builds the launch command of one run as a list of words. A plain `str`
word is shell-quoted by the template; a `Shell` word (a variable such as the
scheduler's host file) is written as is. Nothing from a spec ever becomes a `Shell` word.

Launchers compose, like ReFrame's LauncherWrapper: a starter (srun, mpiexec, mpirun;
on this host the job script's agents or horovodrun) puts processes on the nodes, and
what it starts is either the ranks (behind the site's GPU wrapper, if any) or one
torchrun agent per node that starts the ranks itself.

A starter kept outside the package is a function named in the entry-point group
`scalestudy.launchers` of its distribution (docs/plugins.md); a profile names it as it
names a built-in one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from scalestudy.core import plugins
from scalestudy.core.errors import ScalestudyError
from scalestudy.core.grid import Run
from scalestudy.site.program import Program

if TYPE_CHECKING:  # profiles asks this module which launchers there are
    from scalestudy.site.profiles import SystemProfile


class Shell(str):
    """A word the template writes verbatim (only scalestudy's own shell expressions)."""

    __slots__ = ()


Word = str  # str or Shell
RDZV_ENDPOINT = Shell('--rdzv-endpoint="${MASTER_ADDR}:${MASTER_PORT}"')
#: A packed step's nodes (srun), set by the step runner inside the allocation.
STEP_NODES = Shell('--nodelist="$SCALESTUDY_STEP_HOSTS"')
#: The local job script's function that starts one torchrun agent per "node" on this host.
LOCAL_AGENTS = Shell("scalestudy_agents")


@dataclass(frozen=True)
class Launch:
    """What a launcher needs to know about one run."""

    run: Run
    system: SystemProfile
    program: Program
    threads: int
    env_names: tuple[str, ...] = ()  # variables an MPI launcher must pass on (mpirun -x)
    hostfile: str | None = None  # the scheduler's host list, a shell expression
    one_host: bool = False  # every "node" is this host (no scheduler): the local launcher
    step: bool = False  # a packed allocation's step: on the nodes the step runner gives it


@dataclass(frozen=True)
class Slots:
    """What a starter is asked for: `per_node` processes on each of `nodes` nodes;
    `ranks`: each is one rank (its threads and GPUs bound), else a torchrun agent."""

    nodes: int
    per_node: int
    ranks: bool


class Launcher:
    """Something a starter starts: its words, and the processes it needs."""

    def slots(self, launch: Launch) -> Slots:
        """The processes to start: by default one per rank."""
        return Slots(launch.run.nodes, launch.run.ranks_per_node, ranks=True)

    def words(self, launch: Launch) -> list[Word]:
        """The words after the starter's own."""
        raise NotImplementedError


class Ranks(Launcher):
    """Each process is one rank running the program."""

    def words(self, launch: Launch) -> list[Word]:
        """The program's own command line."""
        return list(launch.program.argv())


@dataclass(frozen=True)
class GpuWrapper(Launcher):
    """The site's per-rank GPU wrapper (ALCF's set_affinity scripts) around the ranks."""

    inner: Launcher

    def slots(self, launch: Launch) -> Slots:
        """The wrapped launcher's slots."""
        return self.inner.slots(launch)

    def words(self, launch: Launch) -> list[Word]:
        """The wrapper, where the site has one and the run has GPUs, then the ranks."""
        wrapper = launch.system.launcher_options.gpu_wrapper
        use = [wrapper] if wrapper and launch.system.gpus_per_node else []
        return [*use, *self.inner.words(launch)]


@dataclass(frozen=True)
class Torchrun(Launcher):
    """One torchrun agent per node starts the node's ranks; c10d rendezvous on the first
    node (MASTER_ADDR:MASTER_PORT, set by the job script)."""

    options: tuple[str, ...] = ()  # more torchrun options

    def slots(self, launch: Launch) -> Slots:
        """One agent per node."""
        return Slots(launch.run.nodes, 1, ranks=False)

    def words(self, launch: Launch) -> list[Word]:
        """`python -m torch.distributed.run` with the run's shape, then the program."""
        run, program = launch.run, launch.program
        return [program.python, "-m", "torch.distributed.run", f"--nnodes={run.nodes}",
                f"--nproc-per-node={run.ranks_per_node}", "--rdzv-backend=c10d",
                RDZV_ENDPOINT, f"--rdzv-id={run.run_id}", "--max-restarts=0",
                *self.options, *program.torchrun_args()]


Starter = Callable[[Launch, Slots], list[Word]]


@dataclass(frozen=True)
class Started(Launcher):
    """A starter's words, then what it starts."""

    start: Starter
    inner: Launcher

    def words(self, launch: Launch) -> list[Word]:
        """The whole launch line."""
        return [*self.start(launch, self.inner.slots(launch)), *self.inner.words(launch)]


def srun(launch: Launch, slots: Slots) -> list[Word]:
    """`srun` with the site's binding; rank discovery from SLURM_* variables."""
    opts = launch.system.launcher_options
    words: list[Word] = ["srun", f"--nodes={slots.nodes}", f"--ntasks-per-node={slots.per_node}"]
    if slots.ranks:
        words.append(f"--cpus-per-task={launch.threads}")
    if opts.cpu_bind:
        words.append(f"--cpu-bind={opts.cpu_bind}")
    if slots.ranks and opts.gpus_per_task and launch.system.gpus_per_node:
        words.append(f"--gpus-per-task={opts.gpus_per_task}")
    if opts.gpu_bind and launch.system.gpus_per_node:
        words.append(f"--gpu-bind={opts.gpu_bind}")
    if opts.mpi:
        words.append(f"--mpi={opts.mpi}")
    if launch.step:  # exactly the step's nodes and tasks (not the allocation's, which
        # srun reads from SLURM_NTASKS), no CPU shared with a step beside it
        words += [f"--ntasks={slots.nodes * slots.per_node}", STEP_NODES, "--exclusive"]
    box = launch.program.container
    return [*words, *opts.extra_args, *(box.starter_args if box else ())]


def mpiexec(launch: Launch, slots: Slots) -> list[Word]:
    """PALS/MPICH `mpiexec` (Polaris, Aurora): ranks from PMI/PALS variables."""
    opts = launch.system.launcher_options
    words: list[Word] = ["mpiexec", "--np", str(slots.nodes * slots.per_node),
                         "--ppn", str(slots.per_node)]
    if slots.ranks and opts.depth:
        words += ["--depth", str(opts.depth)]
    if opts.cpu_bind:
        words += ["--cpu-bind", opts.cpu_bind]
    if not launch.hostfile:  # profiles refuse it when they load (site.profiles)
        raise ScalestudyError(
            f"mpiexec needs the host file of the job, and {launch.system.scheduler} writes "
            "none: use its own launcher (srun, flux) or a scheduler that writes one")
    return [*words, "--hostfile", Shell(launch.hostfile), "--envall", *opts.extra_args]


def mpirun(launch: Launch, slots: Slots) -> list[Word]:
    """Open MPI `mpirun`: ranks per node with `--map-by ppr`, variables passed with `-x`."""
    opts = launch.system.launcher_options
    mapping = f"ppr:{slots.per_node}:node"
    if slots.ranks and launch.threads > 1:
        mapping += f":PE={launch.threads}"
    words: list[Word] = ["mpirun", "-np", str(slots.nodes * slots.per_node), "--map-by", mapping,
                         "--bind-to", opts.cpu_bind or ("core" if slots.ranks else "none")]
    if launch.hostfile:  # the scheduler's (Slurm: Open MPI asks Slurm itself)
        words += ["--hostfile", Shell(launch.hostfile)]
    for name in ("MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", *launch.env_names):
        words += ["-x", name]
    return [*words, *opts.extra_args]


def flux_run(launch: Launch, slots: Slots) -> list[Word]:
    """`flux run` in the job's Flux instance: the ranks spread over `nodes` nodes, each
    with its cores (`-c`) and GPUs (`-g`); binding through the Flux shell's
    cpu-affinity and gpu-affinity options. Rank discovery from FLUX_TASK_* (and PMI)."""
    opts = launch.system.launcher_options
    words: list[Word] = ["flux", "run", f"--nodes={slots.nodes}",
                         f"--ntasks={slots.nodes * slots.per_node}"]
    if slots.ranks:
        words.append(f"--cores-per-task={launch.threads}")
        if opts.gpus_per_task and launch.system.gpus_per_node:
            words.append(f"--gpus-per-task={opts.gpus_per_task}")
    else:  # one torchrun agent per node, with the node's cores for its ranks
        words.append("--tasks-per-node=1")
    if opts.cpu_bind:
        words += ["-o", f"cpu-affinity={opts.cpu_bind}"]
    if opts.gpu_bind and launch.system.gpus_per_node:
        words += ["-o", f"gpu-affinity={opts.gpu_bind}"]
    return [*words, *opts.extra_args]


def local_agents(launch: Launch, slots: Slots) -> list[Word]:
    """This host: the job script's function starts `nodes` torchrun agents side by side
    (the first hosts the rendezvous) and stops them all when one fails."""
    return [LOCAL_AGENTS, str(slots.nodes * slots.per_node)]


def horovodrun(launch: Launch, slots: Slots) -> list[Word]:
    """This host: horovodrun starts every rank (through mpirun when Horovod has MPI, else
    its gloo rendezvous)."""
    ranks = slots.nodes * slots.per_node
    return [launch.program.python, "-m", "horovod.runner.launch", "-np", str(ranks),
            "-H", f"localhost:{ranks}"]


STARTERS: dict[str, Starter] = {"srun": srun, "mpiexec": mpiexec, "mpirun": mpirun,
                                "flux": flux_run}
RANKS = Ranks()
#: The entry-point group starters load from: a package names a Starter function there
#: (pyproject.toml names the built-ins), and a profile's `launcher:` may then name it.
GROUP = "scalestudy.launchers"
_PLUGINS: dict[str, Starter] = {}  # the third-party starters, once loaded
_LOADED: list[bool] = []


def _starters() -> dict[str, Starter]:
    """The built-in starters and every one the entry-point group names (loaded once). A
    plugin that does not load, is not callable or takes a built-in's name is one error
    naming its package, never a silent absence."""
    if not _LOADED:
        for name, start, where, dist in plugins.loaded(GROUP, "launcher"):
            if not callable(start):
                raise ScalestudyError(f"{where} is not a function")
            built_in = STARTERS.get(name)
            if name == "torchrun" or built_in not in (None, start):
                raise ScalestudyError(f"{where} takes the name of a built-in launcher: "
                                      f"rename it or uninstall {dist}")
            if built_in is None:
                _PLUGINS[name] = start
        _LOADED.append(True)
    return {**STARTERS, **_PLUGINS}


def starters() -> list[str]:
    """What can start ranks or torchrun's agents on a system's nodes."""
    return sorted(_starters())


def names() -> list[str]:
    """The launchers a profile may name: a starter, or torchrun (started by one)."""
    return sorted([*_starters(), "torchrun"])


@lru_cache(maxsize=64)
def launcher(name: str, via: str | None, system: str, horovod: bool, one_host: bool) -> Launcher:
    """The launcher of a system's runs, composed: `name` the profile's launcher, `via`
    what starts torchrun's agents. Horovod ranks join through MPI (or Horovod's own
    gloo rendezvous), not torchrun's: on a torchrun system a Horovod run starts one
    process per rank with the starter torchrun would have been started by."""
    if one_host:  # this host, no scheduler: the job script starts the agents itself
        if horovod:
            return Started(horovodrun, RANKS)
        return Started(local_agents, Torchrun(("--monitor-interval=1",)))
    torchrun = name == "torchrun"
    if torchrun:
        if via is None:
            raise ScalestudyError(
                f"system {system}: launcher torchrun needs launcher_options.torchrun_via "
                "(srun, mpiexec, mpirun or flux) to start one agent per node")
        name = via
    start = _starters().get(name)
    if start is None:
        raise ScalestudyError(f"unknown launcher {name!r}; valid launchers: "
                              f"{', '.join(names())}")
    inner = Torchrun() if torchrun and not horovod else GpuWrapper(RANKS)
    return Started(start, inner)


def launch_words(launch: Launch) -> list[Word]:
    """The launch command of a run on its system."""
    system = launch.system
    return launcher(system.launcher, system.launcher_options.torchrun_via, system.name,
                    launch.run.backend == "horovod", launch.one_host).words(launch)
