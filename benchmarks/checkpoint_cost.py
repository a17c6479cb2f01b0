"""What the bundled benchmark's checkpoints cost, measured through the benchmark itself:
2 ranks under torchrun train the model on synthetic data with a checkpoint every
`--every` steps, once with synchronous saves and once with async ones, then start again
on the async run's directory (a resume: the load; its `finished.json` removed first, as
if the run had been killed after its last save). One line per run with the record's
checkpoint keys and its start-up split.

    python benchmarks/checkpoint_cost.py [--model gpt-mini] [--ranks 2] [--every 5]
        [--dir /tmp/ckpt-cost] [--device cpu]

On this repository's CPU machines it runs with gloo; on a GPU node give --device cuda
(NCCL; the async saves then use a gloo group of their own).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KEYS = ("checkpoints", "checkpoint_save_s", "checkpoint_complete_s", "checkpoint_load_s",
        "checkpoint_bytes", "checkpoint_share", "resumed_from_step", "step_time_s",
        "startup_s", "startup_launch_s", "startup_imports_s", "startup_rendezvous_s",
        "startup_data_s", "first_step_s")


def run(args: argparse.Namespace, directory: Path, metrics: Path, extra: list[str]) -> dict:
    """One benchmark run; its record."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           str(args.ranks), "-m", "scalestudy.workload", "--model", args.model, "--seq-len",
           str(args.seq_len), "--batch-size", str(args.batch_size), "--warmup-iters", "1",
           "--iters", str(args.iters), "--batches-per-iter", "5", "--no-diagnostics",
           "--device", args.device, "--optimizer", "adamw", "--checkpoint-dir",
           str(directory), "--checkpoint-every-steps", str(args.every), "--metrics",
           str(metrics), *extra]
    env = os.environ | {"PYTHONPATH": str(ROOT),
                        "SCALESTUDY_LAUNCHED_AT": f"{time.time():.6f}"}
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return json.loads(metrics.read_text().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gpt-mini")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--iters", type=int, default=4)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--every", type=int, default=5)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dir", type=Path, default=Path("/tmp/ckpt-cost"))
    args = p.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    for name, extra, directory in (("sync", [], "sync"), ("async", ["--checkpoint-async"],
                                                          "async"),
                                   ("resume", ["--checkpoint-async"], "async")):
        (args.dir / directory / "finished.json").unlink(missing_ok=True)
        record = run(args, args.dir / directory, args.dir / f"{name}.jsonl", extra)
        print(json.dumps({"run": name, "model": args.model, "ranks": args.ranks,
                          **{k: record.get(k) for k in KEYS}}), flush=True)


if __name__ == "__main__":
    main()
