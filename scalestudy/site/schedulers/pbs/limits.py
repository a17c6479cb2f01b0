"""What PBS Pro says of its queues and server: the parsers of `qstat -Q|-B -f -F json`
and `qmgr -c "list queue"`, into site.queues' form."""

from __future__ import annotations

import json
import re
from typing import Any

from scalestudy.site.queues import QueueAnswer, QueueLimits, to_int


def pbs_seconds(value: object) -> int | None:
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



def _pbs_queue(name: str, attrs: dict[str, Any], source: str) -> QueueLimits:
    """One queue's attributes (JSON: nested resources_max/min; qmgr: dotted keys)."""
    def get(group: str, key: str) -> Any:
        nested = attrs.get(group)
        return nested.get(key) if isinstance(nested, dict) else attrs.get(f"{group}.{key}")

    closed = [f"{key} = {attrs.get(key)}" for key in ("enabled", "started")
              if str(attrs.get(key, "True")).strip().lower() not in ("true", "1")]
    return QueueLimits(
        name, source, min_nodes=to_int(get("resources_min", "nodect")),
        max_nodes=to_int(get("resources_max", "nodect")),
        min_walltime_s=pbs_seconds(get("resources_min", "walltime")),
        max_walltime_s=pbs_seconds(get("resources_max", "walltime")),
        closed=", ".join(closed) or None,
        max_jobs=_per_user(attrs.get("max_queued")),
        max_running=_per_user(attrs.get("max_run")) or to_int(attrs.get("max_user_run")))


def _per_user(value: object) -> int | None:
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
