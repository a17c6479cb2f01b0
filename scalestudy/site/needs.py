"""What a job script needs from the site beyond the scheduler: the commands it calls by
name (the launcher, the GPU wrapper, the profile's helpers) on PATH, and a Python the
compute nodes can run (on a shared filesystem, a venv on a shared base). Pure: it judges
what execute.preflight found on this host; site.preflight reports it."""

from __future__ import annotations

import re

from scalestudy.core.containers import Container
from scalestudy.site import containers
from scalestudy.site.plan import Plan

ERROR, WARNING = "error", "warning"
#: (problems as (severity, text), what was checked and found right)
Found = tuple[list[tuple[str, str]], list[str]]


def helper_names(plan: Plan) -> list[str]:
    """The commands a job script calls by name that a site may lack: the launcher, the
    per-rank GPU wrapper, and the profile's `helpers`."""
    launcher = plan.system.launcher
    wrapper = plan.system.launcher_options.gpu_wrapper if plan.system.gpus_per_node else None
    return list(dict.fromkeys([launcher, *([wrapper] if wrapper else []),
                               *plan.system.helpers]))


#: Paths that exist on one host only: a Python there is not the compute nodes'.
NODE_LOCAL = ("/tmp/", "/var/tmp/", "/dev/shm/", "/run/", "/local/", "/scratch/local/")


def helpers(plan: Plan, on_path: dict[str, str | None], host: str) -> Found:
    """Every command the job script calls by name, on this host's PATH (`on_path`: name ->
    where PATH found it; the jobs find them through theirs, after the setup lines), with
    where to get a missing one."""
    setup = " ".join([*plan.system.setup, *plan.study.job.setup])
    found, problems = [], []
    for name in helper_names(plan):
        where = on_path.get(name, "unchecked")
        if where == "unchecked":
            continue
        if where:
            found.append(name)
            continue
        get = plan.system.helpers.get(name)
        launcher = name == plan.system.launcher
        after = bool(re.search(r"(?<![A-Z_])PATH=", setup)) or name in setup  # may bring it
        severity = WARNING if launcher or after else ERROR
        role = ("the launcher that starts the ranks" if launcher else
                "the per-rank GPU wrapper" if name == plan.system.launcher_options.gpu_wrapper
                else "a helper the profile names")
        problems.append((severity, f"{name} ({role}; the job script calls it) is not on PATH "
                         f"on {host}" + (" (the setup lines may add it on the compute nodes)"
                                         if after else "")
                         + (f": get it from {get}" if get else
                            ": run scalestudy on a login node of the system, or load its "
                            "module")))
    return problems, [f"{', '.join(found)} on PATH"] if found else []


def _under(path: str, prefixes: list[str]) -> str | None:
    return next((p for p in prefixes if path == p or path.startswith(p.rstrip("/") + "/")),
                None)


def shared(plan: Plan, python: str, named: str, host: str, home: str | None) -> Found:
    """The jobs' Python must be visible from the compute nodes (not on this host's own
    disk; under a filesystem the profile says they share), and so must the Python its
    venv is built on (`home`, from its pyvenv.cfg); a venv on another base than the
    module the setup lines load may not run there. Judged only where the profile says
    what its nodes share: a profile that does not (a generic one, a one-host testbed
    whose "nodes" see this host's /tmp) gives nothing to judge against."""
    filesystems = plan.system.shared_filesystems
    who = f"{python} ({named})"
    if not filesystems:
        return [], []
    if python.startswith(NODE_LOCAL):
        return [(ERROR, f"{who} is on a disk of this host only ({host}): the compute nodes "
                 "cannot run it; build the venv on a shared filesystem and set job.python "
                 "to it")], []
    if _under(python, filesystems) is None:
        return [(WARNING, f"{who} is not under a filesystem that system {plan.system.name} "
                 f"shares with its compute nodes ({', '.join(filesystems)}): the jobs would "
                 "not find it; build the venv there and set job.python to it")], []
    if home is None:
        return [], [f"{python} is on a shared filesystem ({_under(python, filesystems)})"]
    modules = " ".join(line for line in [*plan.system.setup, *plan.study.job.setup]
                       if "module load" in line or "conda activate" in line)
    if _under(home, filesystems) is None:
        return [(WARNING, f"{who} is a venv built on {home}, which is not on a filesystem "
                 f"the compute nodes share ({', '.join(filesystems)})"
                 + (f", and not on the Python the setup lines load ({modules})" if modules
                    else "") + ": its base may be missing there or differ; build the venv "
                 "from the module's Python (after `module load ...`, `python -m venv "
                 "--system-site-packages DIR`)")], []
    return [], [f"{python} is on a shared filesystem ({_under(python, filesystems)}), a "
                f"venv built on {home}"]


def _containers(plan: Plan) -> list[tuple[str, Container]]:
    """The study's containers, each with its key in the spec."""
    study = plan.study
    entries = study.container_entries()
    return [(study.line_of(("grid", "container", i) if study.grid.container is not None
                           else ("container",)), e)
            for i, e in enumerate(entries) if isinstance(e, Container)]


def runtime_commands(plan: Plan) -> list[str]:
    """The commands the study's container runtimes run (ch-run, apptainer, ...)."""
    return list(dict.fromkeys(containers.runtime(c.runtime).command
                              for _, c in _containers(plan)
                              if c.runtime in containers.RUNTIMES))


def image_targets(plan: Plan) -> dict[str, list[str]]:
    """Each image, with the bind targets that must exist inside it (a runtime without an
    overlay to create them: Charliecloud, Shifter) for this study's runs."""
    study_dir = str(plan.directory.resolve())
    out: dict[str, list[str]] = {}
    for _, c in _containers(plan):
        found = containers.RUNTIMES.get(c.runtime)
        site = plan.system.containers.get(c.runtime)
        binds = containers.binds_of(c, site, study_dir) if found is not None else []
        targets = [b.split(":", 1)[-1] for b in binds] if found and found.targets_must_exist \
            else []
        targets += list(found.image_files) if found else []
        out.setdefault(c.image, [])
        out[c.image] += [t for t in targets if t not in out[c.image]]
    return out


def runtimes(plan: Plan, on_path: dict[str, str | None], host: str) -> Found:
    """Each container runtime's command on this host's PATH (the site's setup lines for
    it may load it on the nodes: then a warning)."""
    problems, found = [], []
    for where, c in _containers(plan):
        command = containers.RUNTIMES[c.runtime].command if c.runtime in \
            containers.RUNTIMES else None
        if command is None or command not in on_path:
            continue
        if on_path[command]:
            found.append(command)
            continue
        site = plan.system.containers.get(c.runtime)
        setup = " ".join([*plan.system.setup, *plan.study.job.setup,
                          *(site.setup if site else [])])
        later = plan.scheduler.queued and (command in setup or "module load" in setup)
        problems.append((WARNING if later else ERROR,
                         f"{where}: {command} ({c.runtime}, which starts each rank's "
                         f"container) is not on PATH on {host}"
                         + (" (the setup lines may load it on the compute nodes)" if later
                            else f": install {c.runtime} or load its module, or run the "
                            "study bare (`container: none`)")))
    unique = list(dict.fromkeys(found))
    return problems, [f"{', '.join(unique)} on PATH"] if unique else []


def images(plan: Plan, kinds: dict[str, str], targets: dict[str, dict[str, bool]],
           host: str) -> Found:
    """Each image where the nodes can see it: there at all, not on this host's own disk
    when other nodes run it, under a filesystem the profile says they share; and a
    directory image that cannot create bind targets has them."""
    problems: list[tuple[str, str]] = []
    found: list[str] = []
    filesystems = plan.system.shared_filesystems
    for where, c in _containers(plan):
        kind = kinds.get(c.image)
        if kind is None or kind == "reference":
            continue
        if kind == "missing":
            problems.append((ERROR, f"{where}: container image {c.image} not found on "
                             f"{host}: build or copy it there (a path the compute nodes "
                             "see), or fix the path"))
            continue
        if plan.scheduler.queued and c.image.startswith(NODE_LOCAL):
            problems.append((ERROR, f"{where}: container image {c.image} is on a disk of "
                             f"{host} only: the compute nodes cannot see it; put it on a "
                             "shared filesystem"))
            continue
        if plan.scheduler.queued and filesystems and _under(c.image, filesystems) is None:
            problems.append((WARNING, f"{where}: container image {c.image} is not under a "
                             f"filesystem system {plan.system.name} shares with its nodes "
                             f"({', '.join(filesystems)})"))
        missing = [t for t, there in targets.get(c.image, {}).items() if not there]
        if missing:
            problems.append((ERROR, f"{where}: {c.runtime} binds onto paths the image must "
                             f"already have, and {c.image} lacks {', '.join(missing)}: "
                             "create them in the image ("
                             + "; ".join(f"touch {c.image.rstrip('/')}{t}" if t.startswith(
                                 "/etc/") else f"mkdir -p {c.image.rstrip('/')}{t}"
                                         for t in missing) + ")"))
            continue
        found.append(c.image)
    unique = list(dict.fromkeys(found))
    return problems, [f"container image {', '.join(unique)}"] if unique else []
