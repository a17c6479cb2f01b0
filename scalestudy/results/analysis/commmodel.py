"""A communication model of step time that explains the measured scaling and predicts
larger scales.

Per group (one scaling curve), the time of one training step on P GPUs is modelled as

    t(P) = a * b(P)  +  c * 2(P-1)/P * S  +  alpha * L(P)

- `a * b(P)`: compute, `a` seconds per image (or token) per GPU, b(P) the per-GPU batch
  in the same unit (fixed in
  weak scaling, global batch / P in strong scaling);
- `c * 2(P-1)/P * S`: ring allreduce of S gradient bytes (`grad_bytes`, when the runs
  carry it; otherwise S = 1 and c is in seconds), c = 1 / B with B the bus bandwidth;
- `alpha * L(P)`: latency, L = log2 P (tree) or P - 1 (ring).

The measured step time is derived from throughput, t = work per step / throughput, in
the throughput's own unit (images, or tokens = sequences x seq_len for a transformer:
`units_per_sample`), so a `command` workload is modelled too and `a` is seconds per
image or per token. The parameters are fitted (results.analysis.modelfit) by non-negative least
squares on relative residuals. With `bandwidth="probe"`, B is not fitted but taken
from the allreduce probe (busbw, nccl-tests definition) at the largest measured scale.

Honesty rules: a fit needs more points (distinct world sizes) than parameters; with
three points the latency term is left out, with fewer nothing is fitted and the status
says why. The hold-out check refits without the largest world size and reports how
far the prediction of that point's throughput is from the measurement.

`losses` says where each group's step time goes at its largest scale: compute slowing
down per image (measured without sync), gradient sync not hidden behind compute
(measured comm overhead), or, without those, the model's communication share.

`model_study` predicts beyond the measured scales for every fitted group; the report
shows only the predictions of groups whose fit passes `prediction_verdict`
(`qualified`; the rule is `PREDICTION_RULE`, stated in the report), and says why for
the others (the fits' `withheld` column). A prediction whose efficiency is above the
efficiency measured at the group's largest scale is marked `above_measured`. The
report's figures and intervals are then `forecast_study.with_intervals`'s: the same forecasts
as `scalestudy predict`, so that no prediction is shown without its interval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np
import pandas as pd

from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.modelfit import fit_points, ring

#: Largest number of nodes predictions go to, unless the user gives another limit.
MAX_NODES = 1024
#: The model's communication share explains a loss only for a fit within this residual.
MAX_RMS_RESIDUAL = 0.10
#: At or above this efficiency a group has no loss worth a cause.
GOOD_EFFICIENCY = 0.90
#: The prediction rule: scales and node counts measured (the interval does the rest).
MIN_SCALES = 3
MIN_NODE_COUNTS = 2
PREDICTION_RULE = (
    "Predictions are the forecasts of `scalestudy predict` (docs/forecast.md), each with "
    "its 90 % interval: a residual bootstrap of the fit, widened for every doubling "
    "beyond the largest measured scale by the hold-out's own miss plus 2 %, and, with "
    "fewer than 4 scales, spanning every one-term communication model the points allow. "
    "On the backtest of published results (benchmarks/forecast_backtest.py) these "
    "intervals held 90 % of the published figures, 85 % on series left out of the "
    "calibration. The model alone leans optimistic there (+4 % on average), so each "
    "forecast is lowered by 2 % per doubling. A group is forecast when its runs span at "
    f"least {MIN_SCALES} world sizes and {MIN_NODE_COUNTS} node counts: no series of the "
    "backtest was forecast across the node boundary from one node, so runs on one node "
    "say nothing checked about the network between nodes. A predicted efficiency above "
    "the one measured at the largest scale is marked as such.")
FIT_COLUMNS: tuple[str, ...] = (
    "group", "status", "terms", "points", "t_compute_s", "sec_per_image", "grad_bytes",
    "bandwidth_GBps", "bandwidth_from", "probe_busbw_GBps", "latency_s", "latency_term",
    "rms_residual", "holdout_world_size",
    "holdout_predicted", "holdout_measured", "holdout_error", "node_counts", "withheld",
)
POINT_COLUMNS: tuple[str, ...] = (
    "group", "nodes", "world_size", "batch_size", "global_batch", "step_time_measured",
    "step_time_fitted", "residual", "comm_share",
)
PREDICTION_COLUMNS: tuple[str, ...] = (
    "group", "factor", "nodes", "world_size", "batch_size", "global_batch",
    "throughput_predicted", "efficiency_predicted", "comm_share", "above_measured",
    "step_time_fitted", "low", "high", "level", "forecast_model",
)


def units_per_sample(rows: pd.DataFrame) -> float:
    """How many of the throughput's units one sample is: the sequence length where the
    runs counted tokens/s, else 1 (images, or a `command` workload's own unit)."""
    if "throughput_unit" not in rows or "seq_len" not in rows:
        return 1.0
    tokens = rows[col.THROUGHPUT_UNIT].astype(str).eq("tokens/s")
    seq = pd.to_numeric(rows.loc[tokens, "seq_len"], errors="coerce").dropna()
    return float(seq.median()) if len(seq) and seq.median() > 0 else 1.0


def prediction_verdict(fit: Mapping[str, Any]) -> str:
    """"" when a fit (a row of the fits table) qualifies for predictions, else why not."""
    if fit["status"] != "fitted":
        return f"no fit ({fit['status']})"
    nodes = int(fit["node_counts"])
    if nodes < MIN_NODE_COUNTS:
        return (f"the runs span {nodes} node count{'s' if nodes != 1 else ''} (at least "
                f"{MIN_NODE_COUNTS} needed: predictions in nodes from runs on one node "
                "extrapolate a quantity never measured)")
    if int(fit["points"]) < MIN_SCALES:
        return (f"{int(fit['points'])} world sizes measured (a forecast needs at least "
                f"{MIN_SCALES})")
    return ""


def _group_inputs(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                float | None, float | None]:
    per = units_per_sample(rows)
    p = rows[col.WORLD_SIZE].to_numpy(float)
    batch = rows[col.BATCH_SIZE].to_numpy(float) * per
    t = rows[col.GLOBAL_BATCH].to_numpy(float) * per / rows[col.THROUGHPUT_MEDIAN].to_numpy(float)
    gb = rows[col.GRAD_BYTES].dropna() if "grad_bytes" in rows else pd.Series(dtype=float)
    bw = (rows.loc[rows[col.WORLD_SIZE] == rows[col.WORLD_SIZE].max(), "allreduce_busbw_GBps"]
          .dropna() if "allreduce_busbw_GBps" in rows else pd.Series(dtype=float))
    return (p, batch, t, float(gb.median()) if len(gb) else None,
            float(bw.median()) if len(bw) else None)


def _predict_scales(rows: pd.DataFrame, scaling: str, max_nodes: int
                    ) -> list[tuple[int, int, int, float]]:
    """(factor, nodes, world size, per-GPU batch) at 2x, 4x ... the largest measured."""
    top = rows.loc[rows[col.WORLD_SIZE].idxmax()]
    nodes0 = int(top[col.NODES])
    out, factor = [], 2
    while nodes0 * factor <= max_nodes:
        size = int(top[col.WORLD_SIZE]) * factor
        batch = float(top[col.BATCH_SIZE]) if scaling == "weak" else float(
            top[col.GLOBAL_BATCH]) / size
        if batch < 1:
            break
        out.append((factor, nodes0 * factor, size, batch))
        factor *= 2
    return out


def model_study(table: pd.DataFrame, scaling: str, latency: str = "log",
                bandwidth: str = "fit", max_nodes: int = MAX_NODES
                ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(fits, points, predictions) for every group of a scaling table."""
    fits, points, preds = [], [], []
    for group, rows in table.groupby("group", sort=False):
        rows = rows.sort_values("world_size")
        p, batch, t, gbytes, busbw = _group_inputs(rows)
        params, terms = fit_points(p, batch, t, gbytes, latency, bandwidth, busbw)
        fit: dict[str, object] = dict.fromkeys(FIT_COLUMNS, float("nan"))
        fit.update(group=group, points=len(np.unique(p)), grad_bytes=gbytes,
                   node_counts=int(rows[col.NODES].nunique()),
                   probe_busbw_GBps=busbw, bandwidth_from=bandwidth,
                   latency_term="log2 P" if latency == "log" else "P - 1")
        if params is None:
            fit.update(status=terms, terms="")
            fit["withheld"] = prediction_verdict(fit)
            fits.append(fit)
            continue
        fitted = params.step_time(p, batch)  # batch: per-GPU work per step, in units
        resid = (t - fitted) / t
        known_s = gbytes is not None
        fit.update(status="fitted", terms=terms, sec_per_image=params.a,
                   t_compute_s=params.a * float(batch[-1]), latency_s=params.alpha,
                   rms_residual=float(np.sqrt(np.mean(resid ** 2))),
                   bandwidth_GBps=(1 / params.c / 1e9 if known_s and params.c > 0
                                   else float("nan")))
        fit.update(_holdout(rows, p, batch, t, gbytes, latency, bandwidth, busbw))
        fit["withheld"] = prediction_verdict(fit)
        fits.append(fit)
        comm = params.comm_time(p) / fitted
        for i, r in enumerate(rows.itertuples(index=False)):
            points.append((group, r.nodes, r.world_size, r.batch_size, r.global_batch,
                           t[i], fitted[i], resid[i], comm[i]))
        base = rows[rows[col.BASELINE].astype(bool)].iloc[0]
        per_gpu0 = float(base[col.THROUGHPUT_MEDIAN]) / float(base[col.WORLD_SIZE])
        last = float(rows[col.EFFICIENCY].iloc[-1])
        per = units_per_sample(rows)
        for factor, nodes, size, b in _predict_scales(rows, scaling, max_nodes):
            tp = params.step_time(np.array([size]), np.array([b * per]))[0]
            thr = b * per * size / tp
            share = params.comm_time(np.array([size]))[0] / tp
            eff = thr / size / per_gpu0
            preds.append((group, factor, nodes, size, b, b * size, thr, eff, share,
                          bool(eff > last + 1e-9), tp, math.nan, math.nan, math.nan, ""))
    return (pd.DataFrame(fits, columns=list(FIT_COLUMNS)),
            pd.DataFrame(points, columns=list(POINT_COLUMNS)),
            pd.DataFrame(preds, columns=list(PREDICTION_COLUMNS)))


def qualified(fits: pd.DataFrame, preds: pd.DataFrame) -> pd.DataFrame:
    """The predictions of the groups whose fit passes the rule (what the report shows)."""
    ok = fits.loc[fits["withheld"].fillna("") == "", "group"]
    return preds[preds[col.GROUP].isin(ok)].reset_index(drop=True)


def _holdout(rows: pd.DataFrame, p: np.ndarray, batch: np.ndarray, t: np.ndarray,
             gbytes: float | None, latency: str, bandwidth: str,
             busbw: float | None) -> dict[str, float]:
    """Refit without the largest world size; the relative error of its throughput."""
    keep = p < p.max()
    params, _ = fit_points(p[keep], batch[keep], t[keep], gbytes, latency, bandwidth, busbw)
    if params is None:
        return {}
    last = ~keep
    measured = float(rows[col.THROUGHPUT_MEDIAN].to_numpy(float)[last][0])
    size, b = float(p[last][0]), float(batch[last][0])
    predicted = b * size / float(params.step_time(np.array([size]), np.array([b]))[0])
    return {"holdout_world_size": size, "holdout_predicted": predicted,
            "holdout_measured": measured, "holdout_error": predicted / measured - 1}


def _col(row: pd.Series, name: str) -> float:
    value = row.get(name, float("nan"))
    return float(value) if value is not None and pd.notna(value) else float("nan")


class Cause(str, Enum):
    """What a group's loss of efficiency at its largest scale comes from, by its measured
    factors (compute-only time, comm overhead) or, without them, the model's fit."""

    COMPUTE = "compute"  # compute alone slows down as ranks are added
    COMM = "comm"  # gradient sync not hidden behind compute
    MODEL = "model"  # no compute-only timing: the model attributes it to communication
    OTHER = "other"  # neither measured factor explains it (stragglers, waiting, noise)
    NONE = "none"  # efficiency stays at or above GOOD_EFFICIENCY
    UNKNOWN = "unknown"  # nothing measured and no fit within the rule

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Loss:
    """Where one group's step time goes at its largest scale, against its baseline."""

    group: str
    top: pd.Series
    base: pd.Series
    slowdown: float  # compute time per sample, top / baseline (NaN: not measured)
    overhead: float  # measured comm overhead at top (NaN: not measured, or one rank)
    model_share: float  # the model's comm share at top (NaN: no fit within the rule)

    @property
    def sync_s(self) -> float:
        """Seconds per step of gradient sync not hidden behind compute."""
        tc = _col(self.top, "compute_time_s")
        return tc * self.overhead / (1 - self.overhead) if self.overhead < 1 else math.nan

    @property
    def oversubscribed(self) -> bool:
        """Did the largest scale put more ranks on a host than it has cores?"""
        return "oversubscribed" in str(self.top.get(col.FLAGS) or "")

    def cause(self) -> Cause:
        """The largest factor of the loss."""
        eff = float(self.top[col.EFFICIENCY])
        if eff >= GOOD_EFFICIENCY:
            return Cause.NONE
        comm = 1 / (1 - self.overhead) if self.overhead < 1 else math.nan
        known = {k: v for k, v in ((Cause.COMPUTE, self.slowdown), (Cause.COMM, comm))
                 if v == v}
        if not known:
            return Cause.MODEL if self.model_share == self.model_share else Cause.UNKNOWN
        rest = 1 / eff / math.prod(known.values())
        best = max(known, key=lambda k: known[k])
        return best if known[best] >= rest else Cause.OTHER


def losses(table: pd.DataFrame, points: pd.DataFrame, fits: pd.DataFrame) -> list[Loss]:
    """A Loss per group with more than one point, worst efficiency at the top first."""
    good = set(fits.loc[(fits["status"] == "fitted")
                        & (fits["rms_residual"] <= MAX_RMS_RESIDUAL), "group"])
    out = []
    for group, rows in table.groupby("group", sort=False):
        if len(rows) < 2:
            continue
        top = rows.loc[rows[col.WORLD_SIZE].idxmax()]
        base = rows[rows[col.BASELINE].astype(bool)].iloc[0]
        slow = ((_col(top, "compute_time_s") / float(top[col.BATCH_SIZE]))
                / (_col(base, "compute_time_s") / float(base[col.BATCH_SIZE])))
        share = points.loc[(points[col.GROUP] == group)
                           & (points[col.WORLD_SIZE] == top[col.WORLD_SIZE]), "comm_share"]
        model = float(share.iloc[0]) if group in good and len(share) else math.nan
        out.append(Loss(str(group), top, base, slow, _col(top, "comm_overhead"), model))
    return sorted(out, key=lambda x: float(x.top[col.EFFICIENCY]))


BOUND_COLUMNS: tuple[str, ...] = (
    "group", "world_size", "grad_bytes", "probe_busbw_GBps", "ring_time_s",
    "compute_time_s", "compute_source", "efficiency_bound", "efficiency_measured",
)


def ring_bounds(table: pd.DataFrame, fits: pd.DataFrame) -> pd.DataFrame:
    """Per group with a gradient size and an allreduce probe, at its largest world size:
    the ring allreduce time 2(P-1)/P * S / busbw, the compute time (measured without
    sync, else the model's), and the efficiency that allows when communication does not
    overlap compute: t_compute / (t_compute + t_ring)."""
    rows = []
    a = dict(zip(fits[col.GROUP], fits["sec_per_image"], strict=True)) if len(fits) else {}
    for group, pts in table.groupby("group", sort=False):
        top = pts.loc[pts[col.WORLD_SIZE].idxmax()]
        s, bw = top.get(col.GRAD_BYTES), top.get("allreduce_busbw_GBps")
        if not (pd.notna(s) and pd.notna(bw) and bw > 0 and top[col.WORLD_SIZE] > 1):
            continue
        p = float(top[col.WORLD_SIZE])
        ring_s = float(ring(np.array([p]))[0]) * float(s) / (float(bw) * 1e9)
        if pd.notna(top.get(col.COMPUTE_TIME_S)):
            compute, source = float(top[col.COMPUTE_TIME_S]), "measured"
        elif pd.notna(a.get(group)):  # a: seconds per unit (image or token)
            compute, source = (float(a[group]) * float(top[col.BATCH_SIZE])
                               * units_per_sample(pts), "model")
        else:
            continue
        rows.append((group, int(p), float(s), float(bw), ring_s, compute, source,
                     compute / (compute + ring_s), float(top[col.EFFICIENCY])))
    return pd.DataFrame(rows, columns=list(BOUND_COLUMNS))
