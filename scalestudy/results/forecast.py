"""Forecasts: the total throughput at scales not measured, each with its interval, the
model it came from and the points it was fitted on.

The points are one weak-scaling series (the same per-GPU batch at every scale): a study's
group, a stored study, or a table of measured points (forecast_table). The model is
commmodel's step time t(P) = a·b + c·2(P−1)/P + α·L(P), with the latency term L either
log2 P (tree-like) or P − 1 (a cost that keeps growing with scale: stragglers, jitter,
a ring's latency), chosen by evidence: each candidate is refitted without the largest
measured scale and asked for it, and the one closer to the measurement wins (said in
`model.chosen_by`). With three scales only compute + bandwidth can be fitted.

The interval comes from the fit's own uncertainty and the extrapolation: the relative
residuals of the fit (scaled by sqrt(n / (n − k)) for the k terms fitted) are resampled
(a residual bootstrap, BOOTSTRAP draws, seeded: the same input gives the same interval),
each draw refitted and asked; the percentiles of the draws at `level` give the band. It
then widens, for every doubling beyond the largest measured scale, by the hold-out's own
miss one doubling out plus SPREAD_PER_DOUBLING (a forecast 8× out is less sure than one
2× out, whatever the fit says). The central value is the model's lowered by
LEAN_PER_DOUBLING per doubling: the backtest on published results
(benchmarks/forecast_backtest.py, tests/data/forecast) shows the model optimistic by
about that much, and SPREAD_PER_DOUBLING is chosen there too (90 % intervals holding 90 %
of the published figures in sample, 80 % when each series is scored with the constants
the other series choose). On a known model with 1 % noise (tests/test_forecast.py)
the 90 % bands hold the truth in at least 80 % of seeded series at 4× and 16×.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from scalestudy.core.errors import ScalestudyError
from scalestudy.results.commmodel import Params, fit_points

#: Bootstrap draws behind each interval.
BOOTSTRAP = 400
#: Relative half-width added to an interval per doubling beyond the largest measured
#: scale (the extrapolation's own uncertainty, beyond the fit's).
SPREAD_PER_DOUBLING = 0.05
#: The model's lean on the backtest (optimistic, growing with the distance): forecasts
#: beyond the largest measured scale are lowered by this much per doubling.
LEAN_PER_DOUBLING = 0.02
#: Latency terms the model may use, in the order a tie is decided.
CANDIDATES: tuple[str, ...] = ("log", "ring")
#: What each latency term means, in words.
TERM_WORDS = {"log": "alpha·log2 P (tree-like latency)",
              "ring": "alpha·(P−1) (a cost growing with every rank: stragglers, jitter)"}


@dataclass(frozen=True)
class Prediction:
    """One asked scale: total throughput with its interval, and what it is made of."""

    gpus: int
    nodes: int | None
    throughput: float
    low: float
    high: float
    level: float
    unit: str
    efficiency: float  # per-GPU throughput against the smallest measured scale's
    step_s: float  # modelled seconds per step (per-GPU batch units over throughput)
    compute_s: float
    comm_s: float
    extrapolation: float  # asked GPUs / the largest measured
    model_throughput: float  # the fitted model's own value, before the backtest's lean

    def as_dict(self) -> dict[str, Any]:
        """The prediction as `predict --json` prints it."""
        return {"gpus": self.gpus, "nodes": self.nodes, "throughput": self.throughput,
                "low": self.low, "high": self.high, "level": self.level, "unit": self.unit,
                "efficiency": self.efficiency, "step_s": self.step_s,
                "compute_s": self.compute_s, "comm_s": self.comm_s,
                "extrapolation": self.extrapolation,
                "model_throughput": self.model_throughput}


@dataclass(frozen=True)
class Forecast:
    """The predictions, the model that made them and the points it was fitted on."""

    predictions: list[Prediction]
    model: dict[str, Any]
    fitted_on: list[dict[str, Any]] = field(default_factory=list)


def forecast(points: pd.DataFrame, gpus: list[int], *, level: float = 0.9,
             gpus_per_node: int | None = None, unit: str = "samples/s",
             seed: int = 0) -> Forecast:
    """Forecast the total throughput at `gpus` from measured `points` (columns gpus,
    throughput: the total over all GPUs; per_gpu_batch where known; several rows of one
    scale are its repeats)."""
    if not 0 < level < 1:
        raise ScalestudyError(f"--level {level}: give a fraction between 0 and 1, e.g. 0.9")
    p, t, batch = _inputs(points)
    if len(np.unique(p)) < 3:
        raise ScalestudyError(
            f"{len(np.unique(p))} scale(s) measured: a forecast needs at least 3 (the "
            "model has a compute and a communication term, and one scale more to check "
            "them)")
    chosen, why, cv = _choose(p, batch, t)
    params, terms = fit_points(p, batch, t, None, latency=chosen)
    if params is None:
        raise ScalestudyError(f"no model fits these points: {terms}")
    fitted = params.step_time(p, batch)
    residuals = (t - fitted) / fitted
    # a fit of k terms leaves residuals smaller than the noise: scale them back
    # (sqrt(n / (n - k)), the usual residual-bootstrap correction)
    k = len(terms.split("+"))
    inflated = residuals * math.sqrt(len(p) / max(len(p) - k, 1))
    draws = _bootstrap(p, batch, fitted, inflated, chosen, gpus, seed)
    top, smallest = float(p.max()), float(p.min())
    held_out = abs(cv[chosen]) if chosen in cv and math.isfinite(cv[chosen]) else 0.0
    b0 = float(np.median(batch))
    base_per_gpu = float(np.median(b0 / t[p == smallest]))
    out = []
    for i, size in enumerate(gpus):
        step = float(params.step_time(np.array([size]), np.array([b0]))[0])
        comm = float(params.comm_time(np.array([size]))[0])
        doublings = max(0.0, math.log2(size / top))
        # the backtest's lean: the model is optimistic by about this much per doubling
        raw = size * b0 / step
        total = raw / (1 + LEAN_PER_DOUBLING * doublings)
        lo_q, hi_q = np.quantile(draws[:, i], [(1 - level) / 2, (1 + level) / 2])
        lo_q, hi_q = (q / (1 + LEAN_PER_DOUBLING * doublings) for q in (lo_q, hi_q))
        # the hold-out's own miss, one doubling out, grows with each doubling further
        widen = (SPREAD_PER_DOUBLING + held_out) * doublings
        low = min(float(lo_q), total) / (1 + widen)
        high = max(float(hi_q), total) * (1 + widen)
        out.append(Prediction(
            gpus=int(size), nodes=(size // gpus_per_node if gpus_per_node and
                                   size % gpus_per_node == 0 else None),
            throughput=total, low=low, high=high, level=level, unit=unit,
            efficiency=(total / size) / base_per_gpu, step_s=step,
            compute_s=step - comm, comm_s=comm, extrapolation=size / top,
            model_throughput=raw))
    model = {"form": "t(P) = a·b + c·2(P−1)/P + " + TERM_WORDS[chosen], "terms": terms,
             "latency": chosen, "chosen_by": why, "holdout_errors": cv,
             "a_s_per_unit": params.a, "c_s": params.c, "alpha_s": params.alpha,
             "rms_residual": float(np.sqrt(np.mean(residuals ** 2))),
             "interval": f"residual bootstrap ({BOOTSTRAP} draws) at level {level:g}, "
                         f"widened by the hold-out's miss plus {SPREAD_PER_DOUBLING:.0%} "
                         f"per doubling beyond the largest measured scale ({int(top)} GPUs)",
             "lean": f"the central value is the model's lowered by "
                     f"{LEAN_PER_DOUBLING:.0%} per doubling beyond {int(top)} GPUs: the model "
                     "is optimistic by that much on the backtest (benchmarks/"
                     "forecast_backtest.py)"}
    fitted_on = [{"gpus": int(g), "throughput": float(g * b / s), "per_gpu_batch": float(b)}
                 for g, b, s in zip(p, batch, t, strict=True)]
    return Forecast(out, model, fitted_on)


def _inputs(points: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(GPUs, seconds per step, per-GPU batch) of each row; the batch is 1 where it is not
    known (weak scaling: a constant, so only a's unit changes)."""
    p = pd.to_numeric(points["gpus"], errors="coerce").to_numpy(float)
    thr = pd.to_numeric(points["throughput"], errors="coerce").to_numpy(float)
    batch = (pd.to_numeric(points["per_gpu_batch"], errors="coerce").to_numpy(float)
             if "per_gpu_batch" in points else np.full_like(p, np.nan))
    batch = np.where(np.isfinite(batch) & (batch > 0), batch, 1.0)
    if len(set(batch.tolist())) > 1:
        raise ScalestudyError("the per-GPU batch changes across the points: a weak-scaling "
                              "forecast needs one per-GPU batch (give one series)")
    return p, p * batch / thr, batch


def _choose(p: np.ndarray, batch: np.ndarray, t: np.ndarray
            ) -> tuple[str, str, dict[str, float]]:
    """The latency term that predicts the largest measured scale best when refitted
    without it; (term, why, hold-out error of each candidate)."""
    top = p == p.max()
    errors: dict[str, float] = {}
    for term in CANDIDATES:
        params, _ = fit_points(p[~top], batch[~top], t[~top], None, latency=term)
        if params is None:
            continue
        guess = params.step_time(p[top], batch[top])
        errors[term] = float(np.median(t[top] / guess - 1))  # throughput: measured/pred
    if len(np.unique(p[~top])) < 3 or not errors:
        return "log", ("too few scales to choose by a hold-out (the largest left out "
                       "leaves fewer than 3): the log2 P term, which grows least"), errors
    if len(set(errors.values())) == 1:  # no latency term fitted without the largest
        [error] = set(errors.values())
        return "log", (f"refitted without the largest scale ({int(p.max())} GPUs), every "
                       f"candidate predicted it alike, within {abs(error):.1%} (too few "
                       "scales left for a latency term): the log2 P term, which grows "
                       "least"), errors
    best = min(CANDIDATES, key=lambda k: abs(errors.get(k, math.inf)))
    return best, (f"refitted without the largest scale ({int(p.max())} GPUs), it predicted "
                  f"that scale within {abs(errors[best]):.1%}, the other within "
                  + ", ".join(f"{abs(v):.1%}" for k, v in errors.items() if k != best)), errors


def _bootstrap(p: np.ndarray, batch: np.ndarray, fitted: np.ndarray, residuals: np.ndarray,
               latency: str, gpus: list[int], seed: int) -> np.ndarray:
    """Throughput at `gpus` for each residual-bootstrap draw (rows: draws)."""
    rng = np.random.default_rng(seed)
    b0 = float(np.median(batch))
    asked = np.asarray(gpus, float)
    out = np.empty((BOOTSTRAP, len(gpus)))
    kept = 0
    for _ in range(BOOTSTRAP * 2):
        if kept == BOOTSTRAP:
            break
        t_star = fitted * (1 + rng.choice(residuals, size=len(residuals), replace=True))
        params, _ = fit_points(p, batch, t_star, None, latency=latency)
        if params is None or not _sane(params):
            continue
        out[kept] = asked * b0 / params.step_time(asked, np.full_like(asked, b0))
        kept += 1
    return out[:kept] if kept else np.full((1, len(gpus)), np.nan)


def _sane(params: Params) -> bool:
    return params.a > 0 or params.c > 0 or params.alpha > 0
