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
4. Each round is one rung: the smallest node count still open, measured for every
   surviving alternative that has it open, so the scales double from round to round
   and an alternative never runs ahead of the evidence on the others. It stops when no point is open
   (the front is known within the noise) or when the next point would overrun the
   budget.

"Beyond the noise": the 95 % bands do not overlap. A measured point's band is its
median · exp(±Z·σ/√repeats), σ the relative spread of the repeats pooled over every
measured point (ASSUMED_NOISE while no point has two repeats); a model's band comes
from DRAWS refits to the medians moved by that noise (seeded: the same data decide the
same), widened by forecast.SPREAD_PER_DOUBLING for each doubling beyond the largest
measured node count.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from scalestudy.core.grid import Run
from scalestudy.results.analysis.forecast import SPREAD_PER_DOUBLING

#: A measured point's band: median · exp(±Z·σ/√repeats) (about 95 %).
Z = 1.96
#: The repeats' relative spread assumed while no point has two repeats.
ASSUMED_NOISE = 0.02
#: The least relative spread used (a perfectly steady machine is not believed).
MIN_NOISE = 0.005
#: Refits behind each model's band.
DRAWS = 64
#: The one-term communication models an alternative is projected with: t(P) = a·b +
#: k·f(P), f one of these (commmodel's bandwidth and latency forms).
MODELS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "bandwidth": lambda p: 2 * (p - 1) / p,
    "log2 P latency": np.log2,
    "(P-1) latency": lambda p: p - 1,
}
#: The run fields an alternative may differ in (with the grid's option axes).
ALTERNATIVE_FIELDS = ("ranks_per_node", "batch_size", "global_batch", "backend", "tuning",
                      "precision")
RULE = (
    "First every alternative (batch, backend, tuning, layout) at its two smallest node "
    "counts. Then, round by round, an alternative goes when another beats it beyond the "
    "noise at every node count both have (measured, or under each one-term communication "
    "model fitted to both), and a point is left unmeasured when a measured point on fewer "
    "nodes is at least as fast as its best case, or another alternative beats it there "
    "beyond the noise; each round measures the smallest node count still open, for every "
    "surviving alternative. It stops when no point is open (the front of time against "
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

    @property
    def key(self) -> tuple[str, int | None]:
        return self.alternative, self.nodes

    def as_dict(self) -> dict[str, object]:
        return {"alternative": self.alternative, "nodes": self.nodes,
                "evidence": self.evidence}


@dataclass(frozen=True)
class Decision:
    """The next round (no points: stop, `why` says why), and what it newly decides not
    to measure."""

    points: tuple[Point, ...]
    dropped: tuple[Verdict, ...]
    skipped: tuple[Verdict, ...]
    noise: float
    noise_source: str
    why: str


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


@dataclass(frozen=True)
class _Band:
    """A throughput with its band (about 95 %)."""

    low: float
    mid: float
    high: float


def noise_of(measured: Mapping[tuple[str, int], Sequence[float]]) -> tuple[float, str]:
    """The repeats' relative spread, pooled over the points with two or more, and where
    it comes from."""
    sums, dof = 0.0, 0
    for values in measured.values():
        logs = np.log([v for v in values if v > 0])
        if len(logs) > 1:
            sums += float(np.sum((logs - logs.mean()) ** 2))
            dof += len(logs) - 1
    if dof == 0:
        return ASSUMED_NOISE, (f"assumed {ASSUMED_NOISE:.0%}: no measured point has two "
                               "repeats yet")
    sigma = math.sqrt(sums / dof)
    return max(sigma, MIN_NOISE), (f"{sigma:.1%}, the repeats' spread pooled over {dof} "
                                   f"degree(s) of freedom" + (
                                       f" (at least {MIN_NOISE:.1%} is used)"
                                       if sigma < MIN_NOISE else ""))


def _measured_band(values: Sequence[float], sigma: float) -> _Band:
    mid = float(np.median(values))
    half = Z * sigma / math.sqrt(len(values))
    return _Band(mid * math.exp(-half), mid, mid * math.exp(half))


def _projections(mine: Sequence[Point], measured: Mapping[tuple[str, int], Sequence[float]],
                 asked: Sequence[Point], sigma: float, seed: int
                 ) -> dict[str, dict[int, _Band]]:
    """Per model: the asked points' throughput bands (by node count), from refits to the
    alternative's measured medians moved by the noise. Empty with fewer than two
    measured node counts (one says nothing of scaling)."""
    done = [p for p in mine if measured.get(p.key)]
    if len({p.replicas for p in done}) < 2 or not asked:
        return {}
    p = np.array([q.replicas for q in done], float)
    glob = np.array([q.global_batch for q in done], float)
    batch = np.array([q.per_gpu_batch for q in done], float)
    strong = len(set(glob.tolist())) == 1 and len(set(batch.tolist())) > 1
    work = glob / p if strong else batch  # each GPU's work per step
    med = np.array([float(np.median(measured[q.key])) for q in done])
    reps = np.array([len(measured[q.key]) for q in done], float)
    at_p = np.array([q.replicas for q in asked], float)
    at_w = (glob[0] / at_p) if strong else np.array([q.per_gpu_batch for q in asked], float)
    top = float(p.max())
    widen = 1 + SPREAD_PER_DOUBLING * np.maximum(0.0, np.log2(at_p / top))
    rng = np.random.default_rng(seed)
    shocks = rng.normal(0.0, 1.0, size=(DRAWS, len(med))) * sigma / np.sqrt(reps)
    out: dict[str, dict[int, _Band]] = {}
    x = med * np.exp(np.vstack([np.zeros(len(med)), shocks]))  # row 0: the medians
    for name, form in MODELS.items():
        a, k = _one_term(work, form(p), p * work / x)
        arr = at_p * at_w / (np.outer(a, at_w) + np.outer(k, form(at_p)))
        lo, hi = np.quantile(arr[1:], [0.025, 0.975], axis=0)
        out[name] = {q.nodes: _Band(float(lo[i]) / widen[i], float(arr[0][i]),
                                    float(hi[i]) * widen[i])
                     for i, q in enumerate(asked)}
    return out


def _one_term(w: np.ndarray, f: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least squares t = a·w + k·f, both at least 0, for each row of `t` (a draw);
    (a, k) per row. A negative k (faster than linear) is held at 0."""
    sww, sff, swf = float(w @ w), float(f @ f), float(w @ f)
    stw, stf = t @ w, t @ f
    det = sww * sff - swf * swf
    a = (stw * sff - stf * swf) / det
    k = (stf * sww - stw * swf) / det
    flat = k < 0
    a = np.where(flat, stw / sww, a)
    return np.maximum(a, 0.0), np.maximum(np.where(flat, 0.0, k), 0.0)


def decide(points: Sequence[Point], measured: Mapping[tuple[str, int], Sequence[float]],
           failed: set[tuple[str, int]], dropped: Mapping[str, str],
           skipped: Mapping[tuple[str, int], str], budget_left: float | None = None
           ) -> Decision:
    """The next round from what was measured (throughputs per point key), what failed
    for good, and what earlier rounds dropped and skipped (kept: never undone)."""
    sigma, source = noise_of(measured)
    by_alt: dict[str, list[Point]] = {}
    for point in points:
        by_alt.setdefault(point.alternative, []).append(point)
    for alt_points in by_alt.values():
        alt_points.sort(key=lambda q: q.nodes)
    live = [a for a in by_alt if a not in dropped]
    bands = {a: _bands(by_alt[a], measured, failed, sigma) for a in live}
    new_dropped = _drop(live, by_alt, bands, measured)
    live = [a for a in live if a not in {v.alternative for v in new_dropped}]
    gone = set(skipped) | set(failed)  # never to be measured
    closed = gone | {k for k, v in measured.items() if v}
    new_skipped = _skip(live, by_alt, bands, measured, closed, gone, sigma)
    closed |= {(v.alternative, int(v.nodes or 0)) for v in new_skipped}
    chosen: list[Point] = []
    later: list[Point] = []  # open points beyond the first round's
    for a in live:
        open_points = [q for q in by_alt[a] if q.key not in closed]
        first = 2 - sum(1 for q in by_alt[a] if measured.get(q.key))
        chosen += open_points[:first] if first > 0 else []
        later += open_points[max(first, 0):]
    if not chosen and later:  # the next rung: every surviving alternative's at once
        rung = min(q.nodes for q in later)
        chosen = [q for q in later if q.nodes == rung]
    why = "every point is measured or left out by the evidence: the front is known " \
          "within the noise"
    if budget_left is not None and chosen:
        kept, spend = [], 0.0
        for q in sorted(chosen, key=lambda q: q.node_hours):
            if spend + q.node_hours <= budget_left + 1e-9:
                kept.append(q)
                spend += q.node_hours
        if not kept:
            why = (f"the budget: {budget_left:,.2f} node-hour(s) left, the next point "
                   f"needs {min(q.node_hours for q in chosen):,.2f}")
        chosen = [q for q in chosen if q in kept]  # what fits, the cheapest first
    return Decision(tuple(chosen), tuple(new_dropped), tuple(new_skipped), sigma, source,
                    "" if chosen else why)


def _bands(mine: Sequence[Point], measured: Mapping[tuple[str, int], Sequence[float]],
           failed: set[tuple[str, int]], sigma: float) -> dict[str, dict[int, _Band]]:
    """An alternative's bands per model and node count: measured points' own band under
    every model, the others projected."""
    asked = [q for q in mine if not measured.get(q.key) and q.key not in failed]
    seed = sum(ord(c) for c in mine[0].alternative) if mine else 0
    projected = _projections(mine, measured, asked, sigma, seed)
    own = {q.nodes: _measured_band(measured[q.key], sigma) for q in mine
           if measured.get(q.key)}
    if not projected:
        return {"measured": own}
    return {name: {**own, **per} for name, per in projected.items()}


def _beats(best: dict[str, dict[int, _Band]], other: dict[str, dict[int, _Band]],
           nodes: int) -> bool:
    """`best` is faster than `other` at `nodes` beyond the noise under every model both
    have (a measured point counts under every model)."""
    models = [m for m in best if m in other and nodes in best[m] and nodes in other[m]]
    if not models:
        return False
    return all(best[m][nodes].low > other[m][nodes].high for m in models)


def _drop(live: list[str], by_alt: Mapping[str, list[Point]],
          bands: Mapping[str, dict[str, dict[int, _Band]]],
          measured: Mapping[tuple[str, int], Sequence[float]]) -> list[Verdict]:
    """The alternatives another one beats beyond the noise at every node count both have
    (the beaten judged against the strongest first)."""
    def strength(a: str) -> float:
        done = [q for q in by_alt[a] if measured.get(q.key)]
        return float(np.median(measured[done[-1].key])) / done[-1].nodes if done else 0.0

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
                                                           measured)))
                gone.add(a)
                break
    return out


def _drop_evidence(a: str, b: str, mine: Sequence[Point],
                   bands: Mapping[str, dict[str, dict[int, _Band]]],
                   measured: Mapping[tuple[str, int], Sequence[float]]) -> str:
    done = [q.nodes for q in mine if measured.get(q.key)]
    model = next(iter(bands[a]))
    at = max(done)
    ours, theirs = bands[a][model][at], bands[b][model][at]
    top = max(q.nodes for q in mine)
    words = (f"{b} is faster beyond the noise at every node count: measured on {at} "
             f"node(s) {theirs.mid:,.4g} against {ours.mid:,.4g} "
             f"({ours.mid / theirs.mid - 1:+.1%})")
    if top > at:
        worst = min(bands[b][m][top].low / bands[a][m][top].high for m in bands[a]
                    if m in bands[b])
        words += (f"; on {top} node(s), under every communication model, at least "
                  f"{worst - 1:.1%} faster")
    return words


def _skip(live: list[str], by_alt: Mapping[str, list[Point]],
          bands: Mapping[str, dict[str, dict[int, _Band]]],
          measured: Mapping[tuple[str, int], Sequence[float]],
          closed: set[tuple[str, int]], gone: set[tuple[str, int]], sigma: float
          ) -> list[Verdict]:
    """The open points of the surviving alternatives that cannot change the front
    (`closed`: measured or never to be; `gone`: never to be)."""
    done = [(key, _measured_band(v, sigma)) for key, v in measured.items() if v]
    out: list[Verdict] = []
    for a in live:
        for q in by_alt[a]:
            if q.key in closed:
                continue
            best = max((band[q.nodes].high for band in bands[a].values()
                        if q.nodes in band), default=math.inf)
            faster = [(key, band) for key, band in done
                      if key[1] < q.nodes and band.low >= best]
            if faster:
                (alt, nodes), band = max(faster, key=lambda kb: kb[1].mid)
                out.append(Verdict(a, q.nodes, (
                    f"at best {best:,.4g} (every communication model, the noise "
                    f"included), while {alt} on {nodes} node(s) measured {band.mid:,.4g}: "
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
