"""Forecasts of the samples (or epochs) to a target at global batches not measured, each
with its interval, the law it came from and the runs it was fitted on.

The default law bends a power law: ln S(B) = ln S(B0) + s·x + (g/2)·x², x = ln(B / B0),
B0 the largest measured batch. Its log-log slope s (0: perfect scaling, steps ∝ 1/B; 1:
steps flat, maximal data parallelism) grows by g per e-fold of the batch, the way
Shallue et al. (2018) measured steps against batch size: diminishing returns that set in
gradually. g = DEFAULT_BEND is shared by every series, learned across MLPerf's reference
convergence points; each series' own runs give its level and slope: the level is the
centre of the largest batch's runs, the slope a least-squares line through the log of
every batch's centre (less the shared bend), each batch weighing the same. A batch's
centre is the mean of its runs (seeds), without the fastest and the slowest where there
are OLYMPIC_RUNS or more (MLPerf's RCP checker's olympic mean).

With HOLDOUT_BATCHES distinct batches or more, the bent law, McCandlish et al.'s
S_min (1 + B / B_crit) (2018) and a straight power law are each refitted without the
largest batch and asked for it, and the closest wins. With fewer, one held-out batch
leaves two to fit and the choice follows the noise, so the bent law is used. On the RCP
backtest (benchmarks/target_backtest.py: fitted on the 3 smallest batches of every
series, scored up to 4× the largest fitted) it puts the most points within 10 % of the
laws tried (docs/evidence-training.md), also when each benchmark is scored with the g the other
benchmarks choose (docs/forecast.md).

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

#: How fast the log-log slope grows per e-fold of the batch (the RCP backtest's choice).
DEFAULT_BEND = 0.0125
#: Distinct batches a per-series hold-out needs (4 left to fit once the largest is out).
HOLDOUT_BATCHES = 5
#: Relative (log) spread of a forecast per doubling beyond the largest measured batch.
SPREAD_PER_DOUBLING = 0.13
#: The least noise assumed at a measured batch (relative).
NOISE_FLOOR = 0.02
#: Runs of one batch from which its centre leaves out the fastest and the slowest.
OLYMPIC_RUNS = 5
#: The knee's batch is searched over this many e-folds below and above the measured ones.
_BELOW, _ABOVE, _GRID = 6.0, 10.0, 1601


@dataclass(frozen=True)
class Law:
    """A fitted law of the samples to the target against the global batch: a knee (a
    curvature) or a bent power law (a bend; 0: straight)."""

    name: str  # "bend g=0.025", "knee a=1", "power"
    curvature: float | None  # a of the knee; None for a bent or straight power law
    log_s0: float  # log S_min (knee) or log S at B0 (bend)
    log_knee: float  # log B_crit (knee) or log B0, the batch the bend is stated at
    slope: float = 0.0  # the log-log slope at B0 (bend)
    bend: float = 0.0  # the slope's growth per e-fold of the batch (bend)

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        """The law's samples (or epochs) to the target at these global batches."""
        lb = np.log(np.asarray(batch, float))
        if self.curvature is None:
            x = lb - self.log_knee
            return np.exp(self.log_s0 + self.slope * x + self.bend * x * x / 2)
        a = self.curvature
        return np.exp(self.log_s0 + np.logaddexp(0.0, a * (lb - self.log_knee)) / a)

    def mccandlish(self) -> tuple[float, float] | None:
        """(S_min, B_crit) of McCandlish's S_min (1 + B/B_crit): the knee's own at a = 1,
        else the one with this law's slope at B0 (None where that slope is not in (0, 1))."""
        if self.curvature is not None:
            return math.exp(self.log_s0), math.exp(self.log_knee)
        if not 0 < self.slope < 1:
            return None
        return (math.exp(self.log_s0) * (1 - self.slope),
                math.exp(self.log_knee) * (1 - self.slope) / self.slope)

    def words(self) -> str:
        """The law in words, with its fitted values."""
        if self.curvature is None:
            b0 = math.exp(self.log_knee)
            said = (f"ln S(B) = ln S(B0) + s·ln(B/B0) + (g/2)·ln²(B/B0), B0 = {b0:.4g}, "
                    f"S(B0) = {math.exp(self.log_s0):.4g}, s = {self.slope:.3f}, "
                    f"g = {self.bend:g}")
            local = self.mccandlish()
            return said + (f" (at B0 as McCandlish et al.'s S_min (1 + B/B_crit) with "
                           f"S_min = {local[0]:.4g}, B_crit = {local[1]:.4g})"
                           if local else "")
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


def fit_bend(batch: np.ndarray, value: np.ndarray, bend: float) -> Law:
    """The bent power law of this bend through per-batch centres at sorted distinct
    batches: its level the largest batch's centre, its slope there a least-squares line
    through the log of every centre less the bend (g = 0: a straight power law)."""
    lb, ls = np.log(np.asarray(batch, float)), np.log(np.asarray(value, float))
    x = lb - lb[-1]
    slope = float(np.polyfit(x, ls - bend * x * x / 2, 1)[0])
    name = f"bend g={bend:g}" if bend else "power"
    return Law(name, None, float(ls[-1]), float(lb[-1]), slope, bend)


def _fit(name: str, batch: np.ndarray, value: np.ndarray) -> Law:
    kind, _, shape = name.partition("=")
    if name == "power":
        return fit_bend(batch, value, 0.0)
    if kind == "bend g":
        return fit_bend(batch, value, float(shape))
    if kind == "knee a":
        return fit_knee(batch, value, float(shape))
    raise ValueError(f"no law {name!r}: give 'bend g=G', 'knee a=A' or 'power'")


def candidates(law: str | None = None) -> tuple[str, ...]:
    """The candidate laws' names, the default (or `law`) first: it wins a tie."""
    default = law or f"bend g={DEFAULT_BEND:g}"
    return tuple(dict.fromkeys((default, f"bend g={DEFAULT_BEND:g}", "knee a=1", "power")))


def choose(batches: np.ndarray, means: np.ndarray, law: str | None = None
           ) -> tuple[str, str, dict[str, float]]:
    """(the chosen law's name, why, each candidate's hold-out miss) for per-batch centres
    at sorted distinct batches; `law` replaces the default bent law."""
    names = candidates(law)
    if len(batches) < HOLDOUT_BATCHES:
        return names[0], (f"{len(batches)} global batches allow no hold-out (it needs "
                          f"{HOLDOUT_BATCHES}): the law the RCP backtest chose "
                          "(benchmarks/target_backtest.py)"), {}
    misses = {}
    for name in names:
        fitted = _fit(name, batches[:-1], means[:-1])
        misses[name] = float(fitted(batches[-1:])[0] / means[-1] - 1)
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
                       law: str | None = None,
                       spread: float = SPREAD_PER_DOUBLING,
                       beyond: bool = False) -> TargetForecast:
    """Forecast the samples (or epochs) to the target at the `asked` global batches from
    runs (`batch`, `value`: one per run; seeds repeat a batch). Refuses fewer than 3
    distinct batches, a batch <= 0 and one past MAX_FACTOR × the largest measured.
    `law` ("bend g=G", "knee a=A", "power") and `spread` replace the default law and
    SPREAD_PER_DOUBLING (the backtest's baseline and leave-one-out); `beyond` forecasts
    past MAX_FACTOR, flagged."""
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
    chosen, why, misses = choose(ub, means, law)
    fitted = _fit(chosen, ub, means)
    s, source = noise(b, v, fitted)
    z = NormalDist().inv_cdf((1 + level) / 2)
    out = []
    for x in asked:
        d = max(0.0, math.log2(x / top))
        half = z * math.sqrt(s ** 2 + (spread * d) ** 2)
        mid = float(fitted(np.array([x]))[0])
        out.append(TargetPrediction(float(x), mid, mid * math.exp(-half),
                                    mid * math.exp(half), level, unit, x / top,
                                    f"{x / top:.3g}× the largest measured batch, past the "
                                    f"{MAX_FACTOR:g}× the backtest supports"
                                    if x in past else ""))
    local = fitted.mccandlish()
    model: TargetModel = {"law": fitted.words(), "name": fitted.name, "chosen_by": why,
             "holdout_misses": misses,
             "s_min": local[0] if local else None, "b_crit": local[1] if local else None,
             "interval": (f"log-normal at level {level:g}: the noise at the measured batches "
                          f"({s:.1%}, {source}) and {spread:.0%} per doubling "
                          f"beyond the largest measured batch ({top:,.0f})"),
             "max_factor": MAX_FACTOR, "unit": unit}
    fitted_on: list[TargetFittedPoint] = [
        {"global_batch": float(x), "centre": float(m), "runs": int((b == x).sum())}
        for x, m in zip(ub, means, strict=True)]
    return TargetForecast(out, model, fitted_on)
