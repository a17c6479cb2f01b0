"""Forecasts: the total throughput at scales not measured, each with its interval, the
model it came from and the points it was fitted on.

The points are one series: weak scaling (one per-GPU batch), or strong scaling (one
global batch, each GPU's work per step the global batch over its GPUs, gradient
accumulation included): a study's group, a stored study, or a table of measured points
(forecast_table). The model is commmodel's step time t(P) = a·b + c·2(P−1)/P + α·L(P),
with L either log2 P (tree-like) or P − 1 (a cost that keeps growing with scale:
stragglers, jitter), or with a second bandwidth for rings that leave a node ("split",
where the points lie on both sides of the node boundary), chosen by evidence: each
candidate is refitted without the largest measured scale and asked for it, and the one
closer to the measurement wins (said in `model.chosen_by`).

The interval comes from the fit's own uncertainty and the extrapolation: the relative
residuals of the fit (scaled by sqrt(n / (n − k)) for the k terms fitted) are resampled
(a residual bootstrap, BOOTSTRAP draws, seeded: the same input gives the same interval),
each draw refitted and asked; the percentiles of the draws at `level` give the band. It
then widens, for every doubling beyond the largest measured scale, by the hold-out's own
miss one doubling out plus SPREAD_PER_DOUBLING. With fewer than HOLDOUT_SCALES scales
no hold-out is possible and the points cannot tell one communication term from another,
so the band also spans what each one-term model predicts. The central value is the
model's lowered by LEAN_PER_DOUBLING per doubling: the backtest on published results
(benchmarks/forecast_backtest.py, tests/data/forecast) shows the model optimistic by
about that much, and SPREAD_PER_DOUBLING is chosen there too (90 % intervals holding 90 %
of the published figures in sample, 85 % when each series is scored with the constants
the other series choose). On a known model with 1 % noise (tests/test_forecast.py)
the 90 % bands hold the truth in at least 80 % of seeded series at 4× and 16×.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from scalestudy.core.errors import ScalestudyError
from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis import forecast_limits as limits
from scalestudy.results.analysis.forecast_records import FittedPoint, ForecastModel, ScaleCost
from scalestudy.results.analysis.modelfit import Design, Params, design
from scalestudy.results.analysis.refits import coefficients, fit_many

#: Bootstrap draws behind each interval.
BOOTSTRAP = 400
#: Relative half-width added to an interval per doubling beyond the largest measured
#: scale (the extrapolation's own uncertainty, beyond the fit's).
SPREAD_PER_DOUBLING = 0.02
#: The model's lean on the backtest (optimistic, growing with the distance): forecasts
#: beyond the largest measured scale are lowered by this much per doubling.
LEAN_PER_DOUBLING = 0.02
#: A transformer run's layout, as the scaling table and a study's points carry it.
LAYOUT_COLUMNS: tuple[str, ...] = ("tp", "pp", "bubble_fraction")
#: Distinct scales a hold-out needs (3 left to fit once the largest is left out);
#: with fewer, the interval spans every one-term communication model instead.
HOLDOUT_SCALES = 4
#: The candidate models, in the order a tie is decided: a log2 P latency, a latency
#: growing with every rank, or a second bandwidth once the ring leaves a node ("split",
#: a candidate only where the points lie on both sides of the node boundary).
CANDIDATES: tuple[str, ...] = ("log", "ring", "split", "probe")
#: What each candidate adds to compute + one bandwidth, in words.
TERM_WORDS = {"log": "alpha·log2 P (tree-like latency)",
              "ring": "alpha·(P−1) (a cost growing with every rank: stragglers, jitter)",
              "split": "c'·2(P−1)/P beyond one node (a slower network between nodes than "
                       "within one)",
              "probe": "alpha·log2 P, with c fixed by the runs' allreduce probe (S / busbw)"}


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
    split: bool = True  # the points tell compute and communication apart
    limit: str = ""  # why this scale is beyond what the forecast supports ("" within)
    hard: bool = False  # the limit is one a flag cannot lift (under one sample a GPU)

    def as_dict(self) -> dict[str, object]:
        """The prediction as `predict --json` prints it."""
        return {"gpus": self.gpus, "nodes": self.nodes, "throughput": self.throughput,
                "low": self.low, "high": self.high, "level": self.level, "unit": self.unit,
                "efficiency": self.efficiency, "step_s": self.step_s,
                "compute_s": self.compute_s if self.split else None,
                "comm_s": self.comm_s if self.split else None,
                "extrapolation": self.extrapolation,
                "extrapolation_verdict": limits.verdict(self.gpus, self.gpus /
                                                        self.extrapolation, self.limit),
                "model_throughput": self.model_throughput}


@dataclass(frozen=True)
class Forecast:
    """The predictions, the model that made them and the points it was fitted on."""

    predictions: list[Prediction]
    model: ForecastModel
    fitted_on: list[FittedPoint] = field(default_factory=list)
    #: per prediction of a study: time and node-hours to its target (or per million
    #: units), with the interval's band (study.predict fills it)
    costs: list[ScaleCost] = field(default_factory=list)


def forecast(points: pd.DataFrame, gpus: list[int], *, level: float = 0.9,
             gpus_per_node: int | None = None, unit: str = "samples/s",
             seed: int = 0, probe: tuple[float, float] | None = None,
             max_gpus: int | None = None) -> Forecast:
    """Forecast the total throughput at `gpus` from measured `points` (columns gpus,
    throughput: the total over all GPUs; per_gpu_batch and global_batch where known, read
    as forecast_limits.reading says; several rows of one scale are its repeats). `probe`:
    (the allreduce's busbw in GB/s, gradient bytes), a measured bandwidth that makes one
    more candidate (the points' step times must then be seconds: per_gpu_batch in the
    throughput's own unit). `max_gpus`: the system's max_nodes in GPUs. A scale beyond
    what the forecast supports carries why in its `limit` (study.predict refuses it); a
    fit that fails its checks (forecast_limits.fit_problems) is refused with its figures."""
    if not 0 < level < 1:
        raise ScalestudyError(f"--level {level}: give a fraction between 0 and 1, e.g. 0.9")
    p, t, batch, read = _inputs(points)
    if len(np.unique(p)) < 3:
        raise ScalestudyError(
            f"{len(np.unique(p))} scale(s) measured: a forecast needs at least 3 (the "
            "model has a compute and a communication term, and one scale more to check "
            "them)")
    # the model's coordinates: the gradient allreduce runs over the data-parallel
    # replicas (P / (tp·pp)), and a pipeline's bubble stretches each GPU's compute
    replica, bubble = _layout(points)
    q, w = p / replica, batch / (1 - bubble)
    gpn = float(gpus_per_node or 0) / float(replica[np.argmax(p)])
    fits = _Fits(gpn, probe)
    chosen, why, cv = _choose(q, w, t, fits)
    params, terms = fits(chosen, q, w, t)
    if params is None:
        raise ScalestudyError(f"no model fits these points: {terms}")
    fitted = params.step_time(q, w)
    residuals = (t - fitted) / fitted
    rms = float(np.sqrt(np.mean(residuals ** 2)))
    has_holdout = chosen in cv and math.isfinite(cv[chosen]) and \
        len(np.unique(p)) >= HOLDOUT_SCALES
    problems = limits.fit_problems(p, p * batch / t, rms, cv[chosen] if has_holdout else None)
    if problems:
        raise ScalestudyError(
            "the fit fails its own checks: " + "; ".join(problems) + ": measure the series "
            "again (a fault, a changed setting, or a scale that does not pay), or forecast "
            "from its scales that scale")
    # a fit of k terms leaves residuals smaller than the noise: scale them back
    # (sqrt(n / (n - k)), the usual residual-bootstrap correction)
    k = len(terms.split("+"))
    inflated = residuals * math.sqrt(len(p) / max(len(p) - k, 1))
    # the per-GPU work of a step at each asked scale: the points' per-GPU batch (weak
    # scaling, accumulation included), or the fixed global batch shared out (strong)
    asked_batch = (read.global_batch / np.asarray(gpus, float) if read.strong
                   and read.global_batch else np.full(len(gpus), float(np.median(batch))))
    # asked scales keep the largest measured scale's layout
    at = (np.asarray(gpus, float) / replica[np.argmax(p)],
          asked_batch / (1 - bubble[np.argmax(p)]), np.asarray(gpus, float) * asked_batch)
    draws = _bootstrap(fitted, inflated, fits.design(chosen, q, w), at, seed)
    # with too few scales for a hold-out, the points cannot tell one communication term
    # from another: the draws of each one-term model are pooled with the chosen one's,
    # so that the band at `level` spans them as far as the level asks
    if len(np.unique(p)) < HOLDOUT_SCALES:
        draws = np.vstack([draws, *_alternatives(q, w, t, gpn, at, seed)])
    top, smallest = float(p.max()), float(p.min())
    held_out = abs(cv[chosen]) if has_holdout else 0.0
    base_per_gpu = float(np.median(batch[p == smallest] / t[p == smallest]))
    # the compute/communication split is identified only where a hold-out checked the
    # communication term or a measurement fixed it, and both parts are there
    split = (has_holdout or chosen == "probe") and params.a > 0 and (
        params.c > 0 or params.alpha > 0 or params.c_inter > 0 or chosen == "probe")
    out = []
    for i, size in enumerate(gpus):
        b0 = float(asked_batch[i])
        step = float(params.step_time(at[0][i:i + 1], at[1][i:i + 1])[0])
        comm = float(params.comm_time(at[0][i:i + 1])[0])
        doublings = max(0.0, math.log2(size / top))
        # the backtest's lean: the model is optimistic by about this much per doubling
        raw = size * b0 / step
        total = raw / (1 + LEAN_PER_DOUBLING * doublings)
        col_i = draws[:, i][np.isfinite(draws[:, i])]
        lo_q, hi_q = (np.quantile(col_i, [(1 - level) / 2, (1 + level) / 2])
                      if len(col_i) else (total, total))
        lo_q, hi_q = (v / (1 + LEAN_PER_DOUBLING * doublings) for v in (lo_q, hi_q))
        # the hold-out's own miss, one doubling out, grows with each doubling further
        widen = (SPREAD_PER_DOUBLING + held_out) * doublings
        low = min(float(lo_q), total) / (1 + widen)
        high = max(float(hi_q), total) * (1 + widen)
        reason, hard = limits.beyond(int(size), top, read, max_gpus)
        out.append(Prediction(
            gpus=int(size), nodes=(size // gpus_per_node if gpus_per_node and
                                   size % gpus_per_node == 0 else None),
            throughput=total, low=low, high=high, level=level, unit=unit,
            efficiency=(total / size) / base_per_gpu, step_s=step,
            compute_s=step - comm, comm_s=comm, extrapolation=size / top,
            model_throughput=raw, split=bool(split), limit=reason, hard=hard))
    widened = (f"widened by the hold-out's miss ({held_out:.1%}) plus "
               f"{SPREAD_PER_DOUBLING:.0%} per doubling" if has_holdout else
               f"pooled with each one-term communication model's draws ({len(np.unique(p))}"
               f" scales allow no hold-out), widened by {SPREAD_PER_DOUBLING:.0%} per "
               "doubling")
    model: ForecastModel = {
             "form": "t(P) = a·b + c·2(P−1)/P + " + TERM_WORDS[chosen], "terms": terms,
             "latency": chosen, "chosen_by": why, "holdout_errors": cv,
             "a_s_per_unit": params.a, "c_s": params.c, "alpha_s": params.alpha,
             "c_inter_s": params.c_inter, "rms_residual": rms,
             "reading": read.why or "weak scaling: one per-GPU batch",
             "split": ("compute and communication told apart" if split else
                       "compute and communication not told apart: " + (
                           "no hold-out checked the communication term (fewer than "
                           f"{HOLDOUT_SCALES} scales) and no allreduce probe fixed it"
                           if not (has_holdout or chosen == "probe") else
                           "the fit left one of them at zero")),
             "max_factor": limits.MAX_FACTOR,
             "interval": f"residual bootstrap ({BOOTSTRAP} draws) at level {level:g}, "
                         f"{widened} beyond the largest measured scale ({int(top)} GPUs)",
             "lean": f"the central value is the model's lowered by "
                     f"{LEAN_PER_DOUBLING:.0%} per doubling beyond {int(top)} GPUs: the model "
                     "is optimistic by that much on the backtest (benchmarks/"
                     "forecast_backtest.py)"}
    fitted_on: list[FittedPoint] = [
        {"gpus": int(g), "throughput": float(g * b / s), "per_gpu_batch": float(b)}
        for g, b, s in zip(p, batch, t, strict=True)]
    return Forecast(out, model, fitted_on)


def _layout(points: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(GPUs per data-parallel replica: tp·pp, the pipeline's bubble fraction) of each
    row; 1 and 0 where the points do not say (data parallel only)."""
    def column(name: str, default: float) -> np.ndarray:
        values = (pd.to_numeric(points[name], errors="coerce").to_numpy(float)
                  if name in points else np.full(len(points), np.nan))
        return np.where(np.isfinite(values), values, default)

    replica = np.maximum(column("tp", 1.0), 1.0) * np.maximum(column("pp", 1.0), 1.0)
    return replica, np.clip(column("bubble_fraction", 0.0), 0.0, 0.95)


def _inputs(points: pd.DataFrame
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, limits.Reading]:
    """(GPUs, seconds per optimizer step, per-GPU work per step, the series' reading)
    of each row: forecast_limits.reading says how a fixed global batch is read (strong
    scaling only where each GPU's batch shrinks with it; gradient accumulation of the same
    micro-batch otherwise). Without one, it is weak scaling, the per-GPU batch one value,
    1 where it is not known (a constant: only the compute term's unit changes)."""
    p = pd.to_numeric(points[col.GPUS], errors="coerce").to_numpy(float)
    thr = pd.to_numeric(points[col.THROUGHPUT], errors="coerce").to_numpy(float)
    batch = (pd.to_numeric(points["per_gpu_batch"], errors="coerce").to_numpy(float)
             if "per_gpu_batch" in points else np.full_like(p, np.nan))
    glob = (pd.to_numeric(points[col.GLOBAL_BATCH], errors="coerce").to_numpy(float)
            if "global_batch" in points else np.full_like(p, np.nan))
    sample = (float(pd.to_numeric(points["sample_units"]).iloc[0])
              if "sample_units" in points else 1.0)
    read = limits.reading(p, batch, glob, sample)
    if read.strong:
        return p, float(read.global_batch or 0) / thr, read.work, read
    if len(set(read.work.tolist())) > 1:
        raise ScalestudyError(
            "the per-GPU batch changes across the points and the global batch is not the "
            "same on every row: give one series (weak scaling: one per-GPU batch; strong "
            "scaling: one global batch, in a global_batch column)")
    return p, p * read.work / thr, read.work, read


@dataclass(frozen=True)
class _Fits:
    """What the candidates may use beyond the points: the node size (in replicas) and
    a measured allreduce bandwidth."""

    gpn: float
    probe: tuple[float, float] | None

    def design(self, name: str, p: np.ndarray, batch: np.ndarray) -> Design | str:
        """Candidate `name`'s design at the points, or why it has none."""
        if name == "probe":
            if self.probe is None:
                return "no allreduce probe in the runs"
            busbw, grad_bytes = self.probe
            return design(p, batch, grad_bytes, latency="log", bandwidth="probe",
                          probe_busbw_gbps=busbw)
        if name != "split":
            return design(p, batch, None, latency=name)
        if not _both_sides(p, self.gpn):
            return "the points do not lie on both sides of the node boundary"
        terms = ("compute", "bandwidth", "internode")
        return design(p, batch, None, terms=terms + (
            ("latency",) if len(np.unique(p)) > len(terms) + 1 else ()),
            gpus_per_node=self.gpn)

    def __call__(self, name: str, p: np.ndarray, batch: np.ndarray, t: np.ndarray
                 ) -> tuple[Params | None, str]:
        """Candidate `name` fitted to the points; (params, terms) or (None, why not)."""
        d = self.design(name, p, batch)
        if isinstance(d, str):
            return None, d
        [params] = fit_many(d, np.asarray(t, float)[None, :])
        return params, "+".join(d.terms)


def _both_sides(p: np.ndarray, gpn: float) -> bool:
    """Some rings stay within a node (more than one GPU) and some leave it."""
    return gpn > 1 and bool(((p > 1) & (p <= gpn)).any()) and bool((p > gpn).any())


def _choose(p: np.ndarray, batch: np.ndarray, t: np.ndarray, fits: _Fits
            ) -> tuple[str, str, dict[str, float]]:
    """The candidate that predicts the largest measured scale best when refitted
    without it; (name, why, hold-out error of each candidate)."""
    top = p == p.max()
    errors: dict[str, float] = {}
    for term in CANDIDATES:
        params, _ = fits(term, p[~top], batch[~top], t[~top])
        if params is None:
            continue
        guess = params.step_time(p[top], batch[top])
        errors[term] = float(np.median(t[top] / guess - 1))  # throughput: measured/pred
    if len(np.unique(p[~top])) < 3 and "probe" in errors:
        return "probe", ("too few scales to choose among fitted terms by a hold-out: the "
                         "allreduce probe's measured bandwidth fixes one"), errors
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


def _alternatives(p: np.ndarray, batch: np.ndarray, t: np.ndarray, gpn: float,
                  at: tuple[np.ndarray, np.ndarray, np.ndarray], seed: int
                  ) -> list[np.ndarray]:
    """The bootstrap draws of throughput at the asked scales (`at`) of each
    one-communication-term model the points allow (compute + bandwidth, compute + each
    latency term, compute + a cost only between nodes where the points lie on both sides
    of the boundary); one array (rows: draws) a model."""
    out = []
    shapes = [("log", ("compute", "bandwidth")), ("log", ("compute", "latency")),
              ("ring", ("compute", "latency"))]
    if _both_sides(p, gpn):
        shapes.append(("log", ("compute", "internode")))
    for latency, terms in shapes:
        d = design(p, batch, None, latency=latency, terms=terms, gpus_per_node=gpn)
        if isinstance(d, str):
            continue
        [params] = fit_many(d, np.asarray(t, float)[None, :])
        if not _sane(params):
            continue
        fitted = params.step_time(p, batch)
        residuals = (t - fitted) / fitted * math.sqrt(len(p) / max(len(p) - len(terms), 1))
        out.append(_bootstrap(fitted, residuals, d, at, seed))
    return out


def _bootstrap(fitted: np.ndarray, residuals: np.ndarray, d: Design | str,
               at: tuple[np.ndarray, np.ndarray, np.ndarray], seed: int) -> np.ndarray:
    """Throughput at the asked scales (`at`: their replicas, per-GPU work in the
    model's units, and work per step over all GPUs) for each residual-bootstrap draw of
    design `d` (rows: draws)."""
    rng = np.random.default_rng(seed)
    if isinstance(d, str):
        return np.full((1, len(at[0])), np.nan)
    # twice the draws asked, resampled at once; the first BOOTSTRAP sane fits are kept
    t_star = fitted * (1 + rng.choice(residuals, size=(BOOTSTRAP * 2, len(residuals)),
                                      replace=True))
    coef = coefficients(d, t_star)
    sane = (coef > 0).any(axis=1) | (d.c_fixed > 0)  # as _sane: some term left
    kept = coef[sane][:BOOTSTRAP]
    if not len(kept):
        return np.full((1, len(at[0])), np.nan)
    return at[2] / d.step_times(kept, at[0], at[1])


def _sane(params: Params) -> bool:
    return params.a > 0 or params.c > 0 or params.alpha > 0 or params.c_inter > 0
