"""Forecasts of the samples (or epochs) to a target at global batches not measured, each
with its interval, the law it came from and the runs it was fitted on.

The law: S(B) = S_min · (1 + (B / B_knee)^a)^(1/a). At a = 1 it is McCandlish et al.'s
S_min (1 + B / B_crit) (2018); a smaller a bends more smoothly, from the flat S_min of
perfect scaling (steps ∝ 1/B) towards S ∝ B (maximal data parallelism, steps flat), the
shape Shallue et al. (2018) measured. S_min and B_knee are fitted by least squares on the
log of each batch's centre over its runs (seeds), every batch weighing the same; the centre
is the mean, without the fastest and the slowest run where there are OLYMPIC_RUNS or more
(MLPerf's RCP checker's olympic mean: one diverged seed does not move it).

Which a: chosen by hold-out. With HOLDOUT_BATCHES distinct batches or more, each candidate
(CURVATURES, and a straight power law in log-log) is refitted without the largest batch and
asked for it, and the closest wins. With fewer, one batch held out leaves two to fit two
parameters and the choice follows the noise (on the RCP backtest it picks worse than a
fixed a), so the curvature the backtest's own hold-out chose is used: fitted on the 3
smallest batch sizes of every MLPerf RCP series and scored on the larger ones
(benchmarks/target_backtest.py), DEFAULT_CURVATURE misses least (docs/forecast.md).

The interval, at `level`, is symmetric in log space: z · sqrt(s² + (K · d)²), with s the
noise at the measured batches (the standard error of each batch's mean over its seeds, or
the fit's residual scaled by sqrt(n / (n − 2)), at least NOISE_FLOOR), d the doublings
beyond the largest measured batch (0 within) and K = SPREAD_PER_DOUBLING, chosen on the
backtest so that 90 % intervals hold about 90 % of the RCP points (and checked with each
benchmark scored by the K the others choose). A batch beyond MAX_FACTOR times the largest
measured is refused, or with `beyond` forecast and flagged as a rough guide.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

from scalestudy.core.errors import ScalestudyError
from scalestudy.results.analysis.forecast_limits import MAX_FACTOR
from scalestudy.results.analysis.forecast_records import TargetFittedPoint, TargetModel

#: The knee's curvature where too few batches allow a hold-out (the RCP backtest's choice).
DEFAULT_CURVATURE = 0.5
#: The candidate curvatures a hold-out chooses among (1: McCandlish's form).
CURVATURES: tuple[float, ...] = (0.5, 1.0)
#: Distinct batches a per-series hold-out needs (4 left to fit once the largest is out).
HOLDOUT_BATCHES = 5
#: Relative (log) spread of a forecast per doubling beyond the largest measured batch.
SPREAD_PER_DOUBLING = 0.11
#: The least noise assumed at a measured batch (relative).
NOISE_FLOOR = 0.02
#: Runs of one batch from which its centre leaves out the fastest and the slowest.
OLYMPIC_RUNS = 5
#: The knee's batch is searched over this many e-folds below and above the measured ones.
_BELOW, _ABOVE, _GRID = 6.0, 10.0, 1601


@dataclass(frozen=True)
class Law:
    """A fitted law of the samples to the target against the global batch."""

    name: str  # "knee a=0.5", "power"
    curvature: float | None  # a of the knee; None for the power law
    log_s0: float  # log S_min (knee) or the intercept (power)
    log_knee: float  # log B_knee (knee) or the slope (power)

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        """The law's samples (or epochs) to the target at these global batches."""
        lb = np.log(np.asarray(batch, float))
        if self.curvature is None:
            return np.exp(self.log_s0 + self.log_knee * lb)
        a = self.curvature
        return np.exp(self.log_s0 + np.logaddexp(0.0, a * (lb - self.log_knee)) / a)

    def words(self) -> str:
        """The law in words, with its fitted values."""
        if self.curvature is None:
            return f"S(B) = {math.exp(self.log_s0):.4g} · B^{self.log_knee:.3f} (power law)"
        form = ("S_min (1 + B/B_crit) (McCandlish et al. 2018)" if self.curvature == 1 else
                f"S_min (1 + (B/B_crit)^{self.curvature:g})^(1/{self.curvature:g})")
        return (f"S(B) = {form}, S_min = {math.exp(self.log_s0):.4g}, "
                f"B_crit = {math.exp(self.log_knee):.4g}")


@dataclass(frozen=True)
class TargetPrediction:
    """One asked global batch: the samples (or epochs) to the target, with the interval."""

    global_batch: float
    value: float
    low: float
    high: float
    level: float
    unit: str
    extrapolation: float  # asked batch / the largest measured
    limit: str = ""  # why this batch is beyond what the backtest supports ("" within)

    def as_dict(self) -> dict[str, object]:
        """The prediction as `predict --to-target --json` prints it."""
        whole = self.global_batch.is_integer()
        return {"global_batch": int(self.global_batch) if whole else self.global_batch,
                "value": self.value, "low": self.low,
                "high": self.high, "level": self.level, "unit": self.unit,
                "extrapolation": self.extrapolation,
                **({"beyond": f"a rough guide: {self.limit}"} if self.limit else {})}


@dataclass(frozen=True)
class TargetForecast:
    """The predictions, the law that made them and the batches it was fitted on."""

    predictions: list[TargetPrediction]
    model: TargetModel
    fitted_on: list[TargetFittedPoint] = field(default_factory=list)


def centre(values: np.ndarray) -> float:
    """The centre of one batch's runs: the mean, the olympic mean from OLYMPIC_RUNS runs."""
    return float(np.mean(_kept(values)))


def _kept(values: np.ndarray) -> np.ndarray:
    """One batch's runs without the fastest and the slowest from OLYMPIC_RUNS runs on."""
    v = np.sort(np.asarray(values, float))
    return v[1:-1] if len(v) >= OLYMPIC_RUNS else v


def fit_knee(batch: np.ndarray, value: np.ndarray, curvature: float) -> Law:
    """The knee law of this curvature fitted (least squares in log) to per-batch means."""
    lb, ls = np.log(np.asarray(batch, float)), np.log(np.asarray(value, float))
    grid = np.linspace(lb.min() - _BELOW, lb.max() + _ABOVE, _GRID)
    shape = np.logaddexp(0.0, curvature * (lb[None, :] - grid[:, None])) / curvature
    offset = np.mean(ls[None, :] - shape, axis=1)
    cost = np.sum((ls[None, :] - shape - offset[:, None]) ** 2, axis=1)
    # the first of the best: among equal fits the smallest knee (the flattest S_min)
    best = int(np.flatnonzero(cost <= cost.min() * (1 + 1e-9) + 1e-15)[0])
    return Law(f"knee a={curvature:g}", curvature, float(offset[best]), float(grid[best]))


def fit_power(batch: np.ndarray, value: np.ndarray) -> Law:
    """A straight line in log-log (slope at least 0) fitted to per-batch means."""
    lb, ls = np.log(np.asarray(batch, float)), np.log(np.asarray(value, float))
    slope = max(float(np.polyfit(lb, ls, 1)[0]), 0.0)
    return Law("power", None, float(np.mean(ls - slope * lb)), slope)


def _fit(name: str, batch: np.ndarray, value: np.ndarray) -> Law:
    return fit_power(batch, value) if name == "power" else \
        fit_knee(batch, value, float(name.split("=")[1]))


def candidates() -> tuple[str, ...]:
    """The candidate laws' names, the default first (it wins a tie)."""
    rest = [f"knee a={a:g}" for a in CURVATURES if a != DEFAULT_CURVATURE]
    return (f"knee a={DEFAULT_CURVATURE:g}", *rest, "power")


def choose(batches: np.ndarray, means: np.ndarray, curvature: float | None = None
           ) -> tuple[str, str, dict[str, float]]:
    """(the chosen law's name, why, each candidate's hold-out miss) for per-batch means
    at sorted distinct batches; `curvature` replaces DEFAULT_CURVATURE."""
    default = f"knee a={curvature:g}" if curvature is not None else candidates()[0]
    if len(batches) < HOLDOUT_BATCHES:
        return default, (f"{len(batches)} global batches allow no hold-out (it needs "
                         f"{HOLDOUT_BATCHES}): the curvature the RCP backtest's hold-out "
                         "chose (benchmarks/target_backtest.py)"), {}
    misses = {}
    for name in dict.fromkeys((default, *candidates())):
        law = _fit(name, batches[:-1], means[:-1])
        misses[name] = float(law(batches[-1:])[0] / means[-1] - 1)
    best = min(misses, key=lambda k: abs(misses[k]))
    return best, (f"hold-out: refitted without the largest batch ({batches[-1]:,.0f}) "
                  f"and asked for it, {best} missed least ({misses[best]:+.1%})"), misses


def noise(batch: np.ndarray, value: np.ndarray, law: Law) -> tuple[float, str]:
    """(the relative noise at the measured batches, where it came from): the seeds'
    standard error of each batch's centre where batches repeat (the runs it keeps), the
    fit's residual scaled by sqrt(n / (n − 2)), at least NOISE_FLOOR."""
    ub = np.unique(batch)
    ses = [float(np.std(np.log(runs), ddof=1) / math.sqrt(len(runs)))
           for runs in (_kept(value[batch == b]) for b in ub) if len(runs) > 1]
    means = np.array([centre(value[batch == b]) for b in ub])
    resid = np.log(means / law(ub))
    rms = float(np.sqrt(np.sum(resid ** 2) / max(len(ub) - 2, 1)))
    seeds = float(np.median(ses)) if ses else 0.0
    s = max(seeds, rms, NOISE_FLOOR)
    why = ("the seeds' scatter" if s == seeds else "the fit's residual" if s == rms
           else "the floor")
    return s, why


def forecast_to_target(batch: np.ndarray, value: np.ndarray, asked: list[float], *,
                       level: float = 0.9, unit: str = "samples",
                       curvature: float | None = None,
                       spread: float = SPREAD_PER_DOUBLING,
                       beyond: bool = False) -> TargetForecast:
    """Forecast the samples (or epochs) to the target at the `asked` global batches from
    runs (`batch`, `value`: one per run; seeds repeat a batch). Refuses fewer than 3
    distinct batches, a batch <= 0 and one past MAX_FACTOR × the largest measured.
    `curvature` and `spread` replace DEFAULT_CURVATURE and SPREAD_PER_DOUBLING (the
    backtest's leave-one-out); `beyond` forecasts past MAX_FACTOR, flagged."""
    if not 0 < level < 1:
        raise ScalestudyError(f"--level {level}: give a fraction between 0 and 1, e.g. 0.9")
    b, v = np.asarray(batch, float), np.asarray(value, float)
    if len(b) != len(v) or not len(b) or np.any(~np.isfinite(b) | ~np.isfinite(v)) \
            or np.any(b <= 0) or np.any(v <= 0):
        raise ScalestudyError("the runs need a global batch and a value above 0 each")
    ub = np.unique(b)
    if len(ub) < 3:
        raise ScalestudyError(f"{len(ub)} distinct global batch(es): a forecast of the "
                              "samples to the target needs runs at 3 or more")
    if not asked or min(asked) <= 0:
        raise ScalestudyError("--batches: give global batches above 0, e.g. 1024,4096")
    top = float(ub.max())
    past = [x for x in asked if x > top * MAX_FACTOR * (1 + 1e-9)]
    if past and not beyond:
        raise ScalestudyError(
            f"--batches {','.join(f'{x:g}' for x in past)}: beyond {MAX_FACTOR:g}× the "
            f"largest measured global batch ({top:,.0f}), which is as far as the backtest "
            f"supports: ask at most {top * MAX_FACTOR:,.0f}, measure a larger batch, or "
            "add --beyond to see it flagged as a rough guide")
    means = np.array([centre(v[b == x]) for x in ub])
    chosen, why, misses = choose(ub, means, curvature)
    law = _fit(chosen, ub, means)
    s, source = noise(b, v, law)
    z = NormalDist().inv_cdf((1 + level) / 2)
    out = []
    for x in asked:
        d = max(0.0, math.log2(x / top))
        half = z * math.sqrt(s ** 2 + (spread * d) ** 2)
        mid = float(law(np.array([x]))[0])
        out.append(TargetPrediction(float(x), mid, mid * math.exp(-half),
                                    mid * math.exp(half), level, unit, x / top,
                                    f"{x / top:.3g}× the largest measured batch, past the "
                                    f"{MAX_FACTOR:g}× the backtest supports"
                                    if x in past else ""))
    model: TargetModel = {"law": law.words(), "name": law.name, "chosen_by": why,
             "holdout_misses": misses,
             "s_min": math.exp(law.log_s0) if law.curvature is not None else None,
             "b_crit": math.exp(law.log_knee) if law.curvature is not None else None,
             "interval": (f"log-normal at level {level:g}: the noise at the measured batches "
                          f"({s:.1%}, {source}) and {spread:.0%} per doubling "
                          f"beyond the largest measured batch ({top:,.0f})"),
             "max_factor": MAX_FACTOR, "unit": unit}
    fitted_on: list[TargetFittedPoint] = [
        {"global_batch": float(x), "centre": float(m), "runs": int((b == x).sum())}
        for x, m in zip(ub, means, strict=True)]
    return TargetForecast(out, model, fitted_on)
