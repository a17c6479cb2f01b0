"""What every import reader shares: the measurement record, numbers as the tools print
them, and the dates logs carry."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TypedDict

from scalestudy.core.values import JSONObject

#: A measurement that is one (`completed`), or what the log says instead: the run was
#: aborted (or its output cut off), it logged only warm-up steps, or the tool found its
#: own results wrong (nccl-tests' `#wrong`). Only `completed` is a result.
STATUSES: tuple[str, ...] = ("completed", "aborted", "warmup_only", "wrong_results")


class ImportPoint(TypedDict, total=False):
    """What an imported measurement ran: the store's point columns where the tool says
    them, and what else tells two of its measurements apart (stored in the params)."""

    model: str | None
    world_size: int | None
    nodes: int | None
    batch_size: int | None
    global_batch: int | None
    collective: str | None  # nccl-tests
    message_bytes: int
    dtype: str | None
    redop: str | None
    partition: str | None  # ReFrame
    environ: str | None
    perf_var: str


@dataclass(frozen=True)
class Imported:
    """One measurement read from a file: its point, value, unit and what else it said;
    `status` other than completed: not a result (value is then what the log said, for
    the record); `ended`: when the log says it ended (None: it does not say)."""

    point: ImportPoint
    value: float | None  # the throughput (or bus bandwidth, or time to train)
    unit: str
    details: JSONObject = field(default_factory=dict)
    status: str = "completed"
    ended: datetime | None = None


#: Terminal colours, with or without their escape byte (logs that were copied lose it).
ANSI = re.compile(r"\x1b?\[[0-9;]+m")
NUMBER = r"[0-9][0-9,]*\.?[0-9]*(?:[eE][-+]?[0-9]+)?"
#: NCCL's own banner (`NCCL version 2.4.8+cuda10.0`, alone or after NCCL INFO's prefix).
NCCL_BANNER = re.compile(r"\bNCCL version (\d+\.\d+\.\d+)(?:\+(cuda[\d.]+|hip[\d.]+))?")
_ISO = re.compile(r"\b(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)(?:[,.](\d{1,6}))?")
_CTIME = re.compile(r"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (\w{3}) +(\d{1,2}) "
                    r"(\d\d:\d\d:\d\d) (\d{4})\b")


def num(text: str) -> float:
    """A number as tools print it (thousands separators allowed)."""
    return float(text.replace(",", ""))


def nccl_banner(text: str) -> dict[str, str]:
    """The NCCL version (and its CUDA or HIP build) a log's NCCL banner states."""
    found = NCCL_BANNER.search(text)
    if found is None:
        return {}
    return {"nccl": found.group(1), **({"nccl_build": found.group(2)} if found.group(2)
                                        else {})}


def last_iso_time(text: str) -> datetime | None:
    """The last `YYYY-MM-DD HH:MM:SS[,mmm]` in a log, as UTC (logs name no zone)."""
    found = next(reversed(list(_ISO.finditer(text))), None)
    if found is None:
        return None
    try:
        moment = datetime.fromisoformat(f"{found.group(1)}T{found.group(2)}")
    except ValueError:
        return None
    fraction = found.group(3)
    if fraction:
        moment = moment.replace(microsecond=int(fraction.ljust(6, "0")))
    return moment.replace(tzinfo=timezone.utc)


def last_ctime(text: str) -> datetime | None:
    """The last ctime-style date (`Thu Jun 18 14:29:36 2020`: Open MPI's
    --timestamp-output) in a log, as UTC."""
    found = next(reversed(list(_CTIME.finditer(text))), None)
    if found is None:
        return None
    try:
        moment = datetime.strptime(" ".join(found.groups()), "%b %d %H:%M:%S %Y")
    except ValueError:
        return None
    return moment.replace(tzinfo=timezone.utc)
