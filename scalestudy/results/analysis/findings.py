"""Findings: at most eight sentences computed from the report, after its headline.

Each says one thing once (the headline, `summary.headline`, is not repeated) and quotes
numbers the report's tables show in the tables' own formats. Where a rule keeps a
number out (comm overhead at one rank, predictions that do not qualify), it says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.commmodel import GOOD_EFFICIENCY, Loss, losses
from scalestudy.results.analysis.efficiency import format_value, unit_of
from scalestudy.results.analysis.inputs import input_findings
from scalestudy.results.analysis.noisescale import noise_findings
from scalestudy.results.analysis.phrases import (
    SHOWN,
    gpus_text,
    img_text,
    list_text,
    names_text,
    sec_text,
    span_text,
)
from scalestudy.results.analysis.variants import TOLERANCE, Outcome, variant_findings

#: Efficiency levels the findings report crossings of.
LEVELS: tuple[float, ...] = (GOOD_EFFICIENCY, 0.75)
#: The most findings the report lists after the headline (the rest go to summary.json).
MAX_FINDINGS = 8


@dataclass(frozen=True)
class Findings:
    """The findings shown (at most MAX_FINDINGS) and those over the limit."""

    items: list[str]
    more: list[str] = field(default_factory=list)

    @property
    def all(self) -> list[str]:
        """Every finding, shown or not (summary.json keeps them all)."""
        return [*self.items, *self.more]


def headline_loss(found: list[Loss]) -> Loss | None:
    """The group the headline explains: the least efficient at the largest scale."""
    if not found:
        return None
    top = max(float(x.top[col.WORLD_SIZE]) for x in found)
    return next(x for x in found if float(x.top[col.WORLD_SIZE]) == top)


def compute_clause(loss: Loss) -> str:
    """How much slower compute alone is per image (or sequence) at the top than at the
    baseline."""
    top, base = loss.top, loss.base
    hosts = (f"; {int(top['ranks_per_host'])} ranks on {int(top['host_cores'])} cores"
             if loss.oversubscribed else "")
    sample = "sequence" if str(top.get(col.THROUGHPUT_UNIT)) == "tokens/s" else "image"
    return (f"compute alone (no gradient sync) takes {loss.slowdown:.2f}× as long per {sample} "
            f"as at {gpus_text(base['world_size'])} ({sec_text(top['compute_time_s'])} vs "
            f"{sec_text(base['compute_time_s'])} per step{hosts})")


def sync_clause(loss: Loss) -> str:
    """The measured comm overhead at the top: sync not hidden behind compute."""
    return (f"gradient sync not hidden behind compute adds {loss.overhead:.1%} of the step "
            "(measured comm overhead)")


def efficiency_findings(table: pd.DataFrame) -> list[str]:
    """Where each group first drops below 90 % and 75 % efficiency, or that none does;
    groups that cross at the same point share a clause."""
    cross: dict[tuple[str, int, int, int], list[str]] = {}
    fine: list[str] = []
    single: list[str] = []
    smallest = int(table[col.WORLD_SIZE].min())
    for group, rows in table.groupby("group", sort=False):
        rows = rows.sort_values("world_size")
        firsts: dict[int, list[float]] = {}  # row -> the levels it is the first below
        for level in LEVELS:
            below = rows[rows[col.EFFICIENCY] < level]
            if len(below):
                firsts.setdefault(below.index[0], []).append(level)
        for index, levels in firsts.items():
            r = rows.loc[index]
            key = (" and ".join(f"{level:.0%}" for level in levels), int(r[col.WORLD_SIZE]),
                   int(r[col.NODES]), int(r[col.RANKS_PER_NODE]))
            gb = f"global batch {format_value(r['global_batch'])}"
            base = int(rows.loc[rows[col.BASELINE].astype(bool), "world_size"].iloc[0])
            own = f", against its own baseline at {gpus_text(base)}" if base > smallest else ""
            cross.setdefault(key, []).append(
                f"{r['efficiency']:.1%} in {group}" + (f" ({gb}{own})" if gb not in group
                                                       else (f" ({own[2:]})" if own else "")))
        if rows[col.WORLD_SIZE].nunique() < 2:  # one scale: 100 % by definition
            single.append(f"{group or 'the study'} ({gpus_text(rows['world_size'].iloc[0])})")
        elif not firsts:
            low = rows.loc[rows[col.EFFICIENCY].idxmin()]
            base = int(rows.loc[rows[col.BASELINE].astype(bool), "world_size"].iloc[0])
            own = f", against its own baseline at {gpus_text(base)}" if base > smallest else ""
            fine.append(f"{group + ': ' if group else ''}up to "
                        f"{gpus_text(rows['world_size'].max())}, lowest "
                        f"{low['efficiency']:.1%} at {gpus_text(low['world_size'])}{own}")
    clauses = [f"falls below {named} at {gpus_text(p)} ({n} × {r}): {list_text(items)}"
               for (named, p, n, r), items in sorted(cross.items(), key=lambda c: c[0][1])]
    if fine:
        clauses.append(f"stays at or above {LEVELS[0]:.0%} in {names_text(fine)}")
    out = [f"Efficiency {names_text(clauses)}."] if clauses else []
    if single:
        out.append(f"One scale only, so no efficiency to speak of (compare them by "
                   f"throughput): {names_text(single)}.")
    return out


def oversubscribed_findings(table: pd.DataFrame) -> list[str]:
    """Which points put more ranks on a host than it has cores, and what that does."""
    if "host_cores" not in table.columns:
        return []
    over = table[table[col.FLAGS].fillna("").str.contains("oversubscribed")]
    if over.empty:
        return []
    shapes = over.drop_duplicates(["world_size", "nodes", "ranks_per_node"])
    where = [f"{gpus_text(r['world_size'])} ({int(r['nodes'])} × {int(r['ranks_per_node'])}): "
             f"{int(r['ranks_per_host'])} ranks on {int(r['host_cores'])} cores"
             for _, r in shapes.iterrows()]
    return [f"Oversubscribed (flag `oversubscribed`, {len(over)} of {len(table)} points): "
            f"{names_text(where)}. Ranks there share cores, so compute slows and efficiency "
            "understates how communication scales; compare scales up to the core count."]


def contrast(found: list[Loss]) -> list[Loss]:
    """The groups findings explain: the headline's (least efficient at the largest
    scale) and, when there is another, the most efficient there."""
    worst = headline_loss(found)
    if worst is None:
        return []
    same = [x for x in found if float(x.top[col.WORLD_SIZE]) == float(worst.top[col.WORLD_SIZE])]
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
    for b in bounds[bounds[col.GROUP].isin(list(loss))].itertuples(index=False):
        text = (f"{b.group + ' at ' if b.group else 'at '}{gpus_text(b.world_size)}: "
                f"{sec_text(b.ring_time_s)} per step for {b.grad_bytes / 1e6:,.1f} MB at the "
                f"probe's {b.probe_busbw_GBps:.3g} GB/s, allowing {b.efficiency_bound:.1%} "
                f"efficiency (measured {b.efficiency_measured:.1%})")
        x = loss.get(b.group)
        sync = x.sync_s if x is not None and x.overhead == x.overhead else math.nan
        if x is not None and sync == sync and sync > 0:  # x is None: sync is NaN
            part = b.ring_time_s / sync
            parts.append(part)
            text += (f", {part:.0%} of the {sec_text(sync)} of sync not hidden ("
                     f"{x.overhead:.1%} comm overhead beside {sec_text(x.top['compute_time_s'])} of"
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
    return [f"Ring allreduce bound (bandwidth only, no overlap{more}): {names_text(clauses)}"
            + (f"; so {verdict}." if verdict else ".")] if clauses else []


def batch_findings(table: pd.DataFrame, scaling: str) -> list[str]:
    """Weak scaling with a batch sweep: does the largest per-GPU batch beat the smallest
    at the largest world size measured with both?"""
    if scaling != "weak" or table[col.BATCH_SIZE].nunique() < 2:
        return []
    rest = table[col.GROUP].str.replace(r"\s*batch \S+$", "", regex=True)
    clauses = []
    for key, rows in table.assign(_rest=rest).groupby("_rest", sort=False):
        both = rows.groupby("world_size").filter(lambda r: r[col.BATCH_SIZE].nunique() > 1)
        if both.empty:
            continue
        at = both[both[col.WORLD_SIZE] == both[col.WORLD_SIZE].max()]
        small = at.loc[at[col.BATCH_SIZE].idxmin()]
        large = at.loc[at[col.BATCH_SIZE].idxmax()]
        gain = large[col.THROUGHPUT_PER_GPU] / small[col.THROUGHPUT_PER_GPU] - 1
        verdict = "helps" if gain > TOLERANCE else ("hurts" if gain < -TOLERANCE
                                                    else "makes no difference")
        clauses.append(
            f"{key + ': ' if key else ''}at {gpus_text(small['world_size'])}, per-GPU batch "
            f"{format_value(large['batch_size'])} (global {format_value(large['global_batch'])}"
            f") gives {img_text(large['throughput_per_gpu'])} {unit_of(table)} per GPU vs "
            f"{img_text(small['throughput_per_gpu'])} at batch {format_value(small['batch_size'])}"
            f" (global {format_value(small['global_batch'])}), {gain:+.1%}: the larger batch "
            f"{verdict} (efficiency, each against its own baseline: {large['efficiency']:.1%}"
            f" vs {small['efficiency']:.1%})")
    return [f"Per-GPU batch: {names_text(clauses)}."] if clauses else []


def model_findings(fits: pd.DataFrame, found: list[Loss]) -> list[str]:
    """The model's fit, where it disagrees with the measured overhead, and whether it
    predicts (or why its predictions are withheld)."""
    if fits.empty:
        return []
    fitted = fits[fits["status"] == "fitted"]
    within = [f"{f.group} with {f.rms_residual:.1%}" for f in fitted.itertuples()]
    text = ("The model fits no group" if not within else f"The model fits {list_text(within)} rms"
            if len(within) <= 2 else f"The model fits {len(within)} groups with "
            f"{span_text(fitted['rms_residual'])} rms") + (" residual" if within else "")
    off = [x for x in found if x.model_share == x.model_share and x.overhead == x.overhead
           and x.model_share - x.overhead > 0.1]
    if off:
        text += (f", but attributes {span_text([x.model_share for x in off])} of the step at the "
                 f"largest scale to communication where {span_text([x.overhead for x in off])} "
                 f"is measured{' (' + off[0].group + ')' if len(off) == 1 else ''}: the model"
                 " counts all that grows with the GPUs as communication (compute slowing "
                 "down included) and cannot see overlap; the measured share is the one to "
                 "trust")
    why = list(dict.fromkeys(str(w) for w in fits["withheld"].fillna("") if w))
    shown = [str(g) for g, w in zip(fits[col.GROUP], fits["withheld"].fillna(""), strict=True)
             if not w]
    if shown:
        text += f". Predictions for {list_text(shown)}" + (
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
        sizes = rows[col.WORLD_SIZE]
        first, last = rows.loc[sizes.idxmin()], rows.loc[sizes.idxmax()]
        k = float(last[col.GLOBAL_BATCH]) / float(first[col.GLOBAL_BATCH])
        if k > 1:
            by_k.setdefault(k, []).append(f"{group}: {format_value(first['global_batch'])} → "
                                          f"{format_value(last['global_batch'])}")
        if k > 1 and "lr" in rows and rows[col.LR].notna().all():
            ratio = float(last[col.LR]) / float(first[col.LR])
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
            f" ({names_text(where)})" if len(where) <= 2 else f" ({len(where)} groups)")
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
    if col.STATE in runs.columns and (failed := int((runs[col.STATE] == "failed").sum())):
        out.append(f"{failed} of {len(runs)} runs failed: see Failed runs for why")
    flags = table[col.FLAGS].fillna("") if col.FLAGS in table.columns else pd.Series(dtype=str)
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
    out = [*efficiency_findings(table), *input_findings(table),
           *noise_findings(table, runs, scaling),
           *run_findings(runs, table, "oversubscribed" if over else ""), *over,
           *breakdown_findings(found),
           *bound_findings(bounds, found), *variant_findings(table, scaling, outcomes),
           *batch_findings(table, scaling), *model_findings(fits, found),
           *lr_findings(table, scaling)]
    return Findings(out[:MAX_FINDINGS], out[MAX_FINDINGS:])
