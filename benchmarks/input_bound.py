"""Input-bound, measured: WebDataset shards of large PNGs read by a tiny model, with 0 and
2 loader workers, beside synthetic data, side by side.

    python benchmarks/input_bound.py [--images 256] [--shards 2] [--png-size 512]
        [--ranks 1] [--rounds 3] [--workers 0 2] [--batch-size 32] [--keep DIR]

The shards are written here with plain numpy, tarfile and Pillow (a user's own code,
not scalestudy's generator): noise PNGs of --png-size pixels, a class in KEY.cls. Each
round runs, in a shuffled order, the bundled benchmark on synthetic data and on the
shards with each --workers count (small_cnn at image_size 32, so decoding the large PNGs
dominates the step), all under torchrun with the same batch and timing. It prints each
run's img/s, input_wait_fraction and read_GBps, the medians over rounds, and whether the
report's rule (results.analysis.inputs, INPUT_BOUND) names each variant input-bound.
Expected: 0 workers input-bound, 2 workers faster, synthetic never flagged. Needs the
workload's data reading (issue 47); absolute numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

from scalestudy.results.analysis.inputs import INPUT_BOUND, input_findings


def write_shards(directory: Path, images: int, shards: int, size: int, seed: int = 0) -> int:
    """train-/val- shards of noise PNGs with 10 classes; the bytes written."""
    rng = np.random.default_rng(seed)
    key = 0
    for split, count, parts in (("train", images, shards), ("val", shards, shards)):
        per = -(-count // parts)
        for s in range(parts):
            with tarfile.open(directory / f"{split}-{s:06d}.tar", "w") as tar:
                for _ in range(max(0, min(per, count - s * per))):
                    buffer = io.BytesIO()
                    pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
                    Image.fromarray(pixels).save(buffer, format="PNG")
                    for name, data in ((f"{key:08d}.png", buffer.getvalue()),
                                       (f"{key:08d}.cls", str(key % 10).encode())):
                        info = tarfile.TarInfo(name)
                        info.size = len(data)
                        tar.addfile(info, io.BytesIO(data))
                    key += 1
    return sum(p.stat().st_size for p in directory.iterdir())


def run(ranks: int, args: list[str], metrics: Path) -> dict[str, object]:
    """One torchrun job of the bundled benchmark; its record."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={ranks}", "-m", "scalestudy.workload", *args,
           "--metrics", str(metrics)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{done.stderr[-3000:]}")
    return json.loads(metrics.read_text().splitlines()[-1])


def main() -> None:
    """Write the shards, run the rounds, print the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=256)
    p.add_argument("--shards", type=int, default=2)
    p.add_argument("--png-size", type=int, default=512)
    p.add_argument("--ranks", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--keep", type=Path, help="write the shards here (kept) instead of a "
                   "temporary directory")
    p.add_argument("--seed", type=int, default=0, help="of the order within rounds")
    args = p.parse_args()
    shape = ["--model", "small_cnn", "--image-size", "32", "--num-classes", "10",
             "--batch-size", str(args.batch_size), "--warmup-iters", "1", "--iters",
             str(args.iters), "--batches-per-iter", str(args.steps), "--no-diagnostics"]
    with tempfile.TemporaryDirectory() as tmp:
        data = args.keep or Path(tmp) / "shards"
        data.mkdir(parents=True, exist_ok=True)
        written = write_shards(data, args.images, args.shards, args.png_size)
        print(f"{args.images} PNGs of {args.png_size}² px in {args.shards} shard(s): "
              f"{written / 1e6:.0f} MB in {data}", flush=True)
        variants = {"synthetic": [], **{f"workers={w}": ["--data", str(data.resolve()),
                                                         "--data-workers", str(w)]
                                        for w in args.workers}}
        records: dict[str, list[dict[str, object]]] = {v: [] for v in variants}
        rng = random.Random(args.seed)
        for r in range(args.rounds):
            order = list(variants)
            rng.shuffle(order)
            for label in order:
                got = run(args.ranks, [*shape, *variants[label]],
                          Path(tmp) / f"{label}-{r}.jsonl")
                records[label].append(got)
                print(f"round {r} {label}: {float(got['throughput']):.1f} img/s, input wait "
                      f"{got.get('input_wait_fraction', '-')}, read "
                      f"{got.get('read_GBps', '-')} GB/s", flush=True)
    rows = []
    for label, got in records.items():
        row: dict[str, object] = {
            "group": label, "world_size": args.ranks,
            "throughput_median": statistics.median(float(g["throughput"]) for g in got)}
        for key in ("input_wait_fraction", "input_wait_s", "decode_s", "read_GBps",
                    "data_workers", "data_stage"):
            values = [g[key] for g in got if key in g]
            if values:
                row[key] = (statistics.median(map(float, values))  # type: ignore[arg-type]
                            if not isinstance(values[0], str) else values[0])
        row["input_bound"] = bool(input_findings(pd.DataFrame([row])))
        rows.append(row)
    print(f"\nmedians over {args.rounds} round(s), {args.ranks} rank(s), per-GPU batch "
          f"{args.batch_size}; input-bound above {INPUT_BOUND:.0%} of the step:")
    for row in rows:
        share = row.get("input_wait_fraction")
        print(f"  {row['group']:<12} {row['throughput_median']:>9.1f} img/s   input wait "
              f"{'-' if share is None else f'{float(share):.0%}':>5}   read "
              f"{row.get('read_GBps', '-')} GB/s   input-bound: "
              f"{'yes' if row['input_bound'] else 'no'}")
    for line in input_findings(pd.DataFrame(rows)):
        print(line)
    print(json.dumps({"config": {k: str(v) for k, v in vars(args).items()}, "rows": rows}))


if __name__ == "__main__":
    main()
