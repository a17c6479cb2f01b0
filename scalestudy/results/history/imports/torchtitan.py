"""torchtitan's training log: tokens/s per GPU (`tps`, or `wps` in older releases) and
MFU, over the steps after the first (which includes compilation and warm-up); a log that
holds only warm-up steps is recorded as such, not as a rate."""

from __future__ import annotations

import math
import re
import statistics

from scalestudy.results.history.imports.common import (
    ANSI,
    NUMBER,
    Imported,
    ImportPoint,
    last_iso_time,
    nccl_banner,
    num,
)

EXPECTED = "lines `step: N loss: L ... tps: T` (or `wps:`)"
_STEP = re.compile(rf"step:\s*(?P<step>\d+).*?\b(?P<kind>tps|wps):\s*(?P<tps>{NUMBER})")
_RANK = re.compile(r"^\[rank(\d+)\]:")
_MESH = re.compile(r"Building \d+-D device mesh with \[[^\]]*\], \[([\d, ]+)\]")
_MODEL = re.compile(r"Model (?P<m>.+?) size: ")
_BATCH = re.compile(r"local batch size (\d+), global batch size (\d+)")


def read(text: str, gpus: int | None) -> list[Imported]:
    """The one measurement of a torchtitan log: median tokens/s per GPU (× the GPUs)."""
    text = ANSI.sub("", text)
    lines = text.splitlines()
    ranks = [int(m.group(1)) for m in map(_RANK.match, lines) if m]
    lead = f"[rank{min(ranks)}]:" if ranks else ""  # one rank's lines: they repeat
    steps, mfus, tflops = [], [], []
    for line in lines:
        if lead and not line.startswith(lead):
            continue
        m = _STEP.search(line)
        if m is None or "validate step:" in line:
            continue
        steps.append((int(m["step"]), num(m["tps"])))
        mfu = re.search(rf"\bmfu:\s*({NUMBER})%", line)
        flops = re.search(rf"\btflops:\s*({NUMBER})", line)
        if mfu:
            mfus.append(num(mfu.group(1)) / 100)
        if flops:
            tflops.append(num(flops.group(1)))
    if not steps:
        return []
    mesh = _MESH.search(text)
    world = gpus or (math.prod(int(v) for v in mesh.group(1).split(",")) if mesh else None)
    model = _MODEL.search(text)
    batch = _BATCH.search(text)
    point: ImportPoint = {"model": model["m"] if model else None, "world_size": world,
             **({"batch_size": int(batch.group(1)), "global_batch": int(batch.group(2))}
                if batch else {})}
    unit = "tokens/s" if world else "tokens/s per GPU"
    details = {"steps": len(steps), "last_step": steps[-1][0], **nccl_banner(text)}
    ended = last_iso_time(text)
    # the first logged step includes compilation and warm-up: it is not the rate
    rates = [tps for _, tps in steps[1:]]
    if not rates:
        return [Imported(point, None, unit,
                         {**details, "warmup_tokens_per_s_per_gpu": steps[0][1],
                          "why": f"only step {steps[0][0]} was logged: it includes "
                          "compilation and warm-up, so it is no rate"},
                         status="warmup_only", ended=ended)]
    per_gpu = statistics.median(rates)
    return [Imported(
        point, per_gpu * world if world else per_gpu, unit,
        {**details, "tokens_per_s_per_gpu": per_gpu,
         "mfu": statistics.median(mfus[1:]) if len(mfus) > 1 else None,
         "tflops_per_gpu": statistics.median(tflops[1:]) if len(tflops) > 1 else None},
        ended=ended)]
