"""Checks of the benchmark's command line that span several flags, before torch loads:
the measured target's and the checkpoints'. Each answers one line (argparse's error)."""

from __future__ import annotations

import argparse

from .names import is_transformer


def flag_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the flags (None: nothing)."""
    return _target_problem(args) or _checkpoint_problem(args)


def _target_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the measured-target flags (None: nothing, or no target)."""
    given = [f for f in ("target_value", "eval_every", "max_steps")
             if getattr(args, f) is not None]
    if args.target_metric is None:
        return (f"--{given[0].replace('_', '-')} needs --target-metric" if given else None)
    missing = [f"--{f.replace('_', '-')}" for f in ("target_value", "eval_every", "max_steps")
               if getattr(args, f) is None]
    if missing:
        return f"--target-metric needs {', '.join(missing)}"
    if not args.data:
        return ("--target-metric needs --data (a dataset with a held-out split: random "
                "tensors cannot be learned)")
    if args.target_metric == "val_accuracy" and is_transformer(args.model):
        return f"--target-metric val_accuracy is for classifiers, not {args.model}: use val_loss"
    least = (args.warmup_iters + 1) * args.batches_per_iter
    if args.max_steps < least:
        return (f"--max-steps {args.max_steps} leaves no timed iteration: at least "
                f"(--warmup-iters + 1) x --batches-per-iter = {least}")
    return None


def _checkpoint_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the checkpoint flags (None: nothing, or no checkpoints)."""
    every = [f for f in ("--checkpoint-every-steps", "--checkpoint-every-seconds")
             if getattr(args, f[2:].replace("-", "_")) is not None]
    if args.checkpoint_dir is None:
        return f"{every[0]} needs --checkpoint-dir" if every else (
            "--checkpoint-async needs --checkpoint-dir" if args.checkpoint_async else None)
    if len(every) != 1:
        return ("--checkpoint-dir needs one of --checkpoint-every-steps, "
                "--checkpoint-every-seconds" if not every else f"give {' or '.join(every)}, "
                "not both")
    if args.backend not in ("ddp", "fsdp") or args.probe_batch:
        return (f"checkpoints are saved with the ddp and fsdp backends, not "
                f"{'--probe-batch' if args.probe_batch else args.backend}")
    if args.tp > 1 or args.pp > 1:
        return "checkpoints are saved for data-parallel runs only (--tp 1 --pp 1)"
    return None

