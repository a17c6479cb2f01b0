"""MLPerf Training result logs (`:::MLLOG` lines): time to train, from run_start to
run_stop, where run_stop says the run succeeded; an aborted run is recorded as aborted."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any

from scalestudy.results.history.imports.common import Imported, ImportPoint

EXPECTED = "`:::MLLOG` lines with run_start and run_stop"


def read(text: str, gpus: int | None) -> list[Imported]:
    """The one measurement of a result log: minutes to train (a result only when
    run_stop's status is success)."""
    events: dict[str, Any] = {}
    for line in text.splitlines():
        # a record may follow other text on its line (a log's own print without newline)
        _, sep, rest = line.partition(":::MLLOG")
        if not sep:
            continue
        try:
            event = json.loads(rest.strip())
        except ValueError:
            continue
        key = event.get("key")
        if key in ("run_start", "run_stop") or key not in events:
            events[key] = event
    start, stop = events.get("run_start"), events.get("run_stop")
    if start is None or stop is None:
        return []
    status = str((stop.get("metadata") or {}).get("status") or "unknown")
    minutes = (stop["time_ms"] - start["time_ms"]) / 60000

    def value(key: str) -> Any:
        return events[key].get("value") if key in events else None

    platform = value("submission_platform")
    nodes = re.match(r"^(\d+)x", str(platform or ""))
    details = {"status": status, "platform": platform, "org": value("submission_org"),
               "division": value("submission_division"), "epochs": value("epoch_count")}
    ended = datetime.fromtimestamp(stop["time_ms"] / 1000, timezone.utc)
    point: ImportPoint = {"model": value("submission_benchmark"), "world_size": gpus,
             "nodes": int(nodes.group(1)) if nodes else None,
             "global_batch": value("global_batch_size")}
    if status != "success":  # aborted (did not reach the target): no time to train
        return [Imported(point, None, "minutes to train",
                         {**details, "minutes_until_stop": round(minutes, 3),
                          "why": f"run_stop says status {status!r}: the run did not reach "
                          "its target, so it has no time to train"},
                         status="aborted", ended=ended)]
    return [Imported(point, minutes, "minutes to train", details, ended=ended)]
