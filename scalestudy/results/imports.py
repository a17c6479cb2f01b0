"""Numbers from elsewhere: results users already have, read from the tools' own output
and kept with their source, to stand beside scalestudy's runs in `history`.

- nccl-tests (`all_reduce_perf` and friends): the text table, or its JSON (`-J`): bus
  bandwidth per message size at N ranks;
- Horovod's synthetic benchmarks: `Total img/sec on N GPU(s): X +-Y`;
- torchtitan's training log: tokens/s per GPU (`tps`, or `wps` in older releases), MFU;
- MLPerf Training result logs (`:::MLLOG`): time to train, from run_start to run_stop.

Each parser returns `Imported` rows; none guesses: what the file does not say (the GPU
count of a torchtitan log, the system) comes from the command line or stays unknown.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scalestudy.core.errors import ScalestudyError

FORMATS: tuple[str, ...] = ("nccl-tests", "horovod", "torchtitan", "mlperf")


@dataclass(frozen=True)
class Imported:
    """One measurement read from a file: its point, value, unit and what else it said."""

    point: dict[str, Any]  # model, world_size, nodes, batch_size, message_bytes, ...
    value: float  # the throughput (or bus bandwidth, or time to train)
    unit: str
    details: dict[str, Any] = field(default_factory=dict)


def parse(path: Path, fmt: str, gpus: int | None = None) -> list[Imported]:
    """The measurements of one file in one format (ScalestudyError: not that format)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ScalestudyError(f"{path}: cannot read it ({exc.strerror})") from None
    parsers = {"nccl-tests": _nccl_tests, "horovod": _horovod, "torchtitan": _torchtitan,
               "mlperf": _mlperf}
    if fmt not in parsers:
        raise ScalestudyError(f"--format {fmt!r}: one of {', '.join(FORMATS)}")
    found = parsers[fmt](text, gpus)
    if not found:
        raise ScalestudyError(f"{path}: no {fmt} results in it ({_expected[fmt]}); check "
                              "--format, or that the run got that far")
    return found


_expected = {
    "nccl-tests": "a table of size, count, type, redop, root, time, algbw, busbw, or -J JSON",
    "horovod": "a line `Total img/sec on N GPU(s): X +-Y`",
    "torchtitan": "lines `step: N loss: L ... tps: T` (or `wps:`)",
    "mlperf": "`:::MLLOG` lines with run_start and run_stop",
}

#: Terminal colours, with or without their escape byte (logs that were copied lose it).
_ANSI = re.compile(r"\x1b?\[[0-9;]+m")
_NUMBER = r"[0-9][0-9,]*\.?[0-9]*(?:[eE][-+]?[0-9]+)?"


def _num(text: str) -> float:
    return float(text.replace(",", ""))


# --- nccl-tests -----------------------------------------------------------------------

_NCCL_ROW = re.compile(
    rf"^\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>\w+)\s+(?P<redop>\w+|-)\s+"
    rf"(?P<root>-?\d+)\s+(?P<time>{_NUMBER})\s+(?P<algbw>{_NUMBER})\s+(?P<busbw>{_NUMBER})"
    rf"\s+(?P<wrong>\S+)(?:\s+(?P<itime>{_NUMBER})\s+(?P<ialgbw>{_NUMBER})\s+"
    rf"(?P<ibusbw>{_NUMBER})\s+(?P<iwrong>\S+))?")
_NCCL_RANK = re.compile(r"^#\s+Rank\s+\d+\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(?P<host>\S+)"
                        r"\s+device\s+\d+\s+\[[^\]]*\]\s+(?P<gpu>.+?)\s*$")
_NCCL_VERSION = re.compile(r"nccl-library=(\d+)")
_NCCL_TEST = re.compile(r"Collective test starting:\s*(?P<name>\w+)")


def _nccl_tests(text: str, gpus: int | None) -> list[Imported]:
    if text.lstrip().startswith("{"):
        return _nccl_json(text, gpus)
    ranks = [m for m in map(_NCCL_RANK.match, text.splitlines()) if m]
    world = len(ranks) or gpus
    hosts = list(dict.fromkeys(m["host"] for m in ranks))
    test = _NCCL_TEST.search(text)
    collective = test["name"].removesuffix("_perf") if test else None
    avg = re.search(rf"#\s*Avg bus bandwidth\s*:\s*({_NUMBER})", text)
    library = _NCCL_VERSION.search(text)
    nccl = _nccl_version(int(library.group(1))) if library else None
    out = []
    for line in text.splitlines():
        m = _NCCL_ROW.match(line)
        if m is None:
            continue
        busbw = [_num(m["busbw"])] + ([_num(m["ibusbw"])] if m["ibusbw"] else [])
        out.append(Imported(
            {"collective": collective, "world_size": world, "nodes": len(hosts) or None,
             "message_bytes": int(m["size"]), "dtype": m["type"], "redop": m["redop"]},
            max(busbw), "GB/s busbw",
            {"time_us": _num(m["time"]), "algbw_GBps": _num(m["algbw"]),
             "busbw_out_of_place_GBps": busbw[0],
             "busbw_in_place_GBps": busbw[1] if len(busbw) > 1 else None,
             "gpu_model": ranks[0]["gpu"] if ranks else None, "hosts": hosts,
             "nccl": nccl, "avg_busbw_GBps": _num(avg.group(1)) if avg else None}))
    return out


def _nccl_version(code: int) -> str:
    """NCCL's version code (22703, or 2703 before 2.9) as 2.27.3."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def _nccl_json(text: str, gpus: int | None) -> list[Imported]:
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
             "hosts": hosts, "nccl": _nccl_version(int(nccl)) if nccl else None}))
    return out


def _float(value: Any) -> float | None:
    """A number as nccl-tests writes it (NaN as the string "nan"): None where not one."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number else None


# --- Horovod synthetic benchmarks ------------------------------------------------------

_HVD_PREFIX = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:", re.M)
_HVD_TOTAL = re.compile(rf"Total (?P<unit>\w+)/sec on (?P<gpus>\d+) (?:GPU|CPU)\(s\):\s*"
                        rf"(?P<value>{_NUMBER})\s*\+-\s*(?P<ci>{_NUMBER})")


def _horovod(text: str, gpus: int | None) -> list[Imported]:
    text = _HVD_PREFIX.sub("", text)  # horovodrun's [1,0]<stdout>: per line
    model = re.search(r"^Model:\s*(\S+)", text, re.M)
    batch = re.search(r"^Batch size:\s*(\d+)", text, re.M)
    per_gpu = re.search(rf"(\w+)/sec per (?:GPU|CPU|device):\s*({_NUMBER})\s*\+-\s*({_NUMBER})",
                        text)
    iters = [_num(v) for v in re.findall(rf"Iter #\d+:\s*({_NUMBER})\s*\w+/sec per", text)]
    out = []
    for m in _HVD_TOTAL.finditer(text):
        world = int(m["gpus"])
        per_rank = int(batch.group(1)) if batch else None
        out.append(Imported(
            {"model": model.group(1) if model else None, "world_size": world,
             "batch_size": per_rank, "global_batch": per_rank * world if per_rank else None},
            _num(m["value"]), f"{m['unit']}/s",
            {"ci": _num(m["ci"]), "per_gpu": _num(per_gpu.group(2)) if per_gpu else None,
             "per_gpu_ci": _num(per_gpu.group(3)) if per_gpu else None,
             "iterations": len(iters)}))
    return out


# --- torchtitan ------------------------------------------------------------------------

_TITAN_STEP = re.compile(rf"step:\s*(?P<step>\d+).*?\b(?P<kind>tps|wps):\s*(?P<tps>{_NUMBER})")


_TITAN_RANK = re.compile(r"^\[rank(\d+)\]:")
_TITAN_MESH = re.compile(r"Building \d+-D device mesh with \[[^\]]*\], \[([\d, ]+)\]")
_TITAN_MODEL = re.compile(r"Model (?P<m>.+?) size: ")


def _torchtitan(text: str, gpus: int | None) -> list[Imported]:
    text = _ANSI.sub("", text)
    lines = text.splitlines()
    ranks = [int(m.group(1)) for m in map(_TITAN_RANK.match, lines) if m]
    lead = f"[rank{min(ranks)}]:" if ranks else ""  # one rank's lines: they repeat
    steps, mfus, tflops = [], [], []
    for line in lines:
        if lead and not line.startswith(lead):
            continue
        m = _TITAN_STEP.search(line)
        if m is None or "validate step:" in line:
            continue
        steps.append((int(m["step"]), _num(m["tps"])))
        mfu = re.search(rf"\bmfu:\s*({_NUMBER})%", line)
        flops = re.search(rf"\btflops:\s*({_NUMBER})", line)
        if mfu:
            mfus.append(_num(mfu.group(1)) / 100)
        if flops:
            tflops.append(_num(flops.group(1)))
    if not steps:
        return []
    # the first logged step includes compilation and warm-up: it is not the rate
    rates = [tps for _, tps in steps[1:]] or [steps[0][1]]
    per_gpu = statistics.median(rates)
    mesh = _TITAN_MESH.search(text)
    world = gpus or (math.prod(int(v) for v in mesh.group(1).split(",")) if mesh else None)
    model = _TITAN_MODEL.search(text)
    return [Imported(
        {"model": model["m"] if model else None, "world_size": world},
        per_gpu * world if world else per_gpu,
        "tokens/s" if world else "tokens/s per GPU",
        {"tokens_per_s_per_gpu": per_gpu, "steps": len(steps), "last_step": steps[-1][0],
         "mfu": statistics.median(mfus[1:] or mfus) if mfus else None,
         "tflops_per_gpu": statistics.median(tflops[1:] or tflops) if tflops else None})]


# --- MLPerf Training -------------------------------------------------------------------

def _mlperf(text: str, gpus: int | None) -> list[Imported]:
    events: dict[str, Any] = {}
    for line in text.splitlines():
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
    status = (stop.get("metadata") or {}).get("status")
    minutes = (stop["time_ms"] - start["time_ms"]) / 60000

    def value(key: str) -> Any:
        return events[key].get("value") if key in events else None

    platform = value("submission_platform")
    nodes = re.match(r"^(\d+)x", str(platform or ""))
    return [Imported(
        {"model": value("submission_benchmark"), "world_size": gpus,
         "nodes": int(nodes.group(1)) if nodes else None,
         "global_batch": value("global_batch_size")},
        minutes, "minutes to train",
        {"status": status, "platform": platform, "org": value("submission_org"),
         "division": value("submission_division"), "epochs": value("epoch_count")})]
