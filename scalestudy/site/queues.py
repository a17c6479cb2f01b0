"""Queue limits as a scheduler states them, in one form for every scheduler (each
scheduler parses its own commands' answers into it). Pure: execute.preflight runs them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class QueueLimits:
    """What one queue, partition or QOS takes: node counts, walltimes, who may use it."""

    name: str
    source: str  # where the limits come from: a command, or a profile
    min_nodes: int | None = None
    max_nodes: int | None = None
    total_nodes: int | None = None  # nodes it has (Slurm TotalNodes)
    min_walltime_s: int | None = None
    max_walltime_s: int | None = None
    walltime_by_nodes: tuple[tuple[int, int], ...] = ()  # (up to N nodes, longest s)
    closed: str | None = None  # why it takes or runs no job, e.g. "State=DOWN"
    allow_accounts: frozenset[str] | None = None  # None: every account
    #: The pools of the scheduler's limited option (Slurm's QOS) it admits (None: every one).
    allow_pools: frozenset[str] | None = None
    max_jobs: int | None = None  # one user's jobs in it at once, running or waiting
    max_running: int | None = None  # one user's jobs running at once
    jobs_source: str | None = None  # where the job limits come from (None: `source`)

    def longest(self, nodes: int) -> int | None:
        """The longest walltime (s) a job of `nodes` nodes may ask for (None: no limit)."""
        for upto, seconds in sorted(self.walltime_by_nodes):
            if nodes <= upto:
                return seconds
        return self.max_walltime_s

    def takes(self, nodes: int, walltime_s: int) -> bool:
        """Whether a job of this size and walltime fits these limits."""
        longest = self.longest(nodes)
        return (self.closed is None and nodes >= (self.min_nodes or 1)
                and nodes <= min(self.max_nodes or nodes, self.total_nodes or nodes)
                and (longest is None or walltime_s <= longest)
                and walltime_s >= (self.min_walltime_s or 0))

    def describe(self) -> str:
        """`1-2 nodes and 00:10:00`, in the words of the limits that are set."""
        low, high = self.min_nodes or 1, self.max_nodes or self.total_nodes
        nodes = f"{low}-{high} nodes" if high else f"{low}+ nodes"
        if self.walltime_by_nodes:
            times = ", ".join(f"{hms(s)} up to {n}" for n, s in sorted(self.walltime_by_nodes))
            return f"{nodes} and {times} nodes"
        return f"{nodes} and {hms(self.max_walltime_s)}" if self.max_walltime_s else nodes


@dataclass
class QueueAnswer:
    """What the scheduler said about its queues (several commands' answers merged)."""

    queues: dict[str, QueueLimits] = field(default_factory=dict)
    #: The limits of the pools its limited option names (Slurm's QOS), by lower-case name.
    pools: dict[str, QueueLimits] = field(default_factory=dict)
    default: str | None = None
    down_nodes: dict[str, int] = field(default_factory=dict)  # queue -> nodes taking no job

    def merge(self, other: QueueAnswer) -> None:
        """Add another command's answer (what is already known stays)."""
        for name, limits in other.queues.items():
            self.queues.setdefault(name, limits)
        for name, limits in other.pools.items():
            self.pools.setdefault(name, limits)
        self.default = self.default or other.default
        for name, count in other.down_nodes.items():
            self.down_nodes.setdefault(name, count)


def hms(seconds: int) -> str:
    """Seconds as `[D-]HH:MM:SS` (the walltime format of a spec)."""
    days, rest = divmod(int(seconds), 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def to_int(text: object) -> int | None:
    """An integer, from a number or its text; None for anything else."""
    try:
        return int(str(text).strip())
    except ValueError:
        return None


def names_or_all(text: str) -> frozenset[str] | None:
    """`a,B` -> {a, b}; None for `ALL` or nothing (every name allowed)."""
    words = {w.strip().lower() for w in text.split(",") if w.strip()}
    return None if not words or "all" in words else frozenset(words)
