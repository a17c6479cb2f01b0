"""Does the measured comm overhead rise when the allreduce gets expensive? Side by side.

    python benchmarks/comm_overhead.py [--ranks 1 2 4] [--rounds 3] [--backends ddp horovod]

ResNet-18 at 32x32 with batch 2 per rank: 45 MB of gradients and little compute, so
from 1 to 4 ranks the allreduce should dominate. Each round runs every (backend, ranks)
point once, in a shuffled order, through the bundled workload (torchrun for DDP,
horovodrun for Horovod when it is importable); the median `comm_overhead` over rounds is
printed per point, with its min and max. This was a test once; a loaded machine made it
flaky (0.363 -> 0.388 where +0.2 was asserted), so it is a benchmark with figures in the
README: machine load moves these numbers, the ratios in one run are what to read.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def overhead(backend: str, ranks: int, work: Path) -> float:
    """comm_overhead of one run."""
    metrics = work / f"{backend}-{ranks}-{random.randrange(1 << 30)}.jsonl"
    args = ["--model", "resnet18", "--image-size", "32", "--batch-size", "2",
            "--num-classes", "10", "--warmup-iters", "1", "--iters", "2",
            "--batches-per-iter", "2", "--backend", backend, "--metrics", str(metrics)]
    if backend == "horovod":
        cmd = [sys.executable, "-m", "horovod.runner.launch", "-np", str(ranks), "-H",
               f"localhost:{ranks}", sys.executable, "-m", "scalestudy.workload", *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={ranks}", "-m", "scalestudy.workload", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OMPI_ALLOW_RUN_AS_ROOT": "1",
           "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=work)
    if done.returncode != 0:
        raise SystemExit(f"{backend} at {ranks} ranks failed:\n{done.stderr[-2000:]}")
    return float(json.loads(metrics.read_text().splitlines()[-1])["comm_overhead"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backends", nargs="+", default=["ddp", "horovod"])
    args = parser.parse_args()
    backends = [b for b in args.backends
                if b != "horovod" or importlib.util.find_spec("horovod") is not None]
    points = [(b, r) for b in backends for r in args.ranks]
    seen: dict[tuple[str, int], list[float]] = {p: [] for p in points}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            random.shuffle(points)
            for backend, ranks in points:
                seen[(backend, ranks)].append(overhead(backend, ranks, Path(tmp)))
    print("backend  ranks  comm_overhead median [min-max]")
    for (backend, ranks), values in sorted(seen.items()):
        print(f"{backend:8} {ranks:5}  {statistics.median(values):.3f} "
              f"[{min(values):.3f}-{max(values):.3f}]")
    for backend in backends:
        low = statistics.median(seen[(backend, min(args.ranks))])
        high = statistics.median(seen[(backend, max(args.ranks))])
        print(f"{backend}: {min(args.ranks)} -> {max(args.ranks)} ranks: {high - low:+.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
