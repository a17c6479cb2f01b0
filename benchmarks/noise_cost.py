"""What the gradient noise scale costs: the bundled workload with and without its DDP comm
hook, side by side.

    python benchmarks/noise_cost.py [--ranks 2] [--rounds 5] [--model gpt-tiny]
        [--seq-len 64] [--batch-size 8] [--iters 10] [--steps 5]

Each round runs the same job twice under torchrun on gloo, the estimator on and off
(SCALESTUDY_NOISE_SCALE=off), in a shuffled order, on one learnable token dataset
written first (the noise scale is only measured on a dataset), and prints each round's
tokens/s; at the end the median ratio on / off over the rounds (1.0: free) and the noise
scales measured. Rounds keep the machine's drift out of the ratio; the absolute numbers
are not comparable across machines. As benchmarks/workload_speed.py, from which it
takes `torchrun`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from workload_speed import torchrun  # noqa: E402

from scalestudy.site import datagen  # noqa: E402


def main() -> None:
    """Run the rounds and print the ratio."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--model", default="gpt-tiny")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--steps", type=int, default=5, help="optimizer steps per iteration")
    p.add_argument("--seed", type=int, default=0, help="of the order within rounds")
    args = p.parse_args()
    rng = random.Random(args.seed)
    rows, scales = [], []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "tokens"
        data.mkdir()
        datagen.write_tokens(data, 1 << 20, 256, 0)
        for r in range(args.rounds):
            row = {}
            order = ["on", "off"]
            rng.shuffle(order)
            for label in order:
                metrics = Path(tmp) / f"{r}-{label}.jsonl"
                os.environ["SCALESTUDY_NOISE_SCALE"] = label
                torchrun(args.ranks, [
                    "-m", "scalestudy.workload", "--model", args.model, "--seq-len",
                    str(args.seq_len), "--batch-size", str(args.batch_size),
                    "--warmup-iters", str(args.warmup), "--iters", str(args.iters),
                    "--batches-per-iter", str(args.steps), "--no-diagnostics", "--data",
                    str(data), "--data-workers", "0", "--metrics", str(metrics)])
                record = json.loads(metrics.read_text().splitlines()[-1])
                row[label] = record["throughput"]
                if label == "on":
                    scales.append(record["noise_scale"])
            rows.append(row)
            print(f"round {r}: on {row['on']:.1f}, off {row['off']:.1f} tokens/s, ratio "
                  f"{row['on'] / row['off']:.3f}", flush=True)
    ratio = statistics.median(row["on"] / row["off"] for row in rows)
    print(f"median ratio with / without the noise-scale hook over {args.rounds} rounds: "
          f"{ratio:.3f} ({args.model}, {args.ranks} ranks, per-rank batch "
          f"{args.batch_size}); noise scales measured: "
          + ", ".join("null" if s is None else f"{s:.3g}" for s in scales), flush=True)
    print(json.dumps({"config": vars(args), "ratio": ratio, "rounds": rows,
                      "noise_scales": scales}))


if __name__ == "__main__":
    main()
