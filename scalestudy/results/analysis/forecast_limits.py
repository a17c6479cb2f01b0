"""What a forecast may claim: how a series' fixed global batch is read, how far beyond its
measured scales it may reach, and the checks its fit must pass before it forecasts at all.

- A fixed global batch is strong scaling (each GPU's work per step the global batch over
  its GPUs) only where each GPU's batch shrinks with it: the per-GPU batch times the GPUs
  is the global batch on every row. Where the per-GPU (micro-)batch stays the same, or is
  not given, the global batch is held by gradient accumulation (global batch = per-GPU
  batch × GPUs × accumulation steps), the way published tables that print one are
  measured, and the series is read as weak scaling: each GPU runs the same micro-batch,
  one allreduce a step. Read as strong scaling, three near-perfect small scales make a
  communication term out of their noise that weighs more as each GPU's share shrinks
  (docs/forecast.md: −18.6 % and −32.7 % at 4× and 8× on Paddle's BERT seq-512 table,
  −1.8 % to −2.9 % read as weak scaling).
- A scale is forecast only up to MAX_FACTOR times the largest measured one (what the
  backtest supports), up to the system's `max_nodes`, and only while each GPU keeps one
  sample (strong scaling) or one micro-batch (accumulation) of the global batch.
- A fit whose throughput falls with scale, whose relative residual or hold-out miss is
  above MAX_RESIDUAL or MAX_HOLDOUT_MISS, forecasts nothing: its figures say why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: How far beyond the largest measured scale a forecast reaches: the backtest's farthest
#: points are 8× out (benchmarks/forecast_backtest.py).
MAX_FACTOR = 8.0
#: A fit's RMS relative residual above which it forecasts nothing.
MAX_RESIDUAL = 0.15
#: A hold-out miss (the chosen model refitted without the largest scale, asked for it)
#: above which the fit forecasts nothing.
MAX_HOLDOUT_MISS = 0.25
#: How much lower than a smaller scale's the largest scale's throughput may be (rounding)
#: before the series counts as falling with scale.
FALL_TOLERANCE = 0.01


@dataclass(frozen=True)
class Reading:
    """How a series is read: its per-GPU work per step, and where it stops."""

    strong: bool  # each GPU's work per step is the global batch over its GPUs
    global_batch: float | None  # the fixed global batch, where there is one
    work: np.ndarray  # per-GPU work per step of each point (the model's batch)
    max_gpus: float | None  # beyond this, a GPU gets under one sample (or micro-batch)
    why: str  # the reading in words ("" for plain weak scaling)


def reading(p: np.ndarray, per_gpu: np.ndarray, glob: np.ndarray,
            sample: float = 1.0) -> Reading:
    """The reading of points at `p` GPUs with their per-GPU batch and global batch (NaN
    where not known); `sample`: the units of one sample in these batches."""
    fixed = (np.isfinite(glob).all() and len(set(glob.tolist())) == 1 and glob[0] > 0
             and len(np.unique(p)) > 1)
    known = np.isfinite(per_gpu) & (per_gpu > 0)
    if not fixed:
        return Reading(False, None, np.where(known, per_gpu, 1.0), None, "")
    g = float(glob[0])
    if known.all() and np.allclose(per_gpu * p, g, rtol=0.01):
        return Reading(True, g, g / p, g / sample,
                       f"strong scaling: the global batch {g:,.0f} shared out (each GPU's "
                       "batch shrinks with the GPUs); forecasts stop where a GPU would get "
                       "under one sample")
    if known.all() and len(set(per_gpu.tolist())) == 1:
        b = float(per_gpu[0])
        return Reading(False, g, per_gpu, g / b,
                       f"weak scaling with gradient accumulation: the global batch "
                       f"{g:,.0f} is held by accumulating the same per-GPU micro-batch "
                       f"({b:,.0f}), one allreduce a step; forecasts stop at {g / b:,.0f} "
                       "GPUs, where one micro-batch a GPU is left (docs/forecast.md)")
    if not known.any():
        return Reading(False, g, np.ones_like(p), g / sample,
                       f"weak scaling with gradient accumulation: the global batch "
                       f"{g:,.0f} is fixed but no per-GPU batch is given, and published "
                       "tables that print a fixed global batch hold it by accumulation "
                       "(docs/forecast.md); forecasts stop where a GPU would get under one "
                       "sample")
    # the per-GPU batch changes, but not as the global batch over the GPUs: its work per
    # step is still the global batch over the GPUs
    return Reading(True, g, g / p, g / sample,
                   f"strong scaling: the global batch {g:,.0f} held while the per-GPU "
                   "batch changes; forecasts stop where a GPU would get under one sample")


def beyond(gpus: int, top: float, read: Reading, max_gpus: int | None,
           max_factor: float = MAX_FACTOR) -> tuple[str, bool]:
    """(why `gpus` is beyond what the forecast supports, whether that is a hard limit a
    flag cannot lift); ("", False) within."""
    if read.max_gpus is not None and gpus > read.max_gpus * (1 + 1e-9):
        unit = "micro-batch" if not read.strong and read.why and "micro" in read.why \
            else "sample"
        return (f"{gpus:,} GPUs: the global batch {read.global_batch:,.0f} leaves under one "
                f"{unit} a GPU beyond {math.floor(read.max_gpus):,} GPUs", True)
    if max_gpus is not None and gpus > max_gpus:
        return (f"{gpus:,} GPUs: beyond the system's max_nodes ({max_gpus:,} GPUs)", False)
    if gpus > top * max_factor * (1 + 1e-9):
        return (f"{gpus:,} GPUs: {gpus / top:,.3g}× the largest measured scale ({top:,.0f} "
                f"GPUs), beyond the {max_factor:g}× the backtest supports", False)
    return "", False


def verdict(gpus: int, top: float, why: str) -> str:
    """The `extrapolation_verdict` of a forecast scale, in words."""
    if why:
        return f"beyond what is supported ({why}): a rough guide"
    if gpus <= top:
        return "within the measured scales"
    return f"within the {MAX_FACTOR:g}× the backtest supports"


def fit_problems(p: np.ndarray, throughput: np.ndarray, rms_residual: float,
                 holdout_miss: float | None) -> list[str]:
    """Why a fit may not forecast, with its figures ([] when it passes): throughput that
    falls with scale, a large residual, a large hold-out miss."""
    out = []
    scales = np.unique(p)
    medians = [float(np.median(throughput[p == s])) for s in scales]
    best = max(medians[:-1])
    if medians[-1] < best * (1 - FALL_TOLERANCE):
        at = int(scales[int(np.argmax(medians[:-1]))])
        out.append(f"the throughput falls with scale ({medians[-1]:,.4g} at "
                   f"{int(scales[-1]):,} GPUs, {best:,.4g} at {at:,})")
    if rms_residual > MAX_RESIDUAL:
        out.append(f"the model misses its own points by {rms_residual:.0%} RMS (at most "
                   f"{MAX_RESIDUAL:.0%})")
    if holdout_miss is not None and abs(holdout_miss) > MAX_HOLDOUT_MISS:
        out.append(f"refitted without the largest scale it missed that scale by "
                   f"{abs(holdout_miss):.0%} (at most {MAX_HOLDOUT_MISS:.0%})")
    return out
