"""An adaptive study's bands (pure; results.analysis.adaptive decides with them): the
noise pooled from the repeats, a measured point's band, and the bands of the points not
measured yet under each one-term communication model, from refits to an alternative's
medians moved by that noise (the rule's module docstring says how).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from scalestudy.results.analysis.forecast import SPREAD_PER_DOUBLING


class Point(Protocol):
    """What a projection needs of a point (results.analysis.adaptive.Point)."""

    @property
    def key(self) -> tuple[str, int]: ...
    @property
    def nodes(self) -> int: ...
    @property
    def replicas(self) -> int: ...
    @property
    def per_gpu_batch(self) -> float: ...
    @property
    def global_batch(self) -> float: ...

#: A measured point's band: median · exp(±Z·σ/√repeats) (about 95 %).
Z = 1.96
#: The repeats' relative spread assumed while no point has two repeats.
ASSUMED_NOISE = 0.02
#: The least relative spread used (a perfectly steady machine is not believed).
MIN_NOISE = 0.005
#: Refits behind each model's band.
DRAWS = 64
#: The one-term communication models an alternative is projected with: t(P) = a·b +
#: k·f(P), f one of these (commmodel's bandwidth and latency forms).
MODELS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "bandwidth": lambda p: 2 * (p - 1) / p,
    "log2 P latency": np.log2,
    "(P-1) latency": lambda p: p - 1,
}


@dataclass(frozen=True)
class Band:
    """A throughput with its band (about 95 %)."""

    low: float
    mid: float
    high: float
    per: str = "throughput"  # what it is of (adaptive_target: throughput, to the target)


def noise_of(measured: Mapping[tuple[str, int], Sequence[float]]) -> tuple[float, str]:
    """The repeats' relative spread, pooled over the points with two or more, and where
    it comes from."""
    sums, dof = 0.0, 0
    for values in measured.values():
        logs = np.log([v for v in values if v > 0])
        if len(logs) > 1:
            sums += float(np.sum((logs - logs.mean()) ** 2))
            dof += len(logs) - 1
    if dof == 0:
        return ASSUMED_NOISE, (f"assumed {ASSUMED_NOISE:.0%}: no measured point has two "
                               "repeats yet")
    sigma = math.sqrt(sums / dof)
    return max(sigma, MIN_NOISE), (f"{sigma:.1%}, the repeats' spread pooled over {dof} "
                                   f"degree(s) of freedom" + (
                                       f" (at least {MIN_NOISE:.1%} is used)"
                                       if sigma < MIN_NOISE else ""))


def measured_band(values: Sequence[float], sigma: float) -> Band:
    mid = float(np.median(values))
    half = Z * sigma / math.sqrt(len(values))
    return Band(mid * math.exp(-half), mid, mid * math.exp(half))


def projections(mine: Sequence[Point], measured: Mapping[tuple[str, int], Sequence[float]],
                 asked: Sequence[Point], sigma: float, seed: int
                 ) -> dict[str, dict[int, Band]]:
    """Per model: the asked points' throughput bands (by node count), from refits to the
    alternative's measured medians moved by the noise. Empty with fewer than two
    measured node counts (one says nothing of scaling)."""
    done = [p for p in mine if measured.get(p.key)]
    if len({p.replicas for p in done}) < 2 or not asked:
        return {}
    p = np.array([q.replicas for q in done], float)
    glob = np.array([q.global_batch for q in done], float)
    batch = np.array([q.per_gpu_batch for q in done], float)
    strong = len(set(glob.tolist())) == 1 and len(set(batch.tolist())) > 1
    work = glob / p if strong else batch  # each GPU's work per step
    med = np.array([float(np.median(measured[q.key])) for q in done])
    reps = np.array([len(measured[q.key]) for q in done], float)
    at_p = np.array([q.replicas for q in asked], float)
    at_w = (glob[0] / at_p) if strong else np.array([q.per_gpu_batch for q in asked], float)
    top = float(p.max())
    widen = 1 + SPREAD_PER_DOUBLING * np.maximum(0.0, np.log2(at_p / top))
    rng = np.random.default_rng(seed)
    shocks = rng.normal(0.0, 1.0, size=(DRAWS, len(med))) * sigma / np.sqrt(reps)
    out: dict[str, dict[int, Band]] = {}
    x = med * np.exp(np.vstack([np.zeros(len(med)), shocks]))  # row 0: the medians
    for name, form in MODELS.items():
        a, k = _one_term(work, form(p), p * work / x)
        arr = at_p * at_w / (np.outer(a, at_w) + np.outer(k, form(at_p)))
        lo, hi = np.quantile(arr[1:], [0.025, 0.975], axis=0)
        out[name] = {q.nodes: Band(float(lo[i]) / widen[i], float(arr[0][i]),
                                    float(hi[i]) * widen[i])
                     for i, q in enumerate(asked)}
    return out


def _one_term(w: np.ndarray, f: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least squares t = a·w + k·f, both at least 0, for each row of `t` (a draw);
    (a, k) per row. A negative k (faster than linear) is held at 0."""
    sww, sff, swf = float(w @ w), float(f @ f), float(w @ f)
    stw, stf = t @ w, t @ f
    det = sww * sff - swf * swf
    a = (stw * sff - stf * swf) / det
    k = (stf * sww - stw * swf) / det
    flat = k < 0
    a = np.where(flat, stw / sww, a)
    return np.maximum(a, 0.0), np.maximum(np.where(flat, 0.0, k), 0.0)
