"""Queue limits and account lists as a scheduler states them, and the parsers of the
commands that state them (`scontrol show partition`, `sinfo`, `sacctmgr show assoc|qos`,
`qstat -Q|-B -f -F json`, `qmgr -c "list queue"`). Pure: execute.preflight runs them."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

#: Slurm's words for "no limit".
_UNLIMITED = {"UNLIMITED", "INFINITE", "NONE", "N/A", ""}
#: sinfo node states (long form, suffixes such as `*` or `~` stripped) that take no job.
_DOWN_STATES = {"down", "drained", "draining", "drain", "fail", "failing", "inval",
                "maint", "unknown", "future", "reboot_issued", "reboot_requested"}


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
    allow_qos: frozenset[str] | None = None  # None: every QOS
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
    qos: dict[str, QueueLimits] = field(default_factory=dict)
    default: str | None = None
    down_nodes: dict[str, int] = field(default_factory=dict)  # queue -> nodes taking no job

    def merge(self, other: QueueAnswer) -> None:
        """Add another command's answer (what is already known stays)."""
        for name, limits in other.queues.items():
            self.queues.setdefault(name, limits)
        for name, limits in other.qos.items():
            self.qos.setdefault(name, limits)
        self.default = self.default or other.default
        for name, count in other.down_nodes.items():
            self.down_nodes.setdefault(name, count)


def hms(seconds: int) -> str:
    """Seconds as `[D-]HH:MM:SS` (the walltime format of a spec)."""
    days, rest = divmod(int(seconds), 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def slurm_seconds(text: str) -> int | None:
    """A Slurm time (`30`, `30:00`, `1:00:00`, `2-00:00:00`, `UNLIMITED`) in seconds;
    None for no limit or an unreadable value."""
    text = text.strip()
    if text.upper() in _UNLIMITED:
        return None
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text)
    if not match:
        return None
    days, a, b, c = (int(g) if g else None for g in match.groups())
    if days is not None:  # D-H, D-H:M, D-H:M:S
        hours, minutes, seconds = a or 0, b or 0, c or 0
    elif c is not None:  # H:M:S
        hours, minutes, seconds = a or 0, b or 0, c
    else:  # M or M:S
        hours, minutes, seconds = 0, a or 0, b or 0
    return (((days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def pbs_seconds(value: Any) -> int | None:
    """A PBS walltime (`01:00:00`, `30:00`, `3600`, a JSON number) in seconds."""
    if isinstance(value, bool) or value is None:
        return None
    parts = str(value).strip().split(":")
    try:
        numbers = [float(p) for p in parts]
    except ValueError:
        return None
    if len(numbers) > 3:
        return None
    total = 0.0
    for number in numbers:
        total = total * 60 + number
    return int(total)


def _int(text: Any) -> int | None:
    try:
        return int(str(text).strip())
    except ValueError:
        return None


def _names(text: str) -> frozenset[str] | None:
    words = {w.strip().lower() for w in text.split(",") if w.strip()}
    return None if not words or "all" in words else frozenset(words)


# --------------------------------------------------------------------------- Slurm

def parse_scontrol_partitions(text: str, source: str = "scontrol show partition"
                              ) -> QueueAnswer:
    """`scontrol -a -o show partition`: one partition per line of key=value pairs."""
    answer = QueueAnswer()
    for line in text.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        name = fields.get("PartitionName")
        if not name:
            continue
        state = fields.get("State", "UP")
        max_nodes = fields.get("MaxNodes", "UNLIMITED")
        answer.queues[name] = QueueLimits(
            name, source,
            min_nodes=_int(fields.get("MinNodes", "")) or None,
            max_nodes=None if max_nodes.upper() in _UNLIMITED else _int(max_nodes),
            total_nodes=_int(fields.get("TotalNodes", "")),
            max_walltime_s=slurm_seconds(fields.get("MaxTime", "UNLIMITED")),
            closed=None if state == "UP" else f"State={state}",
            allow_accounts=_names(fields.get("AllowAccounts", "ALL")),
            allow_qos=_names(fields.get("AllowQos", "ALL")))
        if fields.get("Default") == "YES":
            answer.default = answer.default or name
    return answer


def parse_sinfo_states(text: str) -> QueueAnswer:
    """`sinfo -h -o %R|%T|%D`: the nodes of each partition that take no job (down,
    drained, failing, ...)."""
    answer = QueueAnswer()
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3 or not parts[2].strip().isdigit():
            continue
        name, state, count = parts[0], parts[1].strip().lower().rstrip("*~#!%$@^-+"), parts[2]
        answer.down_nodes.setdefault(name, 0)
        if state.split("+")[0] in _DOWN_STATES:
            answer.down_nodes[name] += int(count)
    return answer


def _tres_nodes(text: str) -> int | None:
    """`node=8,cpu=...` -> 8."""
    match = re.search(r"(?:^|,)node=(\d+)", text)
    return int(match.group(1)) if match else None


def parse_sacctmgr_qos(text: str, source: str = "sacctmgr show qos") -> QueueAnswer:
    """`sacctmgr -n -P show qos format=Name,MaxWall,MaxTRESPerJob,MinTRESPerJob,
    MaxJobsPU,MaxSubmitPU` (the per-user running and submitted job limits, where set)."""
    answer = QueueAnswer()
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 4 or not parts[0]:
            continue
        extra = [*parts[4:6], "", ""][:2]
        answer.qos[parts[0].lower()] = QueueLimits(
            parts[0], source, min_nodes=_tres_nodes(parts[3]),
            max_nodes=_tres_nodes(parts[2]), max_walltime_s=slurm_seconds(parts[1]),
            max_running=_int(extra[0]), max_jobs=_int(extra[1]))
    return answer


def parse_sacctmgr_accounts(text: str) -> dict[str, set[str]]:
    """`sacctmgr -n -P show assoc user=U format=Account,Partition,QOS`: account ->
    the partitions its associations name ("" = every partition). Names in lower case
    (Slurm stores them so)."""
    accounts: dict[str, set[str]] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if parts and parts[0]:
            accounts.setdefault(parts[0].lower(), set()).add(
                parts[1].strip() if len(parts) > 1 else "")
    return accounts


# --------------------------------------------------------------------------- PBS

def _pbs_queue(name: str, attrs: dict[str, Any], source: str) -> QueueLimits:
    """One queue's attributes (JSON: nested resources_max/min; qmgr: dotted keys)."""
    def get(group: str, key: str) -> Any:
        nested = attrs.get(group)
        return nested.get(key) if isinstance(nested, dict) else attrs.get(f"{group}.{key}")

    closed = [f"{key} = {attrs.get(key)}" for key in ("enabled", "started")
              if str(attrs.get(key, "True")).strip().lower() not in ("true", "1")]
    return QueueLimits(
        name, source, min_nodes=_int(get("resources_min", "nodect")),
        max_nodes=_int(get("resources_max", "nodect")),
        min_walltime_s=pbs_seconds(get("resources_min", "walltime")),
        max_walltime_s=pbs_seconds(get("resources_max", "walltime")),
        closed=", ".join(closed) or None,
        max_jobs=_per_user(attrs.get("max_queued")),
        max_running=_per_user(attrs.get("max_run")) or _int(attrs.get("max_user_run")))


def _per_user(value: Any) -> int | None:
    """PBS Pro's per-user limit in a limit attribute (`[u:PBS_GENERIC=1]`, the PBS
    Professional Administrator's Guide, "Setting limits"); None where there is none."""
    match = re.search(r"\[u:PBS_GENERIC=(\d+)\]", str(value or ""))
    return int(match.group(1)) if match else None


def parse_qstat_queues(text: str, source: str = "qstat -Q -f") -> QueueAnswer:
    """`qstat -Q -f -F json`: every queue with its limits and whether it is enabled and
    started."""
    data = json.loads(text)
    queues = data.get("Queue", {}) if isinstance(data, dict) else {}
    answer = QueueAnswer()
    for name, attrs in queues.items():
        if isinstance(attrs, dict):
            answer.queues[name] = _pbs_queue(name, attrs, source)
    return answer


def parse_qstat_server(text: str) -> QueueAnswer:
    """`qstat -B -f -F json`: the server's default queue."""
    data = json.loads(text)
    servers = data.get("Server", {}) if isinstance(data, dict) else {}
    answer = QueueAnswer()
    for attrs in servers.values():
        if isinstance(attrs, dict) and attrs.get("default_queue"):
            answer.default = str(attrs["default_queue"])
    return answer


def parse_qmgr_queues(text: str, source: str = 'qmgr -c "list queue"') -> QueueAnswer:
    """`qmgr -c "list queue @default"`: `Queue NAME` blocks of `key = value` lines."""
    answer = QueueAnswer()
    for block in re.split(r"^(?=Queue )", text, flags=re.M):
        head = re.match(r"Queue (\S+)", block)
        if head:
            attrs = dict(re.findall(r"^\s+([\w.]+) = (.*?)\s*$", block, flags=re.M))
            answer.queues[head.group(1)] = _pbs_queue(head.group(1), attrs, source)
    return answer
