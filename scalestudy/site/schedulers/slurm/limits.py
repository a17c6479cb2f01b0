"""What Slurm says of its partitions, QOSes, nodes and accounts: the parsers of
`scontrol show partition`, `sinfo`, `sacctmgr show qos|assoc`, into site.queues' form."""

from __future__ import annotations

import re

from scalestudy.site.queues import QueueAnswer, QueueLimits, names_or_all, to_int

#: Slurm's words for "no limit".
_UNLIMITED = {"UNLIMITED", "INFINITE", "NONE", "N/A", ""}
#: sinfo node states (long form, suffixes such as `*` or `~` stripped) that take no job.
_DOWN_STATES = {"down", "drained", "draining", "drain", "fail", "failing", "inval",
                "maint", "unknown", "future", "reboot_issued", "reboot_requested"}


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
            min_nodes=to_int(fields.get("MinNodes", "")) or None,
            max_nodes=None if max_nodes.upper() in _UNLIMITED else to_int(max_nodes),
            total_nodes=to_int(fields.get("TotalNodes", "")),
            max_walltime_s=slurm_seconds(fields.get("MaxTime", "UNLIMITED")),
            closed=None if state == "UP" else f"State={state}",
            allow_accounts=names_or_all(fields.get("AllowAccounts", "ALL")),
            allow_pools=names_or_all(fields.get("AllowQos", "ALL")))
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
        answer.pools[parts[0].lower()] = QueueLimits(
            parts[0], source, min_nodes=_tres_nodes(parts[3]),
            max_nodes=_tres_nodes(parts[2]), max_walltime_s=slurm_seconds(parts[1]),
            max_running=to_int(extra[0]), max_jobs=to_int(extra[1]))
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
