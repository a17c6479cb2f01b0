"""``python -m scalestudy.workload``: synthetic-data training benchmark, Horovod-style output.

torch is imported only after the arguments are checked, so ``--help`` and bad arguments
answer at once. Exit status: 0 done, 2 bad arguments or a setting this machine cannot run.
"""

from __future__ import annotations

import time

_STARTED = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, NoReturn  # noqa: E402

from scalestudy.workload.names import BACKENDS, MODEL_NAMES  # noqa: E402

SCHEMA = "scalestudy.metrics/1"
PLANNED_BACKENDS = ("horovod", "deepspeed")
PROG = "scalestudy.workload"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line on stderr, exit status 2 (argparse would also print the usage)."""
        self.exit(2, f"{self.prog}: error: {message}\n")


def _count(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse and check the command line (exit 2 with one line on stderr when wrong)."""
    p = _Parser(prog=PROG, description="DDP training on synthetic data; prints img/sec.")
    p.add_argument("--model", default="resnet50", help=f"one of {', '.join(MODEL_NAMES)}")
    p.add_argument("--image-size", type=_count(1), default=224, help="height = width (pixels)")
    p.add_argument("--num-classes", type=_count(1), default=1000)
    p.add_argument("--batch-size", type=_count(1), default=32, help="per rank")
    p.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32")
    p.add_argument(
        "--warmup-iters", type=_count(0), default=1, help="untimed iterations before timing"
    )
    p.add_argument("--iters", type=_count(1), default=10, help="timed iterations")
    p.add_argument("--batches-per-iter", type=_count(1), default=10, help="batches per iteration")
    p.add_argument("--backend", default="ddp", help="training backend (only ddp for now)")
    p.add_argument("--dist-backend", choices=("auto", "gloo", "nccl"), default="auto")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                   help="auto: CUDA when present, else CPU; cuda: fail rather than fall back")
    p.add_argument("--metrics", type=Path, help="rank 0 appends one JSON record to this file")
    p.add_argument("--seed", type=int, default=42)
    args = p.parse_args(argv)
    if args.model not in MODEL_NAMES:
        p.error(f"unknown model {args.model!r}; valid models: {', '.join(MODEL_NAMES)}")
    if args.backend in PLANNED_BACKENDS:
        p.error(f"--backend {args.backend} is not supported yet; use ddp")
    if args.backend not in BACKENDS:
        p.error(f"unknown --backend {args.backend!r}; valid: {', '.join(BACKENDS)}")
    return args


def _log(line: str) -> None:
    print(line, flush=True)


def append_record(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line, flushed and fsynced; a torn last line is ended first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+b") as fh:
        if fh.tell() > 0:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                fh.write(b"\n")
        fh.write(json.dumps(record).encode() + b"\n")
        fh.flush()
        os.fsync(fh.fileno())


def _distinct(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; returns the exit status."""
    args = parse_args(argv)
    import torch

    from . import ddp
    from .env import discover
    from .timing import aggregate

    try:
        env = discover(os.environ)
        device = ddp.select_device(env, args.device)
        dist_backend = ddp.resolve_dist_backend(args.dist_backend, device)
        ddp.check_precision(args.precision, device)
        timeout = ddp.dist_timeout(os.environ)
    except (ddp.WorkloadError, ValueError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    lead = env.rank == 0
    if device.type == "cpu":
        ddp.set_cpu_threads(env, os.environ)
    cfg = ddp.TrainConfig(
        model=args.model,
        image_size=args.image_size,
        num_classes=args.num_classes,
        batch_size=args.batch_size,
        precision=args.precision,
        warmup_iters=args.warmup_iters,
        iters=args.iters,
        batches_per_iter=args.batches_per_iter,
        seed=args.seed,
    )
    images = cfg.batch_size * cfg.batches_per_iter

    def on_iter(i: int, seconds: float) -> None:
        if i == 0 and lead:
            _log("Running benchmark...")
        if lead:
            _log(f"Iter #{i}: {images / seconds:.1f} img/sec per GPU")

    ddp.init_process_group(env, dist_backend, timeout, device)
    if lead:
        _log(f"Model: {cfg.model}")
        _log(f"Batch size: {cfg.batch_size}")
        _log(f"Number of GPUs: {env.world_size}")
        _log(f"Device: {device.type}, dist backend: {dist_backend}, precision: {cfg.precision}")
        _log("Running warmup...")
    times, num_params = ddp.train(cfg, device, on_iter)
    ranks = ddp.gather({"host": socket.gethostname(), "iter_times": times})
    status = 0
    if lead:
        stats = aggregate([r["iter_times"] for r in ranks], cfg.batch_size, cfg.batches_per_iter)
        total, ci = stats["throughput"], stats["throughput_ci"]
        _log(f"Img/sec per GPU: {total / env.world_size:.1f} +-{ci / env.world_size:.1f}")
        _log(f"Total img/sec on {env.world_size} GPU(s): {total:.1f} +-{ci:.1f}")
        hosts = _distinct([r["host"] for r in ranks])
        record = {
            "schema": SCHEMA,
            "source": "workload",
            **stats,
            "world_size": env.world_size,
            "local_world_size": env.local_world_size,
            "nodes": max(len(hosts), env.num_nodes),
            "batch_size": cfg.batch_size,
            "global_batch": cfg.batch_size * env.world_size,
            "model": cfg.model,
            "image_size": cfg.image_size,
            "precision": cfg.precision,
            "backend": args.backend,
            "dist_backend": dist_backend,
            "device": device.type,
            "warmup_iters": cfg.warmup_iters,
            "iters": cfg.iters,
            "batches_per_iter": cfg.batches_per_iter,
            "num_params": num_params,
            "hosts": hosts,
            "torch_version": torch.__version__,
            "python_version": platform.python_version(),
            "elapsed_s": round(time.perf_counter() - _STARTED, 3),
        }
        if args.metrics is not None:
            try:
                append_record(args.metrics, record)
            except OSError as exc:  # still shut down with the others, then fail
                print(f"{PROG}: error: cannot write {args.metrics}: {exc}", file=sys.stderr)
                status = 1
    ddp.shutdown(device)
    return status


if __name__ == "__main__":
    sys.exit(main())
