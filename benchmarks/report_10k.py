"""Collect, analyse and report 10,000 runs' records; print the times and peak memory
(target: under 6 s for collect + analyze + report).

    python benchmarks/report_10k.py [--runs 10000] [--keep DIR]

The run directories (run.json, status.json and a metrics.jsonl record like the bundled
workload's, diagnostics included) are written to a temporary directory first; that
part is not timed. Throughputs follow a communication model with 2 % noise, so the
report's fits, findings and plots have real work to do.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scalestudy.report.build import build_report
from scalestudy.results.analysis.collect import collect
from scalestudy.results.analysis.study import Where, analyse

NODES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
BATCHES = (16, 32, 64, 128, 256)
TUNINGS = ("default", "ring", "tree", "big-buffers", "hier")
MODELS = (("resnet50", 25.6e6), ("vit_b16", 86.6e6))
PRECISIONS = ("fp32", "bf16")
RPN = 4


def planned_runs(count: int) -> list[dict[str, Any]]:
    """Up to `count` run parameter sets: models x precisions x tunings x batches x nodes
    x repeats (as many repeats as it takes)."""
    per_repeat = len(MODELS) * len(PRECISIONS) * len(TUNINGS) * len(BATCHES) * len(NODES)
    repeats = math.ceil(count / per_repeat)
    out = []
    for model, _ in MODELS:
        for prec in PRECISIONS:
            for tuning in TUNINGS:
                for batch in BATCHES:
                    for nodes in NODES:
                        for rep in range(repeats):
                            p = nodes * RPN
                            out.append({
                                "run_id": f"{model}-{prec}-{tuning}-b{batch}-n{nodes}-r{rep}",
                                "study": "bench", "system": "polaris", "scaling": "weak",
                                "nodes": nodes, "ranks_per_node": RPN, "world_size": p,
                                "batch_size": batch, "global_batch": batch * p,
                                "backend": "ddp", "tuning": tuning, "repeat": rep,
                                "workload": "synthetic", "model": model, "image_size": 224,
                                "precision": prec})
    return out[:count]


def record(p: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """A metric record with the bundled workload's keys, from a known model."""
    params = dict(MODELS)[p["model"]]
    grad = params * (2 if p["precision"] == "bf16" else 4)
    size = p["world_size"]
    compute = p["batch_size"] * (0.0012 if p["precision"] == "bf16" else 0.003)
    bw = {"default": 20e9, "ring": 22e9, "tree": 18e9, "big-buffers": 24e9, "hier": 21e9}
    comm = 2 * (size - 1) / size * grad / bw[p["tuning"]] + 30e-6 * math.log2(size)
    step = (compute + comm) * (1 + 0.02 * rng.gauss(0, 1))
    thr = p["global_batch"] / step
    per_rank = thr / size
    sizes = [2 ** k for k in range(10, 27, 4)]
    times = [30e-6 + s / 20e9 for s in sizes]
    return {
        "schema": "scalestudy.metrics/2", "source": "workload", "throughput": thr,
        "throughput_ci": 0.01 * thr, "throughput_per_rank_min": per_rank * 0.97,
        "throughput_per_rank_mean": per_rank, "throughput_per_rank_max": per_rank * 1.02,
        "iter_time_mean": step, "iter_time_std": 0.01 * step, "world_size": size,
        "local_world_size": RPN, "nodes": p["nodes"], "batch_size": p["batch_size"],
        "global_batch": p["global_batch"], "model": p["model"], "image_size": 224,
        "precision": p["precision"], "backend": "ddp", "dist_backend": "nccl",
        "device": "cuda", "warmup_iters": 5, "iters": 20, "batches_per_iter": 10,
        "num_params": int(params), "grad_bytes": int(grad), "step_time_s": step,
        "compute_time_s": compute, "compute_throughput": p["global_batch"] / compute,
        "comm_overhead": 1 - compute / step, "allreduce_busbw_GBps": 20.0,
        "allreduce_latency_s": 30e-6,
        "allreduce_probe": {"bytes": sizes, "time_s": times,
                            "busbw_GBps": [s / t / 1e9 for s, t in zip(sizes, times,
                                                                      strict=True)]},
        "hosts": [f"x{i:04d}" for i in range(p["nodes"])],
        "torch_version": "2.13.0", "python_version": "3.11.2", "elapsed_s": 60.0,
    }


def write_runs(root: Path, planned: list[dict[str, Any]]) -> None:
    """The files a finished study leaves behind, one directory per run."""
    rng = random.Random(5)
    for p in planned:
        d = root / "runs" / p["run_id"]
        d.mkdir(parents=True)
        (d / "run.json").write_text(json.dumps(p))
        (d / "status.json").write_text(json.dumps(
            {"state": "completed", "exit_code": 0, "elapsed_s": 61.0, "reason": None}))
        (d / "metrics.jsonl").write_text(json.dumps(record(p, rng)) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--keep", type=Path, help="write the study here and keep it")
    args = parser.parse_args()
    planned = planned_runs(args.runs)
    with tempfile.TemporaryDirectory(prefix="report10k.") as tmp:
        root = Path(args.keep or tmp) / "bench"
        t0 = time.perf_counter()
        write_runs(root, planned)
        t1 = time.perf_counter()
        runs = collect(root, planned)
        t2 = time.perf_counter()
        analysis = analyse("bench", "weak", runs, where=Where("polaris"))
        table = analysis.table
        t3 = time.perf_counter()
        rep = build_report(root, analysis, "10,000 synthetic runs")
        t4 = time.perf_counter()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak_mib = peak / 1024 if sys.platform != "darwin" else peak / 2**20
        groups = table["group"].nunique()
        print(f"{len(runs)} runs, {groups} groups, {len(table)} points")
        print(f"write run dirs (not timed): {t1 - t0:6.2f} s")
        print(f"collect:                    {t2 - t1:6.2f} s")
        print(f"analyse (table, model, ...):{t3 - t2:6.2f} s")
        print(f"report (plots, csv, html):  {t4 - t3:6.2f} s")
        print(f"collect + analyze + report: {t4 - t1:6.2f} s (target < 6 s)")
        print(f"peak memory (max RSS):      {peak_mib:6.0f} MiB")
        print(f"report: {rep.html} ({rep.html.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
