"""The bundled workload against a minimal hand-written DDP loop, side by side.

    python benchmarks/workload_speed.py [--ranks 1 2] [--rounds 5] [--model small_cnn]
        [--image-size 32] [--batch-size 16] [--precision fp32] [--channels-last]
        [--baseline DIR]

For each rank count it runs, round after round, the hand-written loop
(benchmarks/handwritten_ddp.py), the workload with its diagnostics on and the workload
with them off, in a shuffled order each round, all under torchrun with the same model,
batch, precision and timing, and prints each round's img/sec and the median ratios
workload / hand-written. Targets: >= 0.98 with diagnostics on, >= 0.995 with them off.
Rounds keep the machine's drift out of the ratios; the absolute numbers are not
comparable across runs. With --baseline DIR (another checkout, e.g. the previous main:
`git archive <commit> scalestudy | tar -x -C DIR`) each round also runs that checkout's
workload (diagnostics off) and the script prints the median ratio this / baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def torchrun(ranks: int, program: list[str], checkout: Path = HERE.parent
             ) -> subprocess.CompletedProcess[str]:
    """One torchrun job on this host, importing scalestudy from `checkout`;
    OMP_NUM_THREADS=1 for every variant alike."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": str(checkout)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={ranks}", *program]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{done.stderr[-3000:]}")
    return done


def main() -> None:
    """Run the rounds and print the ratios."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--model", default="small_cnn")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0, help="of the order within rounds")
    p.add_argument("--baseline", type=Path, help="another checkout to compare with")
    args = p.parse_args()
    shape = ["--model", args.model, "--image-size", str(args.image_size),
             "--batch-size", str(args.batch_size), "--precision", args.precision,
             *(["--channels-last"] if args.channels_last else [])]
    hand = [str(HERE / "handwritten_ddp.py"), *shape, "--warmup", str(args.warmup),
            "--iters", str(args.iters), "--steps", str(args.steps)]
    summary = {}
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        for ranks in args.ranks:
            rows = []
            for r in range(args.rounds):
                row = {}
                order = ["handwritten", "diagnostics_on", "diagnostics_off",
                         *(["baseline"] if args.baseline else [])]
                rng.shuffle(order)
                for label in order:
                    if label == "handwritten":
                        out = torchrun(ranks, hand).stdout
                        row[label] = float(re.search(r"handwritten img/sec: (\S+)", out)[1])
                        continue
                    metrics = Path(tmp) / f"{ranks}-{r}-{label}.jsonl"
                    flag = "--diagnostics" if label == "diagnostics_on" else "--no-diagnostics"
                    torchrun(ranks, ["-m", "scalestudy.workload", *shape, "--num-classes",
                                     "1000", "--warmup-iters", str(args.warmup), "--iters",
                                     str(args.iters), "--batches-per-iter", str(args.steps),
                                     flag, "--metrics", str(metrics)],
                             args.baseline if label == "baseline" else HERE.parent)
                    row[label] = json.loads(metrics.read_text().splitlines()[-1])["throughput"]
                row = {k: row[k] for k in ("handwritten", "diagnostics_on", "diagnostics_off",
                                           "baseline") if k in row}
                rows.append(row)
                print(f"{ranks} rank(s) round {r}: " + ", ".join(
                    f"{k} {v:.1f} img/s" for k, v in row.items()), flush=True)
            ratios = {k: statistics.median(row[k] / row["handwritten"] for row in rows)
                      for k in ("diagnostics_on", "diagnostics_off")}
            if args.baseline:
                ratios["this_over_baseline"] = statistics.median(
                    row["diagnostics_off"] / row["baseline"] for row in rows)
                print(f"{ranks} rank(s): median ratio this checkout / baseline (diagnostics "
                      f"off): {ratios['this_over_baseline']:.3f}", flush=True)
            summary[ranks] = ratios
            print(f"{ranks} rank(s): median ratio workload/handwritten: diagnostics on "
                  f"{ratios['diagnostics_on']:.3f} (target >= 0.98), off "
                  f"{ratios['diagnostics_off']:.3f} (target >= 0.995); global batch "
                  f"{args.batch_size * ranks}, per-GPU batch {args.batch_size}", flush=True)
    print(json.dumps({"config": {k: str(v) if isinstance(v, Path) else v
                                 for k, v in vars(args).items()}, "ratios": summary}))


if __name__ == "__main__":
    main()
