"""How short a window NVML's energy counter measures well: short windows against a long one.

    python benchmarks/gpu_energy_window.py [--windows 0.1 0.25 0.5 1 2] [--trials 5]

A steady load (back-to-back bf16 8192^3 matmuls, the same work in every window) draws a
constant power; a 10 s reading of the counter gives that power with the counter's own
granularity made negligible. Each short window is then read twice, the way the workload
reads it: the counter just before the first product and just after the device is
synchronised at the end (`raw`), and from the counter's updates inside the window (the
workload's meter, scalestudy.workload.energy.window_mj). Its mean power over the window,
divided by the long window's, is the figure: 1.0 when the counter is exact at that
length. First the counter's update interval is measured (a tight loop of reads under load,
the times its value changed). Prints `ENERGY-WINDOW {json}`. CUDA and nvidia-ml-py only.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from typing import Any

import pynvml
import torch

from scalestudy.workload import energy


def load(seconds: float, a: torch.Tensor, b: torch.Tensor) -> float:
    """Matmuls for about `seconds` (synchronised every 8 products); the wall seconds."""
    start = time.perf_counter()
    while True:
        for _ in range(8):
            torch.mm(a, b)
        torch.cuda.synchronize()
        if time.perf_counter() - start >= seconds:
            return time.perf_counter() - start


def update_interval(read: Any, a: torch.Tensor, b: torch.Tensor) -> dict[str, Any]:
    """Median seconds between changes of the counter's value, read in a tight loop while
    a queue of products keeps the GPU busy."""
    for _ in range(600):
        torch.mm(a, b)
    changes: list[float] = []
    last, end = read(), time.perf_counter() + 0.6
    while time.perf_counter() < end:
        value = read()
        if value != last:
            changes.append(time.perf_counter())
            last = value
    torch.cuda.synchronize()
    gaps = [y - x for x, y in itertools.pairwise(changes)]
    return {"changes": len(changes), "median_s": statistics.median(gaps) if gaps else None,
            "min_s": min(gaps) if gaps else None, "max_s": max(gaps) if gaps else None}


def window(read: Any, seconds: float, a: torch.Tensor, b: torch.Tensor
           ) -> tuple[float, float, int]:
    """Mean watts over one window read with the workload's meter: from the plain delta of
    the counter, and from its updates inside the window (the record's); the updates."""
    torch.cuda.synchronize()
    meter = energy.Meter(read, device_id="gpu0", watch=True)
    meter.start()
    wall = load(seconds, a, b)
    reading = meter.stop()
    return reading["raw_mj"] / 1000 / wall, reading["mj"] / 1000 / wall, reading["updates"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--windows", type=float, nargs="+", default=[0.1, 0.25, 0.5, 1.0, 2.0])
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--long-s", type=float, default=10.0)
    args = p.parse_args()
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)

    def read() -> int:
        return int(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle))

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    load(3.0, a, b)  # clocks and power settle
    out: dict[str, Any] = {"gpu": torch.cuda.get_device_name(0),
                           "update_interval": update_interval(read, a, b)}
    long_w = window(read, args.long_s, a, b)[0]
    out["long"] = {"seconds": args.long_s, "watts": long_w}
    rows = []
    for seconds in args.windows:
        trials = [window(read, seconds, a, b) for _ in range(args.trials)]
        row: dict[str, Any] = {"seconds": seconds,
                               "updates": [updates for _, _, updates in trials]}
        for i, method in enumerate(("raw", "updates_method")):
            ratios = [trial[i] / long_w for trial in trials]
            row[method] = {"ratios": [round(r, 4) for r in ratios],
                           "median": round(statistics.median(ratios), 4),
                           "worst": round(max(ratios, key=lambda r: abs(r - 1)), 4)}
        rows.append(row)
    out["windows"] = rows
    out["long_again_watts"] = window(read, args.long_s / 2, a, b)[0]
    pynvml.nvmlShutdown()
    print("ENERGY-WINDOW " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
