"""The gradient noise scale in the report: where the samples to the target start to grow
with the global batch (McCandlish et al. 2018's B_simple, measured by the bundled
workload's DDP runs on a dataset: `noise_scale`, docs/noise-scale.md), and the weak-scaling
points whose global batch passes it.

A study's noise scale for a model is the median over its completed data-parallel runs
of that model that measured one (runs without the key, or with null, are left out: one
rank, synthetic data, another backend). Below it, a larger global batch needs about as
many steps fewer; above it, the samples to a given loss grow (E = E_min (1 + B_noise/B)
in the paper's form), so throughput efficiency overstates the speed-up to a trained model.
"""

from __future__ import annotations

import math

import pandas as pd

from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.efficiency import format_value
from scalestudy.results.analysis.phrases import gpus_text, names_text


def batch_text(value: float) -> str:
    """A global batch or noise scale in samples, as people say it: 18.1, 512, 12,300."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def noise_scales(runs: pd.DataFrame) -> pd.DataFrame:
    """Per model (one row, model "" when runs name none): the median noise scale over the
    completed runs that measured one, how many, their lowest and highest, and the global
    batches they ran at. Empty without the key."""
    if col.NOISE_SCALE not in runs.columns or runs.empty:
        return pd.DataFrame(columns=["model", "noise_scale", "runs", "low", "high"])
    done = runs[runs[col.STATE] == "completed"] if col.STATE in runs.columns else runs
    value = pd.to_numeric(done[col.NOISE_SCALE], errors="coerce")
    done = done.assign(_noise=value)[value.notna() & (value > 0) & value.map(math.isfinite)]
    model = (done[col.MODEL].fillna("").astype(str) if col.MODEL in done.columns
             else pd.Series("", index=done.index))
    rows = [{"model": name, "noise_scale": float(part["_noise"].median()), "runs": len(part),
             "low": float(part["_noise"].min()), "high": float(part["_noise"].max())}
            for name, part in done.assign(_model=model).groupby("_model", sort=False)]
    return pd.DataFrame(rows, columns=["model", "noise_scale", "runs", "low", "high"])


def noise_findings(table: pd.DataFrame, runs: pd.DataFrame, scaling: str) -> list[str]:
    """The sentence "beyond a global batch of about N the samples to the target grow"
    per model that measured it, and, in a weak-scaling study, the points whose global
    batch passes N (a finding like the input-bound one); none without the key."""
    scales = noise_scales(runs)
    out = []
    for s in scales.itertuples(index=False):
        n = float(s.noise_scale)
        spread = (f", {batch_text(s.low)}–{batch_text(s.high)} across them"
                  if s.runs > 1 and not math.isclose(s.low, s.high) else "")
        out.append(f"Gradient noise scale{' of ' + s.model if s.model else ''}: "
                   f"{batch_text(n)} samples (B_simple, the median of {s.runs} data-parallel "
                   f"run(s){spread}): beyond a global batch of about {batch_text(n)} the "
                   "samples to the target grow.")
        past = _past(table, str(s.model), n, len(scales) > 1) if scaling == "weak" else []
        if past:
            out.append(f"Weak scaling passes the noise scale{' of ' + s.model if s.model else ''}"
                       f" ({batch_text(n)} samples): {names_text(past)}. There the global "
                       "batch outgrows what one step can use, so each step does less than "
                       "its share and the speed-up to a trained model is below the "
                       "throughput's; hold the global batch (strong scaling) or measure the "
                       "samples to the target there.")
    return out


def _past(table: pd.DataFrame, model: str, n: float, several: bool) -> list[str]:
    """The points of `model` whose global batch is above `n`, as "group at 8 GPUs
    (global batch 512, 2.0× it)"; with one model measured, every point of the table."""
    if table.empty or col.GLOBAL_BATCH not in table.columns:
        return []
    rows = table
    if several and col.MODEL in table.columns:
        rows = table[table[col.MODEL].astype(str) == model]
    elif several and col.GROUP in table.columns:  # the groups name the models that vary
        rows = table[table[col.GROUP].astype(str).str.contains(model, regex=False)]
    batch = pd.to_numeric(rows[col.GLOBAL_BATCH], errors="coerce")
    over = rows[batch > n]
    return [f"{str(r.get(col.GROUP, '')) + ' at ' if r.get(col.GROUP) else 'at '}"
            f"{gpus_text(r[col.WORLD_SIZE])} (global batch {format_value(r[col.GLOBAL_BATCH])}, "
            f"{float(r[col.GLOBAL_BATCH]) / n:.1f}× it)" for _, r in over.iterrows()]
