"""Findings: at most eight sentences computed from the report, after its headline.

Each says one thing once (the headline, `summary.headline`, is not repeated) and quotes
numbers the report's tables show in the tables' own formats. Where a rule keeps a
number out (comm overhead at one rank, predictions that do not qualify), it says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import pandas as pd

from scalestudy.results.analysis.commmodel import GOOD_EFFICIENCY, Loss, losses
from scalestudy.results.analysis.efficiency import format_value, unit_of

#: Efficiency levels the findings report crossings of.
LEVELS: tuple[float, ...] = (GOOD_EFFICIENCY, 0.75)
#: The most findings the report lists after the headline (the rest go to summary.json).
MAX_FINDINGS = 8
#: Groups named in one sentence; more are counted, not named.
SHOWN = 3
#: With one repeat there is no band: a difference smaller than this counts as none.
TOLERANCE = 0.02
#: Group parameters that are not variants of one training setup (not compared).
NOT_VARIANTS = frozenset({"study", "system", "scaling", "workload", "model", "image_size"})


@dataclass(frozen=True)
class Findings:
    """The findings shown (at most MAX_FINDINGS) and those over the limit."""

    items: list[str]
    more: list[str] = field(default_factory=list)

    @property
    def all(self) -> list[str]:
        """Every finding, shown or not (summary.json keeps them all)."""
        return [*self.items, *self.more]


def _img(value: float) -> str:
    """Images/s as the tables print them."""
    return f"{value:,.0f}" if abs(value) >= 100 else (
        f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}")


def _sec(value: float) -> str:
    """Seconds as the tables print them (s, ms, µs)."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(value) >= scale or unit == "µs":
            return f"{value / scale:.3g} {unit}"
    return f"{value:g} s"


def gpus_text(p: float) -> str:
    """"1 GPU", "8 GPUs"."""
    return f"{int(p)} GPU{'s' if int(p) != 1 else ''}"


def point_text(row: pd.Series) -> str:
    """A point as "8 GPUs (2 × 4, global batch 128)"."""
    return (f"{gpus_text(row['world_size'])} ({int(row['nodes'])} × {int(row['ranks_per_node'])}"
            f", global batch {format_value(row['global_batch'])})")


def _list(items: list[str]) -> str:
    """Short items as "a", "a and b", "a, b and c" (at most SHOWN named)."""
    named = items[:SHOWN] + ([f"{len(items) - SHOWN} more"] if len(items) > SHOWN else [])
    return named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]


def _span(values: list[float] | pd.Series) -> str:
    """Fractions as "12.0%" or "12.0–15.5%" (lowest to highest)."""
    lo, hi = f"{min(values):.1%}", f"{max(values):.1%}"
    return lo if lo == hi else f"{lo[:-1]}–{hi}"


def _names(items: list[str]) -> str:
    """At most SHOWN items joined, the rest counted."""
    shown = "; ".join(items[:SHOWN])
    return shown + (f"; and {len(items) - SHOWN} more (see the tables)"
                    if len(items) > SHOWN else "")


def headline_loss(found: list[Loss]) -> Loss | None:
    """The group the headline explains: the least efficient at the largest scale."""
    if not found:
        return None
    top = max(float(x.top["world_size"]) for x in found)
    return next(x for x in found if float(x.top["world_size"]) == top)


def compute_clause(loss: Loss) -> str:
    """How much slower compute alone is per image (or sequence) at the top than at the
    baseline."""
    top, base = loss.top, loss.base
    hosts = (f"; {int(top['ranks_per_host'])} ranks on {int(top['host_cores'])} cores"
             if loss.oversubscribed else "")
    sample = "sequence" if str(top.get("throughput_unit")) == "tokens/s" else "image"
    return (f"compute alone (no gradient sync) takes {loss.slowdown:.2f}× as long per {sample} "
            f"as at {gpus_text(base['world_size'])} ({_sec(top['compute_time_s'])} vs "
            f"{_sec(base['compute_time_s'])} per step{hosts})")


def sync_clause(loss: Loss) -> str:
    """The measured comm overhead at the top: sync not hidden behind compute."""
    return (f"gradient sync not hidden behind compute adds {loss.overhead:.1%} of the step "
            "(measured comm overhead)")


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
            at = rows[rows["world_size"] == common[common].index.max()]
            r = at[at[dim] == ref].iloc[0]
            b = at.loc[at["throughput_median"].idxmax()]
            if b[dim] == ref:
                b = at[at[dim] != ref].sort_values("throughput_median").iloc[-1]
            gain = float(b["throughput_median"] / r["throughput_median"] - 1)
            if min(int(r["n_repeats"]), int(b["n_repeats"])) > 1:
                same = (b["throughput_min"] <= r["throughput_max"]
                        and r["throughput_min"] <= b["throughput_max"])
            else:
                same = abs(gain) < TOLERANCE
            where = (f"{point_text(b)}: {_img(b['throughput_median'])} vs "
                     f"{_img(r['throughput_median'])} {unit_of(table)}"
                     + (f" (global batch {format_value(r['global_batch'])})"
                        if r["global_batch"] != b["global_batch"] else ""))
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
        out.append(f"{dim.capitalize()}: {_names(clauses)}.")
    return out


def efficiency_findings(table: pd.DataFrame) -> list[str]:
    """Where each group first drops below 90 % and 75 % efficiency, or that none does;
    groups that cross at the same point share a clause."""
    cross: dict[tuple[str, int, int, int], list[str]] = {}
    fine: list[str] = []
    single: list[str] = []
    smallest = int(table["world_size"].min())
    for group, rows in table.groupby("group", sort=False):
        rows = rows.sort_values("world_size")
        firsts: dict[int, list[float]] = {}  # row -> the levels it is the first below
        for level in LEVELS:
            below = rows[rows["efficiency"] < level]
            if len(below):
                firsts.setdefault(below.index[0], []).append(level)
        for index, levels in firsts.items():
            r = rows.loc[index]
            key = (" and ".join(f"{level:.0%}" for level in levels), int(r["world_size"]),
                   int(r["nodes"]), int(r["ranks_per_node"]))
            gb = f"global batch {format_value(r['global_batch'])}"
            base = int(rows.loc[rows["baseline"].astype(bool), "world_size"].iloc[0])
            own = f", against its own baseline at {gpus_text(base)}" if base > smallest else ""
            cross.setdefault(key, []).append(
                f"{r['efficiency']:.1%} in {group}" + (f" ({gb}{own})" if gb not in group
                                                       else (f" ({own[2:]})" if own else "")))
        if rows["world_size"].nunique() < 2:  # one scale: 100 % by definition
            single.append(f"{group or 'the study'} ({gpus_text(rows['world_size'].iloc[0])})")
        elif not firsts:
            low = rows.loc[rows["efficiency"].idxmin()]
            base = int(rows.loc[rows["baseline"].astype(bool), "world_size"].iloc[0])
            own = f", against its own baseline at {gpus_text(base)}" if base > smallest else ""
            fine.append(f"{group + ': ' if group else ''}up to "
                        f"{gpus_text(rows['world_size'].max())}, lowest "
                        f"{low['efficiency']:.1%} at {gpus_text(low['world_size'])}{own}")
    clauses = [f"falls below {named} at {gpus_text(p)} ({n} × {r}): {_list(items)}"
               for (named, p, n, r), items in sorted(cross.items(), key=lambda c: c[0][1])]
    if fine:
        clauses.append(f"stays at or above {LEVELS[0]:.0%} in {_names(fine)}")
    out = [f"Efficiency {_names(clauses)}."] if clauses else []
    if single:
        out.append(f"One scale only, so no efficiency to speak of (compare them by "
                   f"throughput): {_names(single)}.")
    return out


def oversubscribed_findings(table: pd.DataFrame) -> list[str]:
    """Which points put more ranks on a host than it has cores, and what that does."""
    if "host_cores" not in table.columns:
        return []
    over = table[table["flags"].fillna("").str.contains("oversubscribed")]
    if over.empty:
        return []
    shapes = over.drop_duplicates(["world_size", "nodes", "ranks_per_node"])
    where = [f"{gpus_text(r['world_size'])} ({int(r['nodes'])} × {int(r['ranks_per_node'])}): "
             f"{int(r['ranks_per_host'])} ranks on {int(r['host_cores'])} cores"
             for _, r in shapes.iterrows()]
    return [f"Oversubscribed (flag `oversubscribed`, {len(over)} of {len(table)} points): "
            f"{_names(where)}. Ranks there share cores, so compute slows and efficiency "
            "understates how communication scales; compare scales up to the core count."]


def contrast(found: list[Loss]) -> list[Loss]:
    """The groups findings explain: the headline's (least efficient at the largest
    scale) and, when there is another, the most efficient there."""
    worst = headline_loss(found)
    if worst is None:
        return []
    same = [x for x in found if float(x.top["world_size"]) == float(worst.top["world_size"])]
    return [worst] + ([same[-1]] if same[-1] is not worst else [])


def breakdown_findings(found: list[Loss]) -> list[str]:
    """Compute slowdown and unhidden sync at the largest scale for the most efficient
    group there (the headline already explains the least efficient one)."""
    pair = contrast(found)
    if len(pair) < 2 or pair[1].overhead != pair[1].overhead:
        return []
    best = pair[1]
    slow = f"{compute_clause(best)}, " if best.slowdown == best.slowdown else ""
    return [f"Where the step time goes in the most efficient group at "
            f"{gpus_text(best.top['world_size'])}, {best.group} ({best.top['efficiency']:.1%}"
            f"{', best of ' + str(len(found)) + ' groups' if len(found) > 2 else ''}): "
            f"{slow}{sync_clause(best)}."]


def bound_findings(bounds: pd.DataFrame | None, found: list[Loss]) -> list[str]:
    """The ring allreduce bound (the bandwidth part of sync) against the measured
    efficiency and the sync not hidden behind compute (what comm overhead measures)."""
    if bounds is None or bounds.empty:
        return []
    loss = {x.group: x for x in contrast(found)} or {x.group: x for x in found}
    clauses, parts = [], []
    for b in bounds[bounds["group"].isin(list(loss))].itertuples(index=False):
        text = (f"{b.group + ' at ' if b.group else 'at '}{gpus_text(b.world_size)}: "
                f"{_sec(b.ring_time_s)} per step for {b.grad_bytes / 1e6:,.1f} MB at the "
                f"probe's {b.probe_busbw_GBps:.3g} GB/s, allowing {b.efficiency_bound:.1%} "
                f"efficiency (measured {b.efficiency_measured:.1%})")
        x = loss.get(b.group)
        sync = x.sync_s if x is not None and x.overhead == x.overhead else math.nan
        if x is not None and sync == sync and sync > 0:  # x is None: sync is NaN
            part = b.ring_time_s / sync
            parts.append(part)
            text += (f", {part:.0%} of the {_sec(sync)} of sync not hidden ("
                     f"{x.overhead:.1%} comm overhead beside {_sec(x.top['compute_time_s'])} of"
                     " compute)")
        else:
            parts.append(math.nan if b.efficiency_measured <= b.efficiency_bound else 2.0)
        clauses.append(text)
    known = [v for v in parts if v == v]
    verdict = ("the allreduce's bandwidth is not what limits: most of the sync not hidden is"
               " latency and ranks waiting for each other" if known and max(known) < 0.5
               else "the allreduce takes longer than the sync that shows: DDP overlaps it with"
               " the backward pass" if known and min(known) >= 1 else "")
    more = (f"; the least and the most efficient of {len(bounds)} groups, all in its table"
            if len(bounds) > len(clauses) else "")
    return [f"Ring allreduce bound (bandwidth only, no overlap{more}): {_names(clauses)}"
            + (f"; so {verdict}." if verdict else ".")] if clauses else []


def batch_findings(table: pd.DataFrame, scaling: str) -> list[str]:
    """Weak scaling with a batch sweep: does the largest per-GPU batch beat the smallest
    at the largest world size measured with both?"""
    if scaling != "weak" or table["batch_size"].nunique() < 2:
        return []
    rest = table["group"].str.replace(r"\s*batch \S+$", "", regex=True)
    clauses = []
    for key, rows in table.assign(_rest=rest).groupby("_rest", sort=False):
        both = rows.groupby("world_size").filter(lambda r: r["batch_size"].nunique() > 1)
        if both.empty:
            continue
        at = both[both["world_size"] == both["world_size"].max()]
        small = at.loc[at["batch_size"].idxmin()]
        large = at.loc[at["batch_size"].idxmax()]
        gain = large["throughput_per_gpu"] / small["throughput_per_gpu"] - 1
        verdict = "helps" if gain > TOLERANCE else ("hurts" if gain < -TOLERANCE
                                                    else "makes no difference")
        clauses.append(
            f"{key + ': ' if key else ''}at {gpus_text(small['world_size'])}, per-GPU batch "
            f"{format_value(large['batch_size'])} (global {format_value(large['global_batch'])}"
            f") gives {_img(large['throughput_per_gpu'])} {unit_of(table)} per GPU vs "
            f"{_img(small['throughput_per_gpu'])} at batch {format_value(small['batch_size'])}"
            f" (global {format_value(small['global_batch'])}), {gain:+.1%}: the larger batch "
            f"{verdict} (efficiency, each against its own baseline: {large['efficiency']:.1%}"
            f" vs {small['efficiency']:.1%})")
    return [f"Per-GPU batch: {_names(clauses)}."] if clauses else []


def model_findings(fits: pd.DataFrame, found: list[Loss]) -> list[str]:
    """The model's fit, where it disagrees with the measured overhead, and whether it
    predicts (or why its predictions are withheld)."""
    if fits.empty:
        return []
    fitted = fits[fits["status"] == "fitted"]
    within = [f"{f.group} with {f.rms_residual:.1%}" for f in fitted.itertuples()]
    text = ("The model fits no group" if not within else f"The model fits {_list(within)} rms"
            if len(within) <= 2 else f"The model fits {len(within)} groups with "
            f"{_span(fitted['rms_residual'])} rms") + (" residual" if within else "")
    off = [x for x in found if x.model_share == x.model_share and x.overhead == x.overhead
           and x.model_share - x.overhead > 0.1]
    if off:
        text += (f", but attributes {_span([x.model_share for x in off])} of the step at the "
                 f"largest scale to communication where {_span([x.overhead for x in off])} "
                 f"is measured{' (' + off[0].group + ')' if len(off) == 1 else ''}: the model"
                 " counts all that grows with the GPUs as communication (compute slowing "
                 "down included) and cannot see overlap; the measured share is the one to "
                 "trust")
    why = list(dict.fromkeys(str(w) for w in fits["withheld"].fillna("") if w))
    shown = [str(g) for g, w in zip(fits["group"], fits["withheld"].fillna(""), strict=True)
             if not w]
    if shown:
        text += f". Predictions for {_list(shown)}" + (
            f"; none for the other groups ({'; '.join(why)})" if why else "")
    else:
        text += f". Predictions: none, because {'; '.join(why[:SHOWN])}"
    return [text + "."]


def lr_findings(table: pd.DataFrame, scaling: str) -> list[str]:
    """The learning-rate scaling each group's growth of the global batch calls for (in
    strong scaling the global batch is fixed per group: none, and no advice across
    groups), and the rule the runs followed when they record their lr."""
    if scaling == "strong":
        return ["Strong scaling keeps each group's global batch fixed, so the learning rate"
                " needs no rescaling as GPUs are added (and none is advised across groups)."]
    by_k: dict[float, list[str]] = {}
    used: dict[str, list[str]] = {}
    for group, rows in table.groupby("group", sort=False):
        first, last = rows.loc[rows["world_size"].idxmin()], rows.loc[rows["world_size"].idxmax()]
        k = float(last["global_batch"]) / float(first["global_batch"])
        if k > 1:
            by_k.setdefault(k, []).append(f"{group}: {format_value(first['global_batch'])} → "
                                          f"{format_value(last['global_batch'])}")
        if k > 1 and "lr" in rows and rows["lr"].notna().all():
            ratio = float(last["lr"]) / float(first["lr"])
            rule = next((n for n, v in (("linear", k), ("square-root", math.sqrt(k)),
                                        ("no", 1.0)) if math.isclose(ratio, v, rel_tol=0.02)),
                        "a custom")
            used.setdefault(f"{rule} scaling ({ratio:.3g}×: lr {float(first['lr']):.4g} → "
                            f"{float(last['lr']):.4g}, warm-up "
                            f"{format_value(last.get('lr_warmup_iters'))} iterations)",
                            []).append(str(group))
    out = []
    for k, where in by_k.items():
        warm = ("a gradual warm-up over the first epochs (Goyal et al. used 5 epochs at a "
                "global batch of 8,192)" if k >= 8 else "a short warm-up")
        which = ("each group" if len(by_k) == 1 else "these groups") + (
            f" ({_names(where)})" if len(where) <= 2 else f" ({len(where)} groups)")
        out.append(f"Learning rate: the global batch grows {k:g}× within {which}: linear "
                   f"scaling multiplies the learning rate by {k:g}, square-root scaling by "
                   f"{math.sqrt(k):.2f}; use {warm}")
    if used:
        out[-1] += "; the runs used " + "; ".join(
            f"{rule}{' in ' + ', '.join(g) if len(used) > 1 else ''}" for rule, g in used.items())
    return [f"{'. '.join(out)}."] if out else []


def run_findings(runs: pd.DataFrame, table: pd.DataFrame, skip: str = "") -> list[str]:
    """Failed runs and flagged points, in one finding (the flag `skip` has its own)."""
    out = []
    if "state" in runs.columns and (failed := int((runs["state"] == "failed").sum())):
        out.append(f"{failed} of {len(runs)} runs failed: see Failed runs for why")
    flags = table["flags"].fillna("") if "flags" in table.columns else pd.Series(dtype=str)
    codes = pd.Series([c for f in flags for c in f.split(",") if c and c != skip],
                      dtype=object).value_counts()
    flagged = sum(any(c and c != skip for c in str(f).split(",")) for f in flags)
    if flagged:
        detail = ", ".join(f"{c}: {n}" for c, n in codes.items())
        out.append(f"{flagged} of {len(table)} points carry quality flags ({detail}); "
                   "they are kept in the medians, see Quality flags")
    return [f"{'; '.join(out)}."] if out else []


def findings(table: pd.DataFrame, runs: pd.DataFrame, scaling: str, fits: pd.DataFrame,
             points: pd.DataFrame, bounds: pd.DataFrame | None = None,
             found: list[Loss] | None = None, outcomes: list[Outcome] | None = None
             ) -> Findings:
    """The findings after the headline, most important first, at most MAX_FINDINGS
    shown; the breakdown of the headline's group is not repeated (`found`, `outcomes`:
    the losses and variant outcomes, when already computed)."""
    if table.empty:
        return Findings(run_findings(runs, table))
    found = losses(table, points, fits) if found is None else found
    over = oversubscribed_findings(table)
    out = [*efficiency_findings(table), *run_findings(runs, table, "oversubscribed" if over
                                                        else ""), *over,
           *breakdown_findings(found),
           *bound_findings(bounds, found), *variant_findings(table, scaling, outcomes),
           *batch_findings(table, scaling), *model_findings(fits, found),
           *lr_findings(table, scaling)]
    return Findings(out[:MAX_FINDINGS], out[MAX_FINDINGS:])
