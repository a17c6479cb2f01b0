"""The regression gate: the newest repeats of each point against a baseline's, by a
statistical test on per-GPU throughput, named by where the loss comes from.

A point regresses when all three hold:
- Welch's t-test on the repeats says the newest per-GPU throughput is lower (one-sided,
  p < alpha / the number of points tested: Bonferroni, so that a study of many points
  is no likelier to alarm than one of a few);
- the drop of the medians is larger than `min_drop` and than NOISE_BANDS times the
  repeats' own coefficient of variation (a difference too small to matter, or within
  the noise the repeats show, is no alarm, however many repeats prove it);
- the repeat bands do not overlap (the newest side's fastest repeat is slower than the
  baseline's slowest).
A point measured once on either side is not tested: one number cannot tell a change
from noise. Simulated identical reruns (Gaussian noise, CV 1 to 5 %, 3 or 5 repeats,
6,000 points each) alarmed on at most 0.08 % of points; a 10 % slowdown with CV 2 % and
5 repeats was found at 98 % of points (tests/test_regression.py holds the simulation).

The cause follows the scaling model: a drop at the group's smallest scale is a compute
regression (the work per GPU got slower); a drop only at larger scales, with the
smallest unchanged, is a communication regression (the efficiency fell: what is added
with the ranks is gradient sync). What changed in the provenance between the two sides
is named with each verdict.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: A drop must exceed this many coefficients of variation of the repeats to count.
NOISE_BANDS = 3.0
#: What makes runs measurements of one point (besides the repeat and the run id).
POINT_KEYS: tuple[str, ...] = ("model", "nodes", "ranks_per_node", "world_size",
                               "batch_size", "backend", "tuning")
#: What makes points one scaling group (every key of a point but the scale).
GROUP_KEYS: tuple[str, ...] = ("model", "batch_size", "backend", "tuning")


@dataclass(frozen=True)
class Verdict:
    """One point: both sides' repeats, the change, the test, and what it means."""

    point: str
    world_size: int
    newest: list[float]
    baseline: list[float]
    change: float  # newest median / baseline median - 1
    p_value: float | None  # None: not tested (a side has one repeat)
    regressed: bool
    cause: str  # "compute", "communication", "" (none)
    provenance: list[str] = field(default_factory=list)  # "nccl 2.21.5 -> 2.23.4"

    def line(self) -> str:
        """The verdict in one line."""
        counts = f"{len(self.newest)} vs {len(self.baseline)} repeats"
        if self.p_value is None:
            test = f"not tested ({counts}: a side has one)"
        else:
            test = f"p = {self.p_value:.3g}, {counts}"
        head = (f"REGRESSION ({self.cause}): " if self.regressed else "ok: ")
        changed = f"; changed: {', '.join(self.provenance)}" if self.provenance else ""
        return (f"{head}{self.point}: per-GPU throughput {self.change:+.1%} "
                f"({statistics.median(self.newest):,.4g} vs "
                f"{statistics.median(self.baseline):,.4g}; {test}){changed}")


def point_of(row: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(row.get(k) for k in POINT_KEYS)


def describe_point(row: Mapping[str, Any]) -> str:
    """`resnet50 4x4 (16 GPUs) batch 32 ddp/default` (a user's program: `command`)."""
    model = row.get("model") or (row.get("params") or {}).get("workload") or "program"
    return (f"{model} {row.get('nodes')}x{row.get('ranks_per_node')} "
            f"({row.get('world_size')} GPUs) batch {row.get('batch_size')} "
            f"{row.get('backend')}/{row.get('tuning')}")


def check(newest: Sequence[Mapping[str, Any]], baseline: Sequence[Mapping[str, Any]],
          alpha: float = 0.01, min_drop: float = 0.03) -> list[Verdict]:
    """A verdict per point measured on both sides (completed attempts only)."""
    ours, theirs = _by_point(newest), _by_point(baseline)
    shared = [k for k in ours if k in theirs]
    tested = sum(len(ours[k]) > 1 and len(theirs[k]) > 1 for k in shared)
    verdicts: dict[tuple[Any, ...], Verdict] = {}
    for key in shared:
        a = [float(r["throughput_per_gpu"]) for r in ours[key]]
        b = [float(r["throughput_per_gpu"]) for r in theirs[key]]
        change = statistics.median(a) / statistics.median(b) - 1
        p = welch_less(a, b) if len(a) > 1 and len(b) > 1 else None
        regressed = (p is not None and p < alpha / max(tested, 1)
                     and -change > max(min_drop, NOISE_BANDS * noise(a, b)) and max(a) < min(b))
        verdicts[key] = Verdict(describe_point(ours[key][0]), int(ours[key][0]["world_size"]),
                                a, b, change, p, regressed, "",
                                provenance_changes(ours[key], theirs[key]))
    return _with_causes(verdicts)


def _by_point(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[Any, ...], list[Mapping[str, Any]]]:
    out: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for r in rows:
        if r.get("state") == "completed" and r.get("throughput_per_gpu"):
            out.setdefault(point_of(r), []).append(r)
    return out


def _with_causes(verdicts: dict[tuple[Any, ...], Verdict]) -> list[Verdict]:
    """Name each regression: compute where the group's smallest scale regressed (every
    larger scale inherits it), communication where only larger scales did."""
    groups: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for key in verdicts:
        groups.setdefault(tuple(dict(zip(POINT_KEYS, key, strict=True))[k]
                                for k in GROUP_KEYS), []).append(key)
    out = []
    for keys in groups.values():
        keys.sort(key=lambda k: verdicts[k].world_size)
        smallest = verdicts[keys[0]]
        compute = smallest.regressed
        for k in keys:
            v = verdicts[k]
            cause = ("compute" if compute else "communication") if v.regressed else ""
            out.append(Verdict(**{**v.__dict__, "cause": cause}))
    return out


def noise(a: Sequence[float], b: Sequence[float]) -> float:
    """The repeats' coefficient of variation, pooled over both sides."""
    va = statistics.variance(a) if len(a) > 1 else 0.0
    vb = statistics.variance(b) if len(b) > 1 else 0.0
    return math.sqrt((va + vb) / 2) / statistics.fmean(b)


def provenance_changes(newest: Sequence[Mapping[str, Any]],
                       baseline: Sequence[Mapping[str, Any]]) -> list[str]:
    """What differs between the two sides' provenance: versions, hardware, the tuning
    environment, the container and the program's commit, as `name old -> new`."""
    def flat(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
        values: dict[str, set[str]] = {}
        for r in rows:
            prov = r.get("provenance") or {}
            conf = prov.get("configuration") or {}
            items = [*(prov.get("versions") or {}).items(),
                     *(prov.get("hardware") or {}).items(),
                     *((f"env {k}", v) for k, v in (conf.get("environment") or {}).items()),
                     *((k, conf[k]) for k in ("container", "container_digest",
                                             "program_commit", "system") if conf.get(k))]
            for name, value in items:
                values.setdefault(str(name), set()).add(str(value))
        return {k: "/".join(sorted(v)) for k, v in values.items()}

    a, b = flat(newest), flat(baseline)
    return [f"{k} {b.get(k, '(none)')} -> {a.get(k, '(none)')}"
            for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def welch_less(a: Sequence[float], b: Sequence[float]) -> float:
    """One-sided Welch's t-test p-value for mean(a) < mean(b) (two repeats or more on
    each side); equal samples give 1 where a is not lower."""
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:
        return 0.0 if ma < mb else 1.0
    t = (ma - mb) / math.sqrt(va + vb)
    dof = (va + vb) ** 2 / ((va ** 2 / (len(a) - 1) if va else 0.0)
                            + (vb ** 2 / (len(b) - 1) if vb else 0.0))
    return student_t_cdf(t, dof)


def student_t_cdf(t: float, dof: float) -> float:
    """P(T <= t) for Student's t with `dof` degrees of freedom, through the regularized
    incomplete beta function I_x(dof/2, 1/2), x = dof / (dof + t²)."""
    tail = 0.5 * _betainc(dof / 2, 0.5, dof / (dof + t * t))
    return tail if t < 0 else 1.0 - tail


def _betainc(a: float, b: float, x: float) -> float:
    """I_x(a, b) by its continued fraction (Lentz's method), on the side where it
    converges fast."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _betainc(b, a, 1.0 - x)
    tiny, f, c, d = 1e-300, 1.0, 1.0, 0.0
    for i in range(400):
        m = i // 2
        if i == 0:
            num = 1.0
        elif i % 2 == 0:
            num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        else:
            num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1.0 + num * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + num / (c if abs(c) > tiny else tiny)
        f *= c * d
        if abs(1.0 - c * d) < 1e-14:
            break
    return front * (f - 1.0) / a
