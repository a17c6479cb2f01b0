"""Many fits of one model design at once: the forecast's bootstrap refits the same points'
design to hundreds of resampled step times, and solving them together (batched QR, one
per subset of the terms) costs what a few single fits do.

Each row's answer is commmodel.nnls's for that row: the unconstrained least-squares
solution of the relative residuals where every coefficient is positive (no subset of the
terms can do better), else the best solution over the subsets of terms whose
coefficients are all at least 0. A subset whose columns are degenerate for the batch
falls back to nnls row by row.
"""

from __future__ import annotations

import itertools

import numpy as np

from scalestudy.results.analysis.modelfit import Design, Params, nnls


def fit_many(d: Design, times: np.ndarray) -> list[Params]:
    """One fit per row of `times` (step times at the design's points)."""
    return [d.params(row) for row in coefficients(d, times)]


def coefficients(d: Design, times: np.ndarray) -> np.ndarray:
    """The coefficients (one per term) of a fit per row of `times`; rows: fits."""
    y = np.asarray(times, float)
    a = d.columns[None, :, :] / y[:, :, None]
    b = (y - d.known[None, :]) / y
    scale = np.linalg.norm(a, axis=1)
    scale[scale == 0] = 1.0
    scaled = a / scale[:, None, :]
    full = _solve(scaled, b)
    feasible = np.isfinite(full).all(axis=1) & (full > 0).all(axis=1)
    coef = np.where(feasible[:, None], full, 0.0)
    rest = np.flatnonzero(~feasible)
    if len(rest):
        coef[rest] = _subsets(scaled[rest], b[rest], a[rest], b[rest], scale[rest])
    return coef / scale


def _solve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least squares of each row (a: rows x points x terms); NaN where degenerate."""
    try:
        q, r = np.linalg.qr(a)
        return np.linalg.solve(r, np.matmul(np.swapaxes(q, 1, 2), b[..., None]))[..., 0]
    except np.linalg.LinAlgError:
        return np.full((a.shape[0], a.shape[2]), np.nan)


def _subsets(scaled: np.ndarray, b: np.ndarray, raw: np.ndarray, raw_b: np.ndarray,
             scale: np.ndarray) -> np.ndarray:
    """nnls of each row, in scaled coefficients: the subset of terms with the least
    squared error among those whose coefficients are all at least 0."""
    rows, _, n = scaled.shape
    best = np.zeros((rows, n))
    best_err = np.sum(b ** 2, axis=1)
    for k in range(1, n + 1):
        for cols in itertools.combinations(range(n), k):
            sub = scaled[:, :, cols]
            got = _solve(sub, b)
            if not np.isfinite(got).all():  # degenerate here: nnls row by row
                return np.array([nnls(raw[i], raw_b[i]) * scale[i] for i in range(rows)])
            err = np.sum((np.matmul(sub, got[..., None])[..., 0] - b) ** 2, axis=1)
            better = (got >= 0).all(axis=1) & (err < best_err - 1e-15 * np.maximum(best_err,
                                                                                  1.0))
            if better.any():
                best[better] = 0.0
                best[np.ix_(better, cols)] = got[better]
                best_err = np.where(better, err, best_err)
    return best
