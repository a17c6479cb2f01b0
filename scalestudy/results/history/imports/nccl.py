"""nccl-tests: bus bandwidth per message size at N ranks, from the text table (its column
layout read from the table's own header) or from the JSON that `-J` writes."""

from __future__ import annotations

import json
import numbers
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from scalestudy.core.errors import ScalestudyError
from scalestudy.results.history.imports.common import NUMBER, Imported, nccl_banner, num

EXPECTED = ("a table whose header names size, count, type, ... time, algbw, busbw, or "
            "-J JSON")
#: The columns of one side (out-of-place, then in-place) of the table, in the two layouts
#: nccl-tests has printed: `time algbw busbw #wrong` (2.x) and `time algbw busbw error`
#: (before it; no `root` column either).
SIDE = ("time", "algbw", "busbw", "wrong")
_HEADER_NAMES = {"#wrong": "wrong", "error": "wrong"}
_RANK = re.compile(r"^#\s+Rank\s+\d+\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(?P<host>\S+)"
                   r"\s+device\s+\d+\s+\[[^\]]*\]\s+(?P<gpu>.+?)\s*$")
_LIBRARY = re.compile(r"nccl-library=(\d+)")
_TEST = re.compile(r"Collective test starting:\s*(?P<name>\w+)")
_AVG = re.compile(rf"#\s*Avg bus bandwidth\s*:\s*({NUMBER})")
_VALUE = re.compile(rf"^{NUMBER}$")


def read(text: str, gpus: int | None) -> list[Imported]:
    """The measurements of an nccl-tests output (text or JSON)."""
    if text.lstrip().startswith("{"):
        return _json(text, gpus)
    lines = text.splitlines()
    columns = _header(lines)
    if columns is None:
        if any(line.lstrip().startswith("#") and "busbw" in line for line in lines):
            raise ScalestudyError(
                "an nccl-tests table whose header this release cannot read (it knows "
                "`size count type redop [root] time algbw busbw #wrong|error ...`): "
                "nothing imported; please report the layout")
        return []
    ranks = [m for m in map(_RANK.match, lines) if m]
    hosts = list(dict.fromkeys(m["host"] for m in ranks))
    test = _TEST.search(text)
    avg = _AVG.search(text)
    library = _LIBRARY.search(text)
    nccl = version(int(library.group(1))) if library else nccl_banner(text).get("nccl")
    common = {"gpu_model": ranks[0]["gpu"] if ranks else None, "hosts": hosts,
              "nccl": nccl, "avg_busbw_GBps": num(avg.group(1)) if avg else None}
    point = {"collective": test["name"].removesuffix("_perf") if test else None,
             "world_size": len(ranks) or gpus, "nodes": len(hosts) or None}
    out = []
    for line in lines:
        row = _row(line, columns)
        if row is None:
            continue
        sides = [row.get("busbw"), row.get("in_busbw")]
        busbw = [v for v in sides if v is not None]
        if not busbw:
            continue
        out.append(Imported(
            {**point, "message_bytes": int(row["size"]), "dtype": row.get("type"),
             "redop": row.get("redop")},
            max(busbw), "GB/s busbw",
            {"time_us": row.get("time"), "algbw_GBps": row.get("algbw"),
             "busbw_out_of_place_GBps": sides[0], "busbw_in_place_GBps": sides[1],
             "layout": "root" if "root" in columns else "no-root", **common}))
    return out


def _header(lines: list[str]) -> list[str] | None:
    """The table's column names, from its header line (`#  size  count  type ...`): the
    first side's names as they are, the second side's (in-place) prefixed `in_`."""
    for line in lines:
        words = line.strip().lstrip("#").split()
        if words[:2] != ["size", "count"] or "busbw" not in words:
            continue
        names = [_HEADER_NAMES.get(w, w) for w in words]
        first = names.index("time")
        head, sides = names[:first], names[first:]
        if sides[:4] != list(SIDE) or sides[4:] not in ([], list(SIDE)):
            return None
        return [*head, *SIDE, *(f"in_{n}" for n in sides[4:])]
    return None


def _row(line: str, columns: list[str]) -> dict[str, Any] | None:
    """A data row under the header's columns (None: not one: a log line, a comment)."""
    words = line.split()
    if len(words) != len(columns) or not words[0].isdigit() or not words[1].isdigit():
        return None
    row: dict[str, Any] = {}
    for name, word in zip(columns, words, strict=True):
        if name in ("time", "algbw", "busbw", "in_time", "in_algbw", "in_busbw"):
            if not _VALUE.match(word):  # N/A: an in-place side some collectives lack
                row[name] = None
                continue
            row[name] = num(word)
        else:
            row[name] = word
    return row


def version(code: int) -> str:
    """NCCL's version code (22703, or 2703 before 2.9) as 2.27.3."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def _json(text: str, gpus: int | None) -> list[Imported]:
    """nccl-tests' JSON (-J, version 2 of its src/util.cu): one result per size, each
    with out_of_place and in_place {time, alg_bw, bus_bw, nwrong}; booleans and NaN are
    strings there, and the devices sit in config."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ScalestudyError(f"nccl-tests JSON: not JSON ({exc})") from None
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list):
        return []
    devices = (data.get("config") or {}).get("devices") or []
    hosts = list(dict.fromkeys(str(d.get("hostname")) for d in devices if d.get("hostname")))
    world = len(devices) or gpus
    collective = next((Path(str(a)).name.removesuffix("_perf") for a in data.get("args", [])[:1]),
                      None)
    nccl = data.get("nccl_version")
    ended = _json_time(data.get("end_time")) or _json_time(data.get("start_time"))
    out = []
    for r in results:
        if not isinstance(r, dict) or "size" not in r:
            continue
        sides = [_float(side.get("bus_bw")) for side in (r.get("out_of_place"),
                                                         r.get("in_place"))
                 if isinstance(side, dict)]
        busbw = [v for v in sides if v is not None]
        if not busbw:
            continue
        first = r.get("out_of_place") or r.get("in_place") or {}
        out.append(Imported(
            {"collective": collective, "world_size": world, "nodes": len(hosts) or None,
             "message_bytes": int(r["size"]), "dtype": r.get("type"),
             "redop": r.get("redop")},
            max(busbw), "GB/s busbw",
            {"time_us": _float(first.get("time", first.get("cpu_time"))),
             "algbw_GBps": _float(first.get("alg_bw")),
             "busbw_out_of_place_GBps": sides[0] if sides else None,
             "busbw_in_place_GBps": sides[1] if len(sides) > 1 else None,
             "gpu_model": devices[0].get("device_info") if devices else None,
             "hosts": hosts, "nccl": version(int(nccl)) if nccl else None},
            ended=ended))
    return out


def _json_time(value: object) -> datetime | None:
    """nccl-tests' `start_time`/`end_time` ("%Y-%m-%d %H:%M:%S", the node's local time:
    read as UTC)."""
    try:
        return datetime.strptime(str(value), "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def _float(value: object) -> float | None:
    """A number as nccl-tests writes it (NaN as the string "nan"): None where not one."""
    if not isinstance(value, (numbers.Real, str)):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if number == number else None
