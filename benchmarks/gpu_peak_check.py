"""The measured matmul peak (MFU's denominator under `peak_tflops: measure`), before and
after the warm-up fix, on a GPU that has just been idle: each trial lets the GPU idle
for `--idle` seconds, measures the old way (3 products warm-up, best of 10 single
products), idles again, measures the new way (scalestudy.workload.mfu: 0.25 s warm-up,
best of 5 batches of 20 products). Prints one JSON line.

    python benchmarks/gpu_peak_check.py [--trials 5] [--idle 2.5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from scalestudy.workload.mfu import measure_matmul_tflops


def old_measure(device: torch.device, n: int = 8192) -> float:
    """The code before the fix (mfu.py at b717d1b), for bf16 on CUDA."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(10):
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        a @ b
        torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2 * n ** 3 / best / 1e12


def main() -> None:
    """Alternate old and new after idle gaps; print both lists and their spread."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--idle", type=float, default=2.5)
    args = p.parse_args()
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    out: dict[str, list[float]] = {"old": [], "new": []}
    for _ in range(args.trials):
        time.sleep(args.idle)
        out["old"].append(round(old_measure(device), 1))
        time.sleep(args.idle)
        out["new"].append(round(measure_matmul_tflops(device, "bf16"), 1))
    summary = {k: {"values": v, "median": statistics.median(v), "min": min(v),
                   "max": max(v)} for k, v in out.items()}
    print("PEAK-CHECK " + json.dumps({"gpu": torch.cuda.get_device_name(device),
                                      "idle_s": args.idle, **summary}), flush=True)


if __name__ == "__main__":
    main()
