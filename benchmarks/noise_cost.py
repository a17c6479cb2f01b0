"""What the gradient noise scale costs: the bundled workload with and without its DDP comm
hook, side by side.

    python benchmarks/noise_cost.py [--ranks 2] [--rounds 5] [--model gpt-tiny]
        [--seq-len 64] [--batch-size 8] [--iters 10] [--steps 5]

Each round runs the same job twice under torchrun on gloo, the estimator on and off
(SCALESTUDY_NOISE_SCALE=off), in a shuffled order, on one learnable token dataset
written first (the noise scale is only measured on a dataset), and prints each round's
tokens/s; at the end the median ratio on / off over the rounds (1.0: free), the CPU
seconds the hook adds per rank and step (the jobs' CPU time on minus off: less sensitive
than the wall clock to other work on a shared machine) and the noise scales measured.
Rounds keep the machine's drift out of the ratio; the absolute numbers are not
comparable across machines. As benchmarks/workload_speed.py, from which it takes
`torchrun`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
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
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                torchrun(args.ranks, [
                    "-m", "scalestudy.workload", "--model", args.model, "--seq-len",
                    str(args.seq_len), "--batch-size", str(args.batch_size),
                    "--warmup-iters", str(args.warmup), "--iters", str(args.iters),
                    "--batches-per-iter", str(args.steps), "--no-diagnostics", "--data",
                    str(data), "--data-workers", "0", "--metrics", str(metrics)])
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                record = json.loads(metrics.read_text().splitlines()[-1])
                row[label] = record["throughput"]
                # CPU seconds of the whole job (start-up alike in both): less sensitive
                # than the wall clock to other jobs on a shared machine
                row[f"cpu_{label}"] = (after.ru_utime - before.ru_utime
                                       + after.ru_stime - before.ru_stime)
                row[f"step_{label}"] = record["iter_time_mean"] / record["batches_per_iter"]
                if label == "on":
                    scales.append(record["noise_scale"])
            rows.append(row)
            print(f"round {r}: on {row['on']:.1f}, off {row['off']:.1f} tokens/s, ratio "
                  f"{row['on'] / row['off']:.3f}; CPU s on {row['cpu_on']:.1f}, off "
                  f"{row['cpu_off']:.1f}", flush=True)
    ratios = sorted(row["on"] / row["off"] for row in rows)
    ratio = statistics.median(ratios)
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratio] * 3
    print(f"median ratio with / without the noise-scale hook over {args.rounds} rounds: "
          f"{ratio:.3f} (quartiles {quartiles[0]:.3f}–{quartiles[2]:.3f}, range "
          f"{ratios[0]:.3f}–{ratios[-1]:.3f}; {args.model}, {args.ranks} ranks, per-rank batch "
          f"{args.batch_size}); noise scales measured: "
          + ", ".join("null" if s is None else f"{s:.3g}" for s in scales), flush=True)
    steps = (args.warmup + args.iters) * args.steps
    extra = statistics.median((row["cpu_on"] - row["cpu_off"]) / (steps * args.ranks)
                              for row in rows)
    step = statistics.median(row["step_off"] for row in rows)
    print(f"CPU: median {extra * 1e3:+.2f} ms per rank and step with the hook, against "
          f"{step * 1e3:.1f} ms of wall clock per step without it ({extra / step:+.1%})",
          flush=True)
    print(json.dumps({"config": vars(args), "ratio": ratio, "rounds": rows,
                      "cpu_s_per_rank_step": extra, "step_s": step,
                      "noise_scales": scales}))


if __name__ == "__main__":
    main()
