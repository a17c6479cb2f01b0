"""What a job script needs from the site beyond the scheduler: the commands it calls by
name (the launcher, the GPU wrapper, the profile's helpers) on PATH, and a Python the
compute nodes can run (on a shared filesystem, a venv on a shared base). Pure: it judges
what execute.preflight found on this host; site.preflight reports it."""

from __future__ import annotations

import re

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
