"""Variants against their reference: for each parameter that varies between a study's
groups (tuning, backend, precision, an option), whether the best value beats the
reference beyond the repeat band, and the finding that says so."""

from __future__ import annotations

import math
from typing import NamedTuple

import pandas as pd

from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.efficiency import format_value, unit_of
from scalestudy.results.analysis.phrases import img_text, names_text, point_text

#: With one repeat there is no band: a difference smaller than this counts as none.
TOLERANCE = 0.02
#: Group parameters that are not variants of one training setup (not compared).
NOT_VARIANTS = frozenset({"study", "system", "scaling", "workload", "model", "image_size"})


class Outcome(NamedTuple):
    """How a variant fared against the reference: `best` beats `reference` by `gain`
    (NaN: within the repeat band) at `where`, for the parameter `dim`."""

    dim: str
    best: str
    reference: str
    gain: float
    where: str


def variant_outcomes(table: pd.DataFrame, scaling: str) -> list[Outcome]:
    """An Outcome per parameter that varies between groups, at the largest world size
    every value was measured at; gain NaN when the difference is within the repeat band
    (or TOLERANCE with one repeat)."""
    keys = list(table.columns[1:table.columns.get_loc("nodes")])
    keys = [k for k in keys if k not in NOT_VARIANTS and table[k].nunique(dropna=False) > 1]
    fixed = "batch_size" if scaling == "weak" else "global_batch"
    out = []
    for dim in keys:
        others = [k for k in keys if k != dim] + [fixed]
        values = list(dict.fromkeys(table[dim]))
        ref = "default" if "default" in values else values[0]
        for _, rows in table.groupby(others, sort=False, dropna=False):
            common = rows.groupby("world_size")[dim].nunique() == rows[dim].nunique()
            if rows[dim].nunique() < 2 or ref not in set(rows[dim]) or not common.any():
                continue
            at = rows[rows[col.WORLD_SIZE] == common[common].index.max()]
            r = at[at[dim] == ref].iloc[0]
            b = at.loc[at[col.THROUGHPUT_MEDIAN].idxmax()]
            if b[dim] == ref:
                b = at[at[dim] != ref].sort_values("throughput_median").iloc[-1]
            gain = float(b[col.THROUGHPUT_MEDIAN] / r[col.THROUGHPUT_MEDIAN] - 1)
            if min(int(r[col.N_REPEATS]), int(b[col.N_REPEATS])) > 1:
                same = (b[col.THROUGHPUT_MIN] <= r[col.THROUGHPUT_MAX]
                        and r[col.THROUGHPUT_MIN] <= b[col.THROUGHPUT_MAX])
            else:
                same = abs(gain) < TOLERANCE
            where = (f"{point_text(b)}: {img_text(b['throughput_median'])} vs "
                     f"{img_text(r['throughput_median'])} {unit_of(table)}"
                     + (f" (global batch {format_value(r['global_batch'])})"
                        if r[col.GLOBAL_BATCH] != b[col.GLOBAL_BATCH] else ""))
            out.append(Outcome(dim, str(b[dim]), str(ref), math.nan if same else gain, where))
    return out



def variant_findings(table: pd.DataFrame, scaling: str,
                     outcomes: list[Outcome] | None = None) -> list[str]:
    """Whether a variant (tuning, backend, precision, an option) beats the reference
    (`outcomes`: variant_outcomes' answer, when already computed)."""
    found = variant_outcomes(table, scaling) if outcomes is None else outcomes
    out = []
    for dim in dict.fromkeys(v.dim for v in found):
        clauses = []
        for _, best, ref, gain, where in (v for v in found if v.dim == dim):
            if gain != gain:
                clauses.append(f"`{best}` and `{ref}` are within the repeat band at {where}:"
                               " no difference")
            elif gain > 0:
                clauses.append(f"`{best}` beats `{ref}` by {gain:+.1%} at {where}")
            else:
                clauses.append(f"`{ref}` is best: `{best}` is {gain:+.1%} at {where}")
        out.append(f"{dim.capitalize()}: {names_text(clauses)}.")
    return out
