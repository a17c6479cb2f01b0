"""Rank discovery: which rank am I, how many are we, where is rank 0 (pure, table driven).

The tables name the *launchers'* variables (torchrun, Open MPI, Flux, MPICH/PALS, srun):
what each sets in every rank. A scheduler adds nothing here: its job script starts the
ranks with one of these launchers and exports MASTER_ADDR and MASTER_PORT (site/ports.py;
tests/nohup_scheduler.py is a scheduler that touches no other module). Only a new
launcher adds a row. The Slurm host lists and PBS_NODEFILE are fallbacks for rank 0's
host when the workload runs outside a scalestudy script.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

DEFAULT_MASTER_ADDR = "127.0.0.1"
DEFAULT_MASTER_PORT = 29500

_SLURM_NODELISTS = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")

# Launcher family -> field -> environment variables, tried in order. A family is present
# when both its rank and world_size resolve; the first present family wins. MPI families
# come before Slurm because `mpirun` inside an sbatch script inherits the batch step's
# SLURM_PROCID=0 / SLURM_NTASKS=N in every rank.
LAUNCHERS: tuple[tuple[str, Mapping[str, tuple[str, ...]]], ...] = (
    (
        "torchrun",
        {
            "rank": ("RANK",),
            "world_size": ("WORLD_SIZE",),
            "local_rank": ("LOCAL_RANK",),
            "local_world_size": ("LOCAL_WORLD_SIZE",),
            "node_rank": ("GROUP_RANK",),
            "num_nodes": ("GROUP_WORLD_SIZE",),
            "master_addr": ("MASTER_ADDR",),
            "master_port": ("MASTER_PORT",),
        },
    ),
    (
        "openmpi",
        {
            "rank": ("OMPI_COMM_WORLD_RANK",),
            "world_size": ("OMPI_COMM_WORLD_SIZE",),
            "local_rank": ("OMPI_COMM_WORLD_LOCAL_RANK",),
            "local_world_size": ("OMPI_COMM_WORLD_LOCAL_SIZE",),
        },
    ),
    (
        "flux",
        {  # `flux run`: its tasks also get PMI_RANK/PMI_SIZE, but no local rank
            "rank": ("FLUX_TASK_RANK",),
            "world_size": ("FLUX_JOB_SIZE",),
            "local_rank": ("FLUX_TASK_LOCAL_ID",),
            "num_nodes": ("FLUX_JOB_NNODES",),
        },
    ),
    (
        "mpich",
        {  # MPICH hydra, Cray PALS (Polaris/Aurora mpiexec), PMIx
            "rank": ("PMI_RANK", "PALS_RANKID", "PMIX_RANK"),
            "world_size": ("PMI_SIZE",),
            "local_rank": ("PMI_LOCAL_RANK", "PALS_LOCAL_RANKID", "MPI_LOCALRANKID"),
            "local_world_size": ("PMI_LOCAL_SIZE", "PALS_LOCAL_SIZE", "MPI_LOCALNRANKS"),
            "node_rank": ("PALS_NODEID",),
        },
    ),
    (
        "slurm",
        {
            "rank": ("SLURM_PROCID",),
            "world_size": ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"),
            "local_rank": ("SLURM_LOCALID",),
            "local_world_size": (
                "SLURM_STEP_TASKS_PER_NODE",
                "SLURM_NTASKS_PER_NODE",
                "SLURM_TASKS_PER_NODE",
            ),
            "node_rank": ("SLURM_NODEID",),
            "num_nodes": ("SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"),
            "master_addr": ("MASTER_ADDR", *_SLURM_NODELISTS, "SLURM_LAUNCH_NODE_IPADDR"),
        },
    ),
)

# Used for a field a family does not give (and for a single process).
FALLBACK: Mapping[str, tuple[str, ...]] = {
    "master_addr": ("MASTER_ADDR", *_SLURM_NODELISTS, "PBS_NODEFILE"),
    "master_port": ("MASTER_PORT",),
}

_INT_FIELDS = ("rank", "world_size", "node_rank", "num_nodes", "local_rank", "local_world_size")


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits in the job."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    num_nodes: int = 1
    master_addr: str = DEFAULT_MASTER_ADDR
    master_port: int = DEFAULT_MASTER_PORT
    source: str = "single"


def iter_hostlist(hostlist: str) -> Iterator[str]:
    """Yield the hosts of a Slurm hostlist such as ``nid[001-003,007],login1``."""
    for item in _split_top_level(hostlist):
        yield from _expand_item(item)


def expand_hostlist(hostlist: str) -> list[str]:
    """All hosts of a Slurm hostlist, in order."""
    return list(iter_hostlist(hostlist))


def first_host(hostlist: str) -> str:
    """The first host of a Slurm hostlist (without expanding the rest)."""
    for host in iter_hostlist(hostlist):
        return host
    raise ValueError(f"empty host list {hostlist!r}")


def _split_top_level(text: str) -> list[str]:
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "[") - (ch == "]")
        if depth < 0 or depth > 1:
            raise ValueError(f"unbalanced brackets in host list {text!r}")
        if ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced brackets in host list {text!r}")
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def _expand_item(item: str) -> Iterator[str]:
    open_at = item.find("[")
    if open_at < 0:
        yield item
        return
    close_at = item.index("]", open_at)
    prefix, body, rest = item[:open_at], item[open_at + 1 : close_at], item[close_at + 1 :]
    for part in body.split(","):
        lo, dash, hi = part.strip().partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ValueError(f"bad range {part!r} in host list {item!r}")
        if dash and int(hi) < int(lo):
            raise ValueError(f"descending range {part!r} in host list {item!r}")
        for n in range(int(lo), int(hi if dash else lo) + 1):
            for tail in _expand_item(rest):
                yield f"{prefix}{n:0{len(lo)}d}{tail}"


def tasks_per_node(value: str) -> list[int]:
    """Expand Slurm's SLURM_TASKS_PER_NODE syntax: ``2(x3),1`` -> ``[2, 2, 2, 1]``."""
    counts: list[int] = []
    for part in value.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not match:
            raise ValueError(f"bad tasks-per-node value {value!r}")
        counts += [int(match[1])] * int(match[2] or 1)
    return counts


def _read_first_line(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                return line.strip()
    raise ValueError(f"PBS_NODEFILE {path!r} is empty")


def _per_node(raw: str, node_rank: int) -> int:
    counts = tasks_per_node(raw)
    return counts[node_rank] if node_rank < len(counts) else counts[0]


# Variables whose value needs more than int()/str(): (raw value, node rank so far) -> value.
_CONVERTERS: dict[str, Callable[[str, int], int | str]] = {
    **{name: lambda raw, _n: first_host(raw) for name in _SLURM_NODELISTS},
    **{
        name: _per_node
        for name in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
    },
    "PBS_NODEFILE": lambda raw, _n: _read_first_line(raw),
}


def _lookup(environ: Mapping[str, str], names: tuple[str, ...], field: str, node_rank: int
            ) -> int | str | None:
    for name in names:
        raw = environ.get(name, "").strip()
        if not raw:
            continue
        if name in _CONVERTERS:
            return _CONVERTERS[name](raw, node_rank)
        if field != "master_addr":
            try:
                return int(raw)
            except ValueError:
                raise ValueError(f"{name}={raw!r} is not an integer") from None
        return raw
    return None


def _resolve(environ: Mapping[str, str], table: Mapping[str, tuple[str, ...]]
             ) -> tuple[dict[str, int | None], str | None]:
    """The integer fields a family's table finds (None: not given), and rank 0's host."""
    found: dict[str, int | None] = {}
    for field in (*_INT_FIELDS, "master_port"):
        names = table.get(field) or FALLBACK.get(field, ())
        value = _lookup(environ, names, field, found.get("node_rank") or 0)
        found[field] = int(value) if value is not None else None
    addr = _lookup(environ, table.get("master_addr") or FALLBACK["master_addr"], "master_addr",
                   found.get("node_rank") or 0)
    return found, (str(addr) if addr is not None else None)


def discover(environ: Mapping[str, str]) -> DistEnv:
    """Find this process's place from the first launcher family present in ``environ``."""
    for source, table in LAUNCHERS:
        if all(_lookup(environ, table[f], f, 0) is not None for f in ("rank", "world_size")):
            return _complete(source, *_resolve(environ, table))
    found, addr = _resolve(environ, {})
    single = dict.fromkeys(_INT_FIELDS, 0) | {"world_size": 1, "local_world_size": 1,
                                               "num_nodes": 1}
    return _complete("single", found | single, addr)


def _complete(source: str, found: Mapping[str, int | None], addr: str | None) -> DistEnv:
    """Derive what the launcher left out (block placement assumed) and check ranges."""
    world, rank, num_nodes = found["world_size"], found["rank"], found["num_nodes"]
    assert world is not None and rank is not None, "a present family gives both"
    local_size = found["local_world_size"]
    if local_size is None:
        even = num_nodes is not None and num_nodes > 0 and world % num_nodes == 0
        local_size = world // num_nodes if even and num_nodes else world
    local_size = max(local_size, 1)
    local_rank, node_rank = found["local_rank"], found["node_rank"]
    env = DistEnv(
        rank=rank,
        world_size=world,
        local_rank=rank % local_size if local_rank is None else local_rank,
        local_world_size=local_size,
        node_rank=rank // local_size if node_rank is None else node_rank,
        num_nodes=-(-world // local_size) if num_nodes is None else num_nodes,
        master_addr=addr or DEFAULT_MASTER_ADDR,
        master_port=found["master_port"] or DEFAULT_MASTER_PORT,
        source=source,
    )
    checks = (
        (env.world_size >= 1, f"world size {env.world_size} < 1"),
        (0 <= env.rank < env.world_size, f"rank {env.rank} not in [0, {env.world_size})"),
        (
            0 <= env.local_rank < env.local_world_size,
            f"local rank {env.local_rank} not in [0, {env.local_world_size})",
        ),
        (
            0 <= env.node_rank < env.num_nodes,
            f"node rank {env.node_rank} not in [0, {env.num_nodes})",
        ),
        (0 < env.master_port < 65536, f"master port {env.master_port} not in [1, 65535]"),
    )
    problems = [message for ok, message in checks if not ok]
    if problems:
        raise ValueError(f"inconsistent {source} environment: " + "; ".join(problems))
    return env
