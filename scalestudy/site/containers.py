"""Container runtimes: the words that start one rank inside an image, the launcher
outside (srun, mpiexec, mpirun, flux run, torchrun's agents start one container per rank).

Pure, a registry like the schedulers': each runtime says what it runs (`command`, which
preflight looks for), how it prints its version (provenance), the documentation its form
follows, and turns a spec's container, the site's settings for it (the profile's
`containers:`: GPU flags, fabric-library binds, setup lines) and the directories to bind
into the rank's prefix, or, for pyxis, into srun's own options. Every word comes from a
spec or a profile and is shell-quoted by the template.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scalestudy.core.containers import Container
from scalestudy.core.errors import Loc, ScalestudyError

if TYPE_CHECKING:
    from scalestudy.core.spec import Study
    from scalestudy.site.profiles import ContainerSite, SystemProfile


@dataclass(frozen=True)
class Boxed:
    """A run's container as its launch line needs it."""

    label: str
    runtime: str
    image: str
    python: str  # the Python inside that runs the bundled benchmark
    prefix: tuple[str, ...]  # words before the rank's command
    starter_args: tuple[str, ...] = ()  # the starter's own options (pyxis: srun's)
    setup: tuple[str, ...] = ()  # the site's shell lines before the launch
    version_command: str = ""  # a shell command printing the runtime's version


@dataclass(frozen=True)
class Words:
    """What one runtime renders: (the rank's prefix, the starter's options)."""

    prefix: list[str]
    starter_args: list[str]


Render = Callable[[Container, list[str], list[str], Sequence[str]], Words]


@dataclass(frozen=True)
class Runtime:
    """One container runtime: its command, version, documentation and rendering."""

    name: str
    command: str  # on PATH on the nodes (preflight); pyxis: srun with the plugin
    version_command: str  # scalestudy's own shell text (nothing from a spec)
    source: str  # the documentation its form follows
    render: Render
    #: the one starter it runs under (pyxis is an srun plugin), None: any
    starter: str | None = None
    #: a bind's target must exist in the image (no overlay to create it): preflight checks
    #: a directory image for it
    targets_must_exist: bool = False
    #: directories every container of it sees without a bind (ch-run binds /tmp)
    shared: tuple[str, ...] = ()
    #: files a directory image must have for the runtime to bind the host's onto them
    image_files: tuple[str, ...] = ()


def _pairs(binds: list[str]) -> list[str]:
    return [b if ":" in b else f"{b}:{b}" for b in binds]


def _apptainer(executable: str) -> Render:
    def render(c: Container, options: list[str], binds: list[str],
               env_names: Sequence[str]) -> Words:
        words = [executable, "exec", *options]
        for bind in binds:
            words += ["-B", bind]
        return Words([*words, c.image], [])
    return render


def _charliecloud(c: Container, options: list[str], binds: list[str],
                  env_names: Sequence[str]) -> Words:
    # ch-run binds the host's $TMPDIR at /tmp: pinned to /tmp, the container's /tmp is the
    # host's (a job script may point TMPDIR into the run directory, e.g. the local one's)
    words = ["env", "TMPDIR=/tmp", "ch-run"]
    for bind in _pairs(binds):
        words += ["-b", bind]
    return Words([*words, *options, c.image, "--"], [])


def _podman_hpc(c: Container, options: list[str], binds: list[str],
                env_names: Sequence[str]) -> Words:
    words = ["podman-hpc", "run", "--rm", *options]
    for name in env_names:  # podman passes no host variable it is not told to
        words += ["-e", name]
    for bind in _pairs(binds):
        words += ["-v", bind]
    return Words([*words, c.image], [])


def _shifter(c: Container, options: list[str], binds: list[str],
             env_names: Sequence[str]) -> Words:
    words = ["shifter", f"--image={c.image}", *options]
    for bind in _pairs(binds):
        words.append(f"--volume={bind}")
    return Words([*words, "--"], [])


def _pyxis(c: Container, options: list[str], binds: list[str],
           env_names: Sequence[str]) -> Words:
    args = [f"--container-image={c.image}"]
    if binds:
        args.append("--container-mounts=" + ",".join(_pairs(binds)))
    return Words([], [*args, *options])


RUNTIMES: dict[str, Runtime] = {r.name: r for r in (
    Runtime("apptainer", "apptainer", "apptainer --version", "Apptainer user guide "
            "(apptainer exec, --bind); ALCF 'Containers on Polaris', OLCF 'Containers on "
            "Frontier'", _apptainer("apptainer")),
    Runtime("singularity", "singularity", "singularity --version", "SingularityCE user "
            "guide (singularity exec, --bind)", _apptainer("singularity")),
    Runtime("charliecloud", "ch-run", "ch-run --version", "Charliecloud ch-run(1), 0.31: "
            "ch-run [-b SRC[:DST]] IMAGE -- CMD; a read-only image's bind targets must "
            "exist; the host's $TMPDIR is bound at /tmp, its /etc/hosts onto the image's",
            _charliecloud, targets_must_exist=True, shared=("/tmp",),
            image_files=("/etc/hosts",)),
    Runtime("podman-hpc", "podman-hpc", "podman-hpc infohpc", "NERSC podman-hpc (srun "
            "podman-hpc run --rm --gpu --mpi IMAGE CMD; -v SRC:DST, -e NAME)", _podman_hpc),
    Runtime("shifter", "shifter", "",
            "Shifter shifter(1): shifter --image=TYPE:TAG [--volume=SRC:DST] -- CMD; a "
            "volume's target must exist in the image", _shifter, targets_must_exist=True),
    Runtime("pyxis", "srun", "enroot version", "NVIDIA pyxis README: srun "
            "--container-image=IMAGE --container-mounts=SRC:DST[,...]", _pyxis,
            starter="srun"),
)}


def names() -> list[str]:
    """The runtimes a spec may name."""
    return sorted(RUNTIMES)


def runtime(name: str) -> Runtime:
    """A runtime by name; ScalestudyError with the valid names otherwise."""
    found = RUNTIMES.get(name)
    if found is None:
        raise ScalestudyError(f"unknown container runtime {name!r}; valid runtimes: "
                              f"{', '.join(names())}")
    return found


def binds_of(container: Container, site: ContainerSite | None, study_dir: str) -> list[str]:
    """What a container binds: the site's, the spec's, then the study's results directory
    where the runtime does not share it already (its runs write their records there)."""
    found = runtime(container.runtime)
    binds = [*(site.binds if site else []), *container.binds]
    if not any(study_dir == s or study_dir.startswith(s.rstrip("/") + "/")
               for s in found.shared):
        binds.append(study_dir)
    return binds


def boxed(container: Container, site: ContainerSite | None, study_dir: str,
          env_names: Sequence[str]) -> Boxed:
    """A run's container: the site's options and binds first (GPU flags, fabric
    libraries), then the spec's; the study's results directory is bound where the
    runtime does not share it already (its runs write their records there)."""
    found = runtime(container.runtime)
    binds = binds_of(container, site, study_dir)
    words = found.render(container, [*(site.options if site else []), *container.options],
                         binds, env_names)
    return Boxed(label=container.label, runtime=found.name, image=container.image,
                 python=container.python, prefix=tuple(words.prefix),
                 starter_args=tuple(words.starter_args),
                 setup=tuple(site.setup if site else ()),
                 version_command=found.version_command)


def checks(study: Study, system: SystemProfile) -> list[tuple[Loc, str]]:
    """What a study's containers ask that scalestudy or the system cannot do: a runtime
    it does not know, pyxis without srun starting the ranks."""
    problems: list[tuple[Loc, str]] = []
    entries = study.container_entries()
    for i, entry in enumerate(entries):
        if not isinstance(entry, Container):
            continue
        loc: Loc = ("grid", "container", i) if study.grid.container is not None \
            else ("container",)
        found = RUNTIMES.get(entry.runtime)
        if found is None:
            problems.append((loc, f"unknown container runtime {entry.runtime!r}; valid "
                             f"runtimes: {', '.join(names())}"))
            continue
        starter = system.launcher_options.torchrun_via if system.launcher == "torchrun" \
            else system.launcher
        if found.starter is not None and starter != found.starter:
            problems.append((loc, f"{found.name} is a plugin of {found.starter}, and system "
                             f"{system.name!r} starts ranks with {starter or system.launcher}: "
                             f"use another runtime there (apptainer, charliecloud)"))
    return problems
