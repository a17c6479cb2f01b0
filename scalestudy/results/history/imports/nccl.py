"""nccl-tests: bus bandwidth per message size at N ranks, from the text table (its column
layout read from the table's own header) or from the JSON that `-J` writes.

Text captured through a launcher may carry its prefix on every line: Open MPI's
`--tag-output` (`[1,0]<stdout>:`, after `--timestamp-output`'s date where given),
MPICH/Hydra's `-prepend-rank` (`[0] `), Slurm's `srun -l` (`0: `) or `kubectl logs
--prefix` (`[pod/NAME/CONTAINER] `): they are taken off, and only the lines of the rank
that printed the table are read. A table that stops before nccl-tests' closing `# Avg
bus bandwidth` line was cut off (the run died, or the capture did): its rows are kept as
aborted, not results; a row whose `#wrong` (either side) is above 0 failed nccl-tests'
own check: kept as wrong results."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path

from scalestudy.core.errors import ScalestudyError
from scalestudy.core.values import number
from scalestudy.results.history.imports.common import (
    NUMBER,
    Imported,
    ImportPoint,
    nccl_banner,
    num,
)

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
#: A launcher's prefix at a line's start, with the rank where it says one.
_PREFIX = re.compile(
    r"^(?:\w{3} \w{3} +\d{1,2} \d\d:\d\d:\d\d \d{4})?"  # Open MPI --timestamp-output
    r"(?:\[\d+,(?P<ompi>\d+)\]<std(?:out|err)>: ?"  # Open MPI --tag-output
    r"|\[(?P<hydra>\d+)\] "  # MPICH/Hydra -prepend-rank (-l)
    r"| *(?P<srun>\d+): "  # Slurm srun -l (--label), padded to the widest rank
    r"|\[pod/[^\]/\s]+/[^\]\s]+\] )")  # kubectl logs --prefix


def read(text: str, gpus: int | None) -> list[Imported]:
    """The measurements of an nccl-tests output (text or JSON)."""
    if text.lstrip().startswith("{"):
        return _json(text, gpus)
    lines = unprefixed(text.splitlines())
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
    point: ImportPoint = {"collective": test["name"].removesuffix("_perf") if test else None,
             "world_size": len(ranks) or gpus, "nodes": len(hosts) or None}
    counts = any(line.lstrip().startswith("#") and "#wrong" in line.lstrip()[1:]
                 for line in lines)
    cut = None if avg else ("the table is cut off (no `# Avg bus bandwidth` line after "
                            "it): the run or its capture stopped early")
    out = []
    for line in lines:
        row = _row(line, columns)
        if row is None:
            continue
        sides = [_value(row, "busbw"), _value(row, "in_busbw")]
        busbw = [v for v in sides if v is not None]
        if not busbw:
            continue
        details = {"time_us": row.get("time"), "algbw_GBps": row.get("algbw"),
                   "busbw_out_of_place_GBps": sides[0], "busbw_in_place_GBps": sides[1],
                   "layout": "root" if "root" in columns else "no-root", **common}
        status, why = _status(row, counts, cut)
        out.append(Imported(
            {**point, "message_bytes": int(str(row["size"])), "dtype": _word(row, "type"),
             "redop": _word(row, "redop")},
            max(busbw), "GB/s busbw", {**details, **({"why": why} if why else {})},
            status=status))
    return out


def unprefixed(lines: list[str]) -> list[str]:
    """The lines without a launcher's prefix; where the prefixes name ranks, only the
    lines of the rank that printed the table's header (and those naming no rank)."""
    ranks: list[str | None] = []
    bare: list[str] = []
    for line in lines:
        found = _PREFIX.match(line)
        rank = None
        if found is not None:
            rank = found["ompi"] or found["hydra"] or found["srun"]
            line = line[found.end():]
        ranks.append(rank)
        bare.append(line)
    author = next((rank for rank, line in zip(ranks, bare, strict=True)
                   if rank is not None and line.lstrip("# ").startswith("size")), None)
    if author is None:
        return bare
    return [line for rank, line in zip(ranks, bare, strict=True) if rank in (None, author)]


#: A row of the text table: its words, the time and bandwidth columns as numbers.
_Row = dict[str, str | float | None]


def _word(row: _Row, name: str) -> str | None:
    value = row.get(name)
    return value if isinstance(value, str) else None


def _value(row: _Row, name: str) -> float | None:
    value = row.get(name)
    return None if value is None or isinstance(value, str) else value


def _status(row: _Row, counts: bool, cut: str | None) -> tuple[str, str | None]:
    """A row's status: aborted where the table was cut off, wrong results where
    nccl-tests counted wrong values (`#wrong`; the older layout's `error` is a
    tolerance-checked maximum error, not a count)."""
    if cut:
        return "aborted", cut
    if not counts:
        return "completed", None
    wrong = [w for w in (row.get("wrong"), row.get("in_wrong"))
             if isinstance(w, str) and w != "N/A"]
    bad = [w for w in wrong if not w.isdigit() or int(w) > 0]
    if bad:
        return "wrong_results", (f"nccl-tests found {' and '.join(bad)} wrong value(s) "
                                 "(#wrong): the collective gave wrong results")
    return "completed", None


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


def _row(line: str, columns: list[str]) -> _Row | None:
    """A data row under the header's columns (None: not one: a log line, a comment)."""
    words = line.split()
    if len(words) != len(columns) or not words[0].isdigit() or not words[1].isdigit():
        return None
    row: _Row = {}
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
        wrong = [_float(side.get("nwrong")) for side in (r.get("out_of_place"),
                                                         r.get("in_place"))
                 if isinstance(side, dict)]
        bad = sum(w for w in wrong if w)
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
             "hosts": hosts, "nccl": version(int(nccl)) if nccl else None,
             **({"why": f"nccl-tests found {bad:g} wrong value(s) (nwrong): the "
                 "collective gave wrong results"} if bad else {})},
            status="wrong_results" if bad else "completed", ended=ended))
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
    return number(value, text=True, booleans=True, finite=False)
