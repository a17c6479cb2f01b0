"""Adaptive studies: which points of a grid to measure next and which never to measure,
decided from the points measured so far (pure; study.adaptive runs the rounds).

A point is one alternative (everything a grid varies but the node count: batch, backend,
tuning, layout, ...) at one node count, with all its repeats. The rule, in rounds:

1. First, every alternative at its two smallest node counts: one scale says nothing of
   how an alternative scales, two say it for each one-term communication model.
2. An alternative goes (successive halving, the cut set by the evidence rather than a
   fixed half) when another one beats it beyond the noise at every node count both
   have: at the measured ones, and at the others under each one-term model fitted to
   both (a bandwidth term, a log2 P latency, a latency growing with every rank): the
   alternatives share one machine, so they are compared under the same model.
3. A point of a surviving alternative is not measured when the front of time against
   node-hours could not change by it: a measured point on fewer nodes is at least as
   fast as its best case (it would be slower and dearer), or another surviving
   alternative beats it at its own node count beyond the noise under every model.
4. Each rung is the smallest node count still open, for every surviving alternative
   that has it open, so the scales double from rung to rung and an alternative never
   runs ahead of the evidence on the others. Within a rung the repeats come one round
   at a time, and after each the worse half of its points stops (adaptive_rung). It
   stops when no point is open (the front is known within the noise) or when the next
   run would overrun the budget.

With a target, every comparison is of the rate to the target (adaptive_target): the
time and node-hours to a trained model, not per sample.

"Beyond the noise": the 95 % bands do not overlap. A measured point's band is its
median · exp(±Z·σ/√repeats), σ the relative spread of the repeats pooled over every
measured point (ASSUMED_NOISE while no point has two repeats); a model's band comes
from DRAWS refits to the medians moved by that noise (seeded: the same data decide the
same), widened by forecast.SPREAD_PER_DOUBLING for each doubling beyond the largest
measured node count.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from scalestudy.core.grid import Run
from scalestudy.results.analysis.adaptive_bands import (
    ASSUMED_NOISE as ASSUMED_NOISE,  # the rule's figures, where its callers look for them
)
from scalestudy.results.analysis.adaptive_bands import (
    Band,
    measured_band,
    noise_of,
    projections,
)
from scalestudy.results.analysis.adaptive_rung import halve
from scalestudy.results.analysis.adaptive_target import Objective

#: The run fields an alternative may differ in (with the grid's option axes).
ALTERNATIVE_FIELDS = ("ranks_per_node", "batch_size", "global_batch", "backend", "tuning",
                      "precision")
RULE = (
    "First every alternative (batch, backend, tuning, layout) at its two smallest node "
    "counts. Then, round by round, an alternative goes when another beats it beyond the "
    "noise at every node count both have (measured, or under each one-term communication "
    "model fitted to both), and a point is left unmeasured when a measured point on fewer "
    "nodes is at least as fast as its best case, or another alternative beats it there "
    "beyond the noise; each rung is the smallest node count still open, for every "
    "surviving alternative, its repeats one round at a time, the worse half stopping "
    "after each (a tie never). With a target, time and node-hours are to the target. "
    "It stops when no point is open (the front of time against "
    "node-hours is known within the noise) or when the next point would overrun --budget.")


@dataclass(frozen=True)
class Point:
    """One alternative at one node count: its runs (the repeats) and what they cost."""

    alternative: str
    nodes: int
    replicas: int  # the data-parallel replicas the gradient allreduce spans
    per_gpu_batch: float
    global_batch: float
    runs: tuple[str, ...]
    node_hours: float  # nodes x walltime, over the repeats: the most they can use

    @property
    def key(self) -> tuple[str, int]:
        return self.alternative, self.nodes

    def name(self) -> str:
        return f"{self.alternative} on {self.nodes} node(s)"


@dataclass(frozen=True)
class Verdict:
    """An alternative dropped (nodes None) or one point left unmeasured, and why."""

    alternative: str
    nodes: int | None
    evidence: str
    repeats: int | None = None  # a point halved within its rung: the repeats it had

    @property
    def key(self) -> tuple[str, int | None]:
        return self.alternative, self.nodes

    def as_dict(self) -> dict[str, object]:
        return {"alternative": self.alternative, "nodes": self.nodes,
                "evidence": self.evidence}


@dataclass(frozen=True)
class Decision:
    """The next round (no points: stop, `why` says why): its points and the runs it
    starts (one repeat each), what it newly decides not to measure, the points whose
    repeats it stops (halved), and the objective it compared by."""

    points: tuple[Point, ...]
    dropped: tuple[Verdict, ...]
    skipped: tuple[Verdict, ...]
    noise: float
    noise_source: str
    why: str
    runs: tuple[str, ...] = ()
    halved: tuple[Verdict, ...] = ()
    objective: str = ""
    notes: tuple[str, ...] = ()


def points_of(runs: Sequence[Run], scaling: str, walltime_s: float) -> list[Point]:
    """The grid's points (alternative x node count), in the grid's order."""
    varying = _varying(runs, scaling)
    grouped: dict[tuple[str, int], list[Run]] = {}
    for run in runs:
        grouped.setdefault((alternative(run, varying), run.nodes), []).append(run)
    return [Point(alternative=alt, nodes=nodes, replicas=int(rs[0].dp or rs[0].world_size),
                  per_gpu_batch=float(rs[0].batch_size), global_batch=float(rs[0].global_batch),
                  runs=tuple(r.run_id for r in rs),
                  node_hours=nodes * len(rs) * walltime_s / 3600)
            for (alt, nodes), rs in grouped.items()]


def _varying(runs: Sequence[Run], scaling: str) -> list[str]:
    """The fields (and option axes) that differ between runs other than by node count:
    what tells alternatives apart. Weak scaling holds the per-GPU batch, strong the
    global one: the other follows from the node count."""
    held = "global_batch" if scaling == "weak" else "batch_size"
    values: dict[str, set[str]] = {}
    for run in runs:
        for name, value in [*((f, getattr(run, f)) for f in ALTERNATIVE_FIELDS), *run.axes]:
            if name != held:
                values.setdefault(name, set()).add(str(value))
    return [name for name, seen in values.items() if len(seen) > 1]


def alternative(run: Run, varying: Sequence[str]) -> str:
    """The run's alternative as words: `batch_size 128, tuning fp16-wire`."""
    axes = dict(run.axes)
    parts = [f"{name} {getattr(run, name) if hasattr(run, name) else axes.get(name)}"
             for name in varying]
    return ", ".join(parts) or "the study"


def decide(points: Sequence[Point], measured: Mapping[tuple[str, int], Sequence[float]],
           failed: set[tuple[str, int]], dropped: Mapping[str, str],
           skipped: Mapping[tuple[str, int], str], budget_left: float | None = None,
           ended: Collection[str] | None = None, objective: Objective | None = None
           ) -> Decision:
    """The next round from what was measured (throughputs per point key), what failed
    for good, and what earlier rounds dropped and skipped (kept: never undone; a point
    halved is skipped). `ended`: the runs that completed or failed (None: a point has
    run as many repeats as it has throughputs); `objective`: throughput without it."""
    goal = objective or Objective()
    sigma, source = noise_of(measured)
    by_alt: dict[str, list[Point]] = {}
    for point in points:
        by_alt.setdefault(point.alternative, []).append(point)
    for alt_points in by_alt.values():
        alt_points.sort(key=lambda q: q.nodes)

    def tried(q: Point) -> int:
        if ended is None:
            return len(measured.get(q.key, ()))
        return sum(1 for r in q.runs if r in ended)

    live = [a for a in by_alt if a not in dropped]
    bands = {a: _scaled(_bands(by_alt[a], measured, failed, sigma), a, goal) for a in live}
    new_dropped = _drop(live, by_alt, bands, measured, goal)
    live = [a for a in live if a not in {v.alternative for v in new_dropped}]
    gone = set(skipped) | set(failed)  # never to be measured
    closed = gone | {q.key for q in points if tried(q) >= len(q.runs)}
    new_skipped = _skip(live, by_alt, bands, measured, closed, gone, sigma, goal)
    closed |= {(v.alternative, int(v.nodes or 0)) for v in new_skipped}
    chosen: list[Point] = []
    later: list[Point] = []  # open points beyond the first rung's
    for a in live:
        open_points = [q for q in by_alt[a] if q.key not in closed]
        first = 2 - sum(1 for q in by_alt[a] if tried(q) or measured.get(q.key))
        chosen += [q for q in open_points if tried(q)]  # their repeats go on
        fresh = [q for q in open_points if not tried(q)]
        chosen += fresh[:first] if first > 0 else []
        later += fresh[max(first, 0):]
    if not chosen and later:  # the next rung: every surviving alternative's at once
        rung = min(q.nodes for q in later)
        chosen = [q for q in later if q.nodes == rung]
    chosen, halved = _halve(chosen, measured, tried, sigma, goal)
    alone = {n for n in (q.nodes for q in chosen) if sum(q.nodes == n for q in chosen) == 1}
    runs = {q.key: _next_runs(q, ended, tried(q), q.nodes in alone) for q in chosen}
    why = "every point is measured or left out by the evidence: the front is known " \
          "within the noise"
    if budget_left is not None and chosen:
        kept, spend = [], 0.0
        for q in sorted(chosen, key=lambda q: q.node_hours / len(q.runs)):
            each = q.node_hours / len(q.runs)
            runs[q.key] = runs[q.key][:max(1, int((budget_left - spend) / each + 1e-9))]
            if spend + each * len(runs[q.key]) <= budget_left + 1e-9:
                kept.append(q)
                spend += each * len(runs[q.key])
        if not kept:
            why = (f"the budget: {budget_left:,.2f} node-hour(s) left, the next run "
                   f"needs {min(q.node_hours / len(q.runs) for q in chosen):,.2f}")
        chosen = [q for q in chosen if q in kept]  # what fits, the cheapest first
    return Decision(tuple(chosen), tuple(new_dropped), tuple(new_skipped), sigma, source,
                    "" if chosen else why, tuple(r for q in chosen for r in runs[q.key]),
                    tuple(halved), goal.words, goal.notes)


def _next_runs(q: Point, ended: Collection[str] | None, done: int, rest: bool
               ) -> tuple[str, ...]:
    """The point's next repeat (the first of its runs that has not ended), or with
    `rest` every repeat left: the only point of its rung has no one to be halved
    against, so its repeats need not wait for each other."""
    left = q.runs[done:] if ended is None else tuple(r for r in q.runs if r not in ended)
    return left if rest else left[:1]


def _halve(chosen: list[Point], measured: Mapping[tuple[str, int], Sequence[float]],
           tried: Callable[[Point], int], sigma: float, goal: Objective
           ) -> tuple[list[Point], list[Verdict]]:
    """The chosen points that get a repeat this round: per node count, the ones with the
    fewest repeats; when all have as many (one or more), the better half of them
    (adaptive_rung) and the verdicts on the others."""
    out: list[Point] = []  # in the order chosen
    halved: list[Verdict] = []
    for n in sorted({q.nodes for q in chosen}):
        group = [q for q in chosen if q.nodes == n]
        least, most = min(map(tried, group)), max(map(tried, group))
        if least == 0 or least != most:
            out += [q for q in group if tried(q) == least]
            continue
        bands = {}
        for q in group:
            if measured.get(q.key):
                b = measured_band(measured[q.key], sigma)
                bands[q.key] = goal.scale(q.key, b.low, b.mid, b.high)
        keep, stopped = halve([q.key for q in group], bands,
                              {q.key: goal.unit(q.key) for q in group}, least, goal.text)
        out += [q for q in group if q.key in set(keep)]
        halved += [Verdict(key[0], key[1], why, least) for key, why in stopped]
    return [q for q in chosen if q in out], halved


def _scaled(bands: dict[str, dict[int, Band]], alt: str, goal: Objective
            ) -> dict[str, dict[int, Band]]:
    """An alternative's throughput bands as bands of the objective (to the target where
    the target gives the point's samples)."""
    if not goal.factors:
        return bands
    return {m: {n: Band(*goal.scale((alt, n), b.low, b.mid, b.high),
                         per=goal.unit((alt, n))) for n, b in per.items()}
            for m, per in bands.items()}


def _bands(mine: Sequence[Point], measured: Mapping[tuple[str, int], Sequence[float]],
           failed: set[tuple[str, int]], sigma: float) -> dict[str, dict[int, Band]]:
    """An alternative's bands per model and node count: measured points' own band under
    every model, the others projected."""
    asked = [q for q in mine if not measured.get(q.key) and q.key not in failed]
    seed = sum(ord(c) for c in mine[0].alternative) if mine else 0
    projected = projections(mine, measured, asked, sigma, seed)
    own = {q.nodes: measured_band(measured[q.key], sigma) for q in mine
           if measured.get(q.key)}
    if not projected:
        return {"measured": own}
    return {name: {**own, **per} for name, per in projected.items()}


def _beats(best: dict[str, dict[int, Band]], other: dict[str, dict[int, Band]],
           nodes: int) -> bool:
    """`best` is faster than `other` at `nodes` beyond the noise under every model both
    have (a measured point counts under every model)."""
    models = [m for m in best if m in other and nodes in best[m] and nodes in other[m]]
    if not models:
        return False
    return all(best[m][nodes].low > other[m][nodes].high
               and best[m][nodes].per == other[m][nodes].per for m in models)


def _drop(live: list[str], by_alt: Mapping[str, list[Point]],
          bands: Mapping[str, dict[str, dict[int, Band]]],
          measured: Mapping[tuple[str, int], Sequence[float]], goal: Objective
          ) -> list[Verdict]:
    """The alternatives another one beats beyond the noise at every node count both have
    (the beaten judged against the strongest first)."""
    def strength(a: str) -> float:
        done = [q for q in by_alt[a] if measured.get(q.key)]
        if not done:
            return 0.0
        mid = float(np.median(measured[done[-1].key]))
        return goal.scale(done[-1].key, mid, mid, mid)[1] / done[-1].nodes

    out: list[Verdict] = []
    gone: set[str] = set()
    for a in sorted(live, key=strength):
        for b in sorted(live, key=strength, reverse=True):
            if b == a or b in gone or "measured" in bands[a] or "measured" in bands[b]:
                continue
            shared = sorted({q.nodes for q in by_alt[a]} & {q.nodes for q in by_alt[b]})
            if not shared or {q.nodes for q in by_alt[a]} - set(shared):
                continue
            if not any(measured.get((a, n)) and measured.get((b, n)) for n in shared):
                continue
            if all(_beats(bands[b], bands[a], n) for n in shared):
                out.append(Verdict(a, None, _drop_evidence(a, b, by_alt[a], bands,
                                                           measured, goal)))
                gone.add(a)
                break
    return out


def _drop_evidence(a: str, b: str, mine: Sequence[Point],
                   bands: Mapping[str, dict[str, dict[int, Band]]],
                   measured: Mapping[tuple[str, int], Sequence[float]], goal: Objective
                   ) -> str:
    done = [q.nodes for q in mine if measured.get(q.key)]
    model = next(iter(bands[a]))
    at = max(done)
    ours, theirs = bands[a][model][at], bands[b][model][at]
    top = max(q.nodes for q in mine)
    words = (f"{b} is faster beyond the noise at every node count: measured on {at} "
             f"node(s) {goal.text((b, at), theirs.mid)} against "
             f"{goal.text((a, at), ours.mid)} "
             f"({ours.mid / theirs.mid - 1:+.1%})")
    if top > at:
        worst = min(bands[b][m][top].low / bands[a][m][top].high for m in bands[a]
                    if m in bands[b])
        words += (f"; on {top} node(s), under every communication model, at least "
                  f"{worst - 1:.1%} faster")
    return words


def _skip(live: list[str], by_alt: Mapping[str, list[Point]],
          bands: Mapping[str, dict[str, dict[int, Band]]],
          measured: Mapping[tuple[str, int], Sequence[float]],
          closed: set[tuple[str, int]], gone: set[tuple[str, int]], sigma: float,
          goal: Objective) -> list[Verdict]:
    """The open points of the surviving alternatives that cannot change the front
    (`closed`: measured or never to be; `gone`: never to be)."""
    done = [(key, Band(*goal.scale(key, b.low, b.mid, b.high), per=goal.unit(key)))
            for key, b in ((k, measured_band(v, sigma)) for k, v in measured.items() if v)]
    out: list[Verdict] = []
    for a in live:
        for q in by_alt[a]:
            if q.key in closed:
                continue
            best = max((band[q.nodes].high for band in bands[a].values()
                        if q.nodes in band), default=math.inf)
            faster = [(key, band) for key, band in done if key[1] < q.nodes
                      and band.low >= best and band.per == goal.unit(q.key)]
            if faster:
                (alt, nodes), band = max(faster, key=lambda kb: kb[1].mid)
                out.append(Verdict(a, q.nodes, (
                    f"at best {goal.text(q.key, best)} (every communication model, the "
                    f"noise included), while {alt} on {nodes} node(s) measured "
                    f"{goal.text((alt, nodes), band.mid)}: "
                    "it would be slower on more nodes, so dearer too")))
                gone.add(q.key)
                continue
            rival = next((b for b in live if b != a and (b, q.nodes) not in gone
                          and "measured" not in bands[b] and "measured" not in bands[a]
                          and _beats(bands[b], bands[a], q.nodes)), None)
            if rival is not None:
                margin = min(bands[rival][m][q.nodes].low / bands[a][m][q.nodes].high
                             for m in bands[a] if m in bands[rival])
                out.append(Verdict(a, q.nodes, (
                    f"{rival} is faster there, by at least {margin - 1:.1%} under every "
                    "communication model (the noise included): it would be slower and no "
                    "cheaper")))
                gone.add(q.key)
    return out
