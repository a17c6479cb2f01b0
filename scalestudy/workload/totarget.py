"""Training to a measured target: optimizer steps one by one, the held-out split
evaluated every `eval_every` of them on every rank (each its share, the sums gathered),
until the metric reaches the value or `max_steps`; and the record's target keys.

Steps count from the first (warm-up) step: every step trained the model. Time to the
target is the training time of the steps up to the evaluation that reached it (warm-up
included; the evaluations, timed apart as `eval_s`, excluded). The throughput stays
what it is without a target: work over time of the steps after the warm-up, grouped in
iterations of batches_per_iter steps (a last, incomplete one left out), evaluations
excluded. The loop stops at the first evaluation that reached the value once at least
one such iteration is timed, so a run that reaches it during the warm-up still
measures its throughput.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch
from torch import nn

from .layout import Layout

#: An evaluation's per-rank sums: (summed loss, correct predictions, predictions).
Sums = tuple[float, float, float]


@dataclass(frozen=True)
class Goal:
    """What to train to: `metric` (val_loss or val_accuracy) reaching `value`."""

    metric: str
    value: float
    eval_every: int
    max_steps: int

    def reached(self, value: float) -> bool:
        """val_loss <= value, val_accuracy >= value."""
        return value <= self.value if self.metric == "val_loss" else value >= self.value

    def better(self, a: float, b: float) -> bool:
        """Whether `a` is better than `b`."""
        return a < b if self.metric == "val_loss" else a > b


@dataclass
class Outcome:
    """One rank's run to the target (the same on every rank: the metrics are gathered)."""

    steps: int = 0  # optimizer steps trained
    reached_at: int | None = None  # the step of the first evaluation that reached it
    time_to_target_s: float | None = None
    train_s: float = 0.0  # training time of every step (evaluations excluded)
    eval_s: float = 0.0
    curve: list[tuple[int, float]] = field(default_factory=list)  # (step, value)
    best: float | None = None


def metric_of(sums: Sequence[Sums], metric: str) -> float:
    """The held-out metric from every rank's sums: mean loss, or accuracy."""
    loss, correct, count = (math.fsum(s[i] for s in sums) for i in range(3))
    if count <= 0:
        return math.nan
    return loss / count if metric == "val_loss" else correct / count


def evaluator(model: nn.Module, batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
              device: torch.device, gather: Callable[[Sums], list[Sums]], metric: str,
              amp: Callable[[], contextlib.AbstractContextManager[object]]
              ) -> Callable[[], float]:
    """A function that evaluates the model on the rank's held-out batches and returns the
    metric over all ranks (every rank must call it: the sums are gathered)."""
    loss_fn = nn.CrossEntropyLoss(reduction="sum")
    moved = [(x.to(device), y.to(device)) for x, y in batches]

    def evaluate() -> float:
        was_training = model.training
        model.eval()
        loss, correct, count = 0.0, 0.0, 0.0
        with torch.no_grad():
            for x, y in moved:
                with amp():
                    logits = model(x)
                loss += float(loss_fn(logits.float(), y))
                correct += float((logits.argmax(-1) == y).sum())
                count += y.numel()
        model.train(was_training)
        return metric_of(gather((loss, correct, count)), metric)

    return evaluate


def train(step: Callable[[], object], goal: Goal, warmup_steps: int, batches_per_iter: int,
          evaluate: Callable[[], float], sync: Callable[[], None],
          before_timed: Callable[[], object] = lambda: None,
          on_iter: Callable[[int, float], object] | None = None,
          start: Outcome | None = None,
          after_step: Callable[[int, Outcome], object] | None = None,
          ) -> tuple[list[float], Outcome]:
    """Train step by step to the goal; returns the timed iterations' seconds (after the
    warm-up) and the outcome. `start`: the outcome a checkpoint held (its steps, time
    and curve go on; this attempt warms up again before its timed iterations);
    `after_step(steps, outcome)` at each step boundary, outside the timed steps (a
    checkpoint's save)."""
    out = start if start is not None else Outcome()
    times: list[float] = []
    chunk, in_chunk = 0.0, 0
    # warm up again after a resume, leaving at least one timed iteration before max_steps
    warm = max(out.steps, min(out.steps + warmup_steps, goal.max_steps - batches_per_iter))
    while out.steps < goal.max_steps:
        if out.steps == warm:
            sync()
            before_timed()
        sync()
        began = time.perf_counter()
        step()
        sync()
        took = time.perf_counter() - began
        out.steps += 1
        out.train_s += took
        if out.steps > warm:
            chunk, in_chunk = chunk + took, in_chunk + 1
            if in_chunk == batches_per_iter:
                times.append(chunk)
                if on_iter is not None:
                    on_iter(len(times) - 1, chunk)
                chunk, in_chunk = 0.0, 0
        if out.steps % goal.eval_every == 0 or out.steps == goal.max_steps:
            _evaluate(out, goal, evaluate)
            if out.reached_at is not None and times:
                break
        if after_step is not None:
            after_step(out.steps, out)
    return times, out


def _evaluate(out: Outcome, goal: Goal, evaluate: Callable[[], float]) -> None:
    """One evaluation: timed apart, on the curve, the best and the target's step kept."""
    began = time.perf_counter()
    value = evaluate()
    out.eval_s += time.perf_counter() - began
    out.curve.append((out.steps, value))
    if out.best is None or goal.better(value, out.best):
        out.best = value
    if out.reached_at is None and goal.reached(value):
        out.reached_at, out.time_to_target_s = out.steps, out.train_s


#: An evaluation batch holds at least this many tokens (a language model) or images:
#: without gradients a batch costs little memory, and the metric does not depend on it.
EVAL_TOKENS, EVAL_IMAGES = 8192, 64


def eval_batch(batch_size: int, kind: str, seq_len: int) -> int:
    """Samples per evaluation batch: the training batch, or more up to the floor above."""
    least = max(1, EVAL_TOKENS // seq_len) if kind == "tokens" else EVAL_IMAGES
    return max(batch_size, least)


class Config(Protocol):
    """What the loop reads of train.TrainConfig (this module imports nothing of train)."""

    @property
    def data(self) -> str: ...
    @property
    def layout(self) -> Layout: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def seq_len(self) -> int: ...
    @property
    def image_size(self) -> int: ...
    @property
    def num_classes(self) -> int: ...
    @property
    def warmup_iters(self) -> int: ...
    @property
    def batches_per_iter(self) -> int: ...


def run_to_target(cfg: Config, goal: Goal, kind: str, step: Callable[[], None],
                  model: nn.Module, gather: Callable[[Sums], list[Sums]],
                  device: torch.device,
                  amp: Callable[[], contextlib.AbstractContextManager[object]],
                  sync: Callable[[], None], before_timed: Callable[[], None],
                  on_iter: Callable[[int, float], object] | None, rank: int,
                  start: Outcome | None = None,
                  after_step: Callable[[int, Outcome], object] | None = None,
                  ) -> tuple[list[float], Outcome]:
    """train.run's loop with a measured target: the rank's share of the held-out split of
    the dataset (`kind`: tokens or images) read, then `train` with an evaluator of the
    model on it."""
    from .data import heldout

    val = heldout.batches(Path(cfg.data).absolute(), kind, cfg.layout.coordinates(rank)["dp"],
                          cfg.layout.dp, eval_batch(cfg.batch_size, kind, cfg.seq_len),
                          cfg.seq_len, cfg.image_size, cfg.num_classes)
    evaluate = evaluator(model, val, device, gather, goal.metric, amp)
    return train(step, goal, cfg.warmup_iters * cfg.batches_per_iter, cfg.batches_per_iter,
                 evaluate, sync, before_timed, on_iter, start, after_step)


def fields(goal: Goal, out: Outcome, global_batch: int) -> dict[str, object]:
    """The record's target keys."""
    at, seconds = out.reached_at, out.time_to_target_s
    return {
        "target_metric": goal.metric, "target_value": goal.value,
        "target_reached": at is not None,
        "steps_to_target": at,
        "samples_to_target": at * global_batch if at is not None else None,
        "time_to_target_s": round(seconds, 6) if seconds is not None else None,
        "best_value": out.best,
        "eval_every": goal.eval_every, "max_steps": goal.max_steps,
        "steps_trained": out.steps, "train_s": round(out.train_s, 6),
        "eval_s": round(out.eval_s, 6),
        "eval_curve": [[s, s * global_batch, v] for s, v in out.curve],
    }


def line(record: dict[str, object]) -> str | None:
    """The target's line in the benchmark's output (None: no measured target)."""
    if "target_metric" not in record:
        return None
    what = f"{record['target_metric']} {record['target_value']}"
    if record["target_reached"]:
        return (f"Target {what} reached at step {record['steps_to_target']} "
                f"({record['samples_to_target']} samples, {record['time_to_target_s']:.2f} s "
                f"training; best {record['best_value']:.4f})")
    return (f"Target {what} not reached in {record['steps_trained']} steps "
            f"(best {record['best_value']:.4f})")
