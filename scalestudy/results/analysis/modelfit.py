"""The step-time model's terms and their fit: Params (seconds per unit of work, per ring
byte, of latency), the design of a fit at measured points, and non-negative least
squares on the relative residuals (commmodel says what the model explains; refits
solves many fits of one design at once).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from scalestudy.core.choices import Bandwidth, Latency

LATENCY_TERMS: tuple[str, ...] = tuple(c.value for c in Latency)
BANDWIDTHS: tuple[str, ...] = tuple(c.value for c in Bandwidth)


@dataclass(frozen=True)
class Params:
    """Fitted parameters: seconds per unit (image or token) per GPU, seconds per ring
    byte, latency."""

    a: float
    c: float
    alpha: float
    latency: str
    grad_bytes: float  # 1.0 when unknown (c is then in seconds)
    #: the extra seconds per ring byte once the ring leaves a node (a slower network
    #: between nodes than within one), and the GPUs per node that says where; 0: none
    c_inter: float = 0.0
    gpus_per_node: float = 0

    def step_time(self, world_size: np.ndarray, batch: np.ndarray) -> np.ndarray:
        """Modelled seconds per step at these world sizes and per-GPU batches."""
        return self.a * np.asarray(batch, float) + self.comm_time(world_size)

    def comm_time(self, world_size: np.ndarray) -> np.ndarray:
        """Modelled seconds of communication per step."""
        p = np.asarray(world_size, float)
        return ((self.c * ring(p) + self.c_inter * _internode(p, self.gpus_per_node))
                * self.grad_bytes + self.alpha * _latency(p, self.latency))


def ring(p: np.ndarray) -> np.ndarray:
    """The ring allreduce's factor 2(P−1)/P."""
    return 2 * (p - 1) / p


def _internode(p: np.ndarray, gpus_per_node: float) -> np.ndarray:
    """The ring factor where the ring crosses nodes (more GPUs than one node has)."""
    return ring(p) * (p > gpus_per_node) if gpus_per_node > 0 else np.zeros_like(p)


def _latency(p: np.ndarray, kind: str) -> np.ndarray:
    return np.log2(p) if kind == "log" else p - 1


def nnls(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares for a few columns: the best unconstrained solution
    over every subset of columns whose coefficients are all >= 0 (exact for small n)."""
    n = a.shape[1]
    scale = np.linalg.norm(a, axis=0)
    scale[scale == 0] = 1.0
    scaled = a / scale
    full, *_ = np.linalg.lstsq(scaled, y, rcond=None)
    if np.all(full > 0):  # the unconstrained optimum is feasible: no subset does better
        return full / scale
    best, best_err = np.zeros(n), float(np.sum(y ** 2))
    for k in range(1, n + 1):
        for cols in itertools.combinations(range(n), k):
            sub = scaled[:, cols]
            coef, *_ = np.linalg.lstsq(sub, y, rcond=None)
            if np.any(coef < 0):
                continue
            err = float(np.sum((sub @ coef - y) ** 2))
            if err < best_err - 1e-15 * max(best_err, 1.0):
                best, best_err = np.zeros(n), err
                best[list(cols)] = coef
    return best / scale


def _terms_for(points: int, bandwidth: str) -> tuple[str, ...] | str:
    """Terms to fit with this many distinct world sizes (always fewer terms than
    points), or why no fit is possible."""
    terms = ("compute", "bandwidth", "latency") if bandwidth == "fit" else ("compute",
                                                                           "latency")
    least = len(terms)  # the latency term may go; the rest is the model
    if points < least:
        return (f"too few points: {points} world size(s) measured, a fit needs at least "
                f"{least}" + (" (2 with the bandwidth from the probe)" if least == 3 else ""))
    return terms if points > len(terms) else terms[:-1]


@dataclass(frozen=True)
class Design:
    """A fit's columns at the points (one per term), the step time already known (the
    probe's bandwidth term), and what makes Params of coefficients."""

    columns: np.ndarray  # points x terms
    known: np.ndarray
    terms: tuple[str, ...]
    c_fixed: float
    latency: str
    grad_bytes: float
    gpus_per_node: float

    def step_times(self, coef: np.ndarray, world_size: np.ndarray, batch: np.ndarray
                   ) -> np.ndarray:
        """Modelled step times at other points for many solutions at once (`coef`: one
        row per solution); rows: solutions."""
        p = np.asarray(world_size, float)
        at = design(p, batch, self.grad_bytes, self.latency, terms=self.terms,
                    gpus_per_node=self.gpus_per_node, check=False)
        assert not isinstance(at, str)
        return coef @ at.columns.T + self.c_fixed * ring(p) * self.grad_bytes

    def params(self, coef: Sequence[float] | np.ndarray) -> Params:
        """The Params of one solution (a coefficient per term, in order)."""
        got = dict(zip(self.terms, coef, strict=True))
        return Params(a=float(got.get("compute", 0.0)),
                      c=float(got.get("bandwidth", self.c_fixed)),
                      alpha=float(got.get("latency", 0.0)), latency=self.latency,
                      grad_bytes=self.grad_bytes, c_inter=float(got.get("internode", 0.0)),
                      gpus_per_node=self.gpus_per_node)


def design(world_size: np.ndarray, batch: np.ndarray, grad_bytes: float | None,
           latency: str = "log", bandwidth: str = "fit",
           probe_busbw_gbps: float | None = None, terms: tuple[str, ...] | None = None,
           gpus_per_node: float = 0, check: bool = True) -> Design | str:
    """The model's design at these points (fit_points' arguments but the step times),
    or why no fit is possible (`check`: whether the points can fit the terms; False
    for the columns at points asked about)."""
    if latency not in LATENCY_TERMS or bandwidth not in BANDWIDTHS:
        raise ValueError(f"latency must be one of {LATENCY_TERMS}, bandwidth one of "
                         f"{BANDWIDTHS}")
    p = np.asarray(world_size, float)
    s = float(grad_bytes) if grad_bytes and math.isfinite(grad_bytes) else 1.0
    if bandwidth == "probe" and not (probe_busbw_gbps and s > 1.0):
        return "no allreduce probe or gradient size in the runs: use bandwidth fit"
    if terms is None:
        allowed = _terms_for(len(np.unique(p)), bandwidth)
        if isinstance(allowed, str):
            return allowed
        terms = allowed
    elif check and len(terms) >= len(np.unique(p)):
        return f"{len(terms)} terms need more than {len(np.unique(p))} world size(s)"
    known = np.zeros_like(p)
    c_fixed = 0.0
    if bandwidth == "probe" and probe_busbw_gbps:  # checked above: a probe was measured
        c_fixed = 1.0 / (float(probe_busbw_gbps) * 1e9)
        known = c_fixed * ring(p) * s
    columns = {"compute": np.asarray(batch, float), "bandwidth": ring(p) * s,
               "latency": _latency(p, latency), "internode": _internode(p, gpus_per_node) * s}
    return Design(np.column_stack([columns[t] for t in terms]), known, tuple(terms),
                  c_fixed, latency, s, gpus_per_node)


def fit_points(world_size: np.ndarray, batch: np.ndarray, step_time: np.ndarray,
               grad_bytes: float | None, latency: str = "log", bandwidth: str = "fit",
               probe_busbw_gbps: float | None = None,
               terms: tuple[str, ...] | None = None,
               gpus_per_node: float = 0) -> tuple[Params | None, str]:
    """Fit the model to measured (P, per-GPU batch, step time); (params, terms) or
    (None, why not). `terms` names the terms to fit instead of the most the points
    allow (fewer than the distinct world sizes); "internode" among them fits a second
    bandwidth for rings that leave a node of `gpus_per_node` GPUs. The fit minimises
    the relative residuals, every coefficient at least 0."""
    d = design(world_size, batch, grad_bytes, latency, bandwidth, probe_busbw_gbps, terms,
               gpus_per_node)
    if isinstance(d, str):
        return None, d
    y = np.asarray(step_time, float)
    return d.params(nnls(d.columns / y[:, None], (y - d.known) / y)), "+".join(d.terms)
