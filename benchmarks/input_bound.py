"""Is the input the bottleneck? The bundled workload on WebDataset shards of large PNGs,
with several loader worker counts, against synthetic data, on one rank.

    python benchmarks/input_bound.py [--workers 0 2] [--model small_cnn] [--image-size 32]
        [--batch-size 8] [--png-size 768] [--samples 96] [--shards 4] [--device auto]
        [--rounds 1] [--keep DIR]

The shards are written here with numpy, Pillow and tarfile (a user's own code, not
scalestudy's generator): random-noise RGB PNGs of png-size pixels (noise does not
compress, so each decode costs what a photograph of that size would), classes i mod 10.
Each point runs the workload once per round; the script prints throughput, the share of
each step spent waiting for input and whether that makes the point input-bound (the
record's input_wait_fraction above 0.10, the report's rule). On a GPU, the issue's
check: `--model resnet50 --image-size 224 --batch-size 64 --workers 0 4 8 --png-size
512 --samples 2048 --shards 16`.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent
INPUT_BOUND = 0.10


def write_shards(root: Path, samples: int, shards: int, size: int) -> int:
    """WebDataset shards train-NNNNNN.tar of KEY.png + KEY.cls; returns their bytes."""
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    for s in range(shards):
        with tarfile.open(root / f"train-{s:06d}.tar", "w") as tar:
            for i in range(s, samples, shards):
                buf = io.BytesIO()
                Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(
                    buf, format="PNG", compress_level=1)
                for name, data in ((f"{i:08d}.png", buf.getvalue()),
                                   (f"{i:08d}.cls", str(i % 10).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return sum(p.stat().st_size for p in root.iterdir())


def run(args: argparse.Namespace, tmp: Path, label: str, extra: list[str]) -> dict:
    """One run of the workload on one rank; its record."""
    metrics = tmp / f"{label}.jsonl"
    metrics.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "scalestudy.workload", "--model", args.model,
           "--image-size", str(args.image_size), "--batch-size", str(args.batch_size),
           "--num-classes", "10", "--device", args.device, "--warmup-iters", "1", "--iters",
           str(args.iters), "--batches-per-iter", str(args.steps), "--no-diagnostics",
           "--metrics", str(metrics), *extra]
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{done.stderr[-3000:]}")
    return json.loads(metrics.read_text().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    p.add_argument("--model", default="small_cnn")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--png-size", type=int, default=768)
    p.add_argument("--samples", type=int, default=96)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--device", default="auto")
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--keep", type=Path, help="write (or reuse) the shards here")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        data = args.keep or tmp / "shards"
        if not (data / "train-000000.tar").exists():
            nbytes = write_shards(data, args.samples, args.shards, args.png_size)
            print(f"wrote {args.samples} PNGs of {args.png_size}^2 px in {args.shards} "
                  f"shards: {nbytes / 1e6:.1f} MB", flush=True)
        points = [("synthetic", [])] + [(f"{w} workers", ["--data", str(data.absolute()),
                                                          "--data-workers", str(w)])
                                        for w in args.workers]
        rows = {label: [run(args, tmp, label.replace(" ", "_"), extra)
                        for _ in range(args.rounds)] for label, extra in points}
    summary = {}
    for label, records in rows.items():
        throughput = statistics.median(r["throughput"] for r in records)
        share = statistics.median(r.get("input_wait_fraction", 0.0) for r in records)
        read = statistics.median(r.get("read_GBps", 0.0) for r in records)
        bound = share > INPUT_BOUND
        summary[label] = {"throughput": round(throughput, 2), "input_wait_fraction": share,
                          "read_GBps": read, "input_bound": bound,
                          "device": records[0]["device"]}
        print(f"{label:>12}: {throughput:8.1f} img/s, input wait {100 * share:5.1f} % of "
              f"each step, read {read:.3g} GB/s{'  INPUT-BOUND' if bound else ''}", flush=True)
    print(json.dumps({"config": {k: str(v) for k, v in vars(args).items()},
                      "points": summary}))


if __name__ == "__main__":
    main()
