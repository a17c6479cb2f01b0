"""The regression gate: the newest repeats of each point against a baseline's, by a
statistical test on per-GPU throughput, named by where the loss comes from.

A point regresses when all three hold:
- Welch's t-test on the repeats says the newest per-GPU throughput is lower (one-sided,
  p < alpha / the number of points tested: Bonferroni, so that a study of many points
  is no likelier to alarm than one of a few);
- the drop of the medians is larger than `min_drop` and than NOISE_BANDS times the
  noise: the repeats' own coefficient of variation and the noise between campaigns
  beyond it, when the caller measured it (nights differ more than repeats of one night
  do; a difference too small to matter, or within that noise, is no alarm, however many
  repeats prove it);
- the repeat bands do not overlap (the newest side's fastest repeat is slower than the
  baseline's slowest).
A point measured once on either side is not tested: one number cannot tell a change
from noise, and it says so (never "ok"). A point the baseline never measured (a new grid
point: another batch size, scale or setting) is "new": listed, not tested, and never
hidden behind older runs. An "ok" beside a drop larger than `min_drop` says why (the
repeats' noise, or bands that overlap). A drop beyond the noise with the bands apart that
the test cannot make significant with so few repeats is "undecided", with the repeats a
side that would decide it. Points that do different work (another image size, precision,
workload option or system) are never compared: the verdict names what differs.
Simulated identical reruns (Gaussian noise, CV 1 to 5 %, 3 or 5 repeats,
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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from scalestudy.core.values import member
from scalestudy.results.analysis import columns as col
from scalestudy.results.history import rows as stored
from scalestudy.results.history.rows import AttemptRow

#: A drop must exceed this many coefficients of variation of the repeats to count.
NOISE_BANDS = 3.0
#: What makes runs measurements of one point (besides the repeat and the run id); the
#: run's other parameters that change the work (image size, precision, the workload,
#: training options, the system) are part of its key too (point_of).
POINT_KEYS: tuple[str, ...] = ("model", "nodes", "ranks_per_node", "world_size",
                               "batch_size", "backend", "tuning")
#: What makes points one scaling group (every key of a point but the scale).
GROUP_KEYS: tuple[str, ...] = ("model", "batch_size", "backend", "tuning")
#: Parameters that name a measurement or follow from the others: never part of a key.
NOT_WORK: frozenset[str] = frozenset({"run_id", "study", "repeat", "scaling",
                                      "global_batch", "dp", *POINT_KEYS})
#: The most repeats a side the gate suggests (beyond: the drop is within the noise).
MAX_SUGGESTED = 64


@dataclass(frozen=True)
class Verdict:
    """One point: both sides' repeats, the change, the test, and what it means.

    `status`: regression; ok (`why`: beside a drop larger than min_drop, why it is no
    alarm); not tested (a side has one repeat: cannot tell); undecided (a drop beyond
    the noise with bands apart, which these repeats cannot make significant: `needed`
    repeats a side would); unlike (no baseline point does the same work: `differs` says
    what differs, and nothing is compared); new (the baseline has no point at this
    scale: nothing to compare with yet)."""

    point: str
    world_size: int
    newest: list[float]
    baseline: list[float]
    change: float | None  # newest median / baseline median - 1
    p_value: float | None  # None: not tested
    regressed: bool
    cause: str  # "compute", "communication", "" (none)
    provenance: list[str] = field(default_factory=list)  # "nccl 2.21.5 -> 2.23.4"
    status: str = "ok"
    beyond_noise: bool = False  # the drop exceeds min_drop and the repeats' noise
    threshold: float | None = None  # the p-value it had to beat (alpha / points tested)
    needed: int | None = None  # repeats a side that would decide an undecided drop
    comm: tuple[float | None, float | None] = (None, None)  # comm overhead, newest/base
    differs: list[str] = field(default_factory=list)  # unlike: "image_size 32 -> 64"
    why: str = ""  # ok beside a large drop: why it is no alarm
    work: str = ""  # the work beyond the point's name (`container=pt.sif precision=bf16`)

    @property
    def name(self) -> str:
        """The point with its work: unique among a check's verdicts (JUnit's names)."""
        return f"{self.point} {self.work}" if self.work else self.point

    def line(self) -> str:
        """The verdict in one line."""
        if self.status == "unlike":
            return (f"not compared: {self.name}: the baseline measured other work "
                    f"({', '.join(self.differs)}); compare it with a baseline of the same "
                    "settings")
        if self.status == "new":
            return (f"NOT TESTED (new): {self.name}: per-GPU throughput "
                    f"{statistics.median(self.newest):,.4g} ({len(self.newest)} repeats); "
                    "the baseline never measured this point: nothing to compare with yet "
                    "(it is part of the baseline from the next check on)")
        counts = f"{len(self.newest)} vs {len(self.baseline)} repeats"
        if self.p_value is None:
            test = f"not tested ({counts}: a side has one)"
        else:
            test = f"p = {self.p_value:.3g} against {self.threshold:.2g}, {counts}"
        head = {"regression": f"REGRESSION ({self.cause}): ", "ok": "ok: ",
                "not tested": "NOT TESTED: ", "undecided": "UNDECIDED: "}[self.status]
        changed = f"; changed: {', '.join(self.provenance)}" if self.provenance else ""
        need = ""
        if self.status == "undecided":
            need = (f"; these repeats cannot call it: about {self.needed} repeats a side "
                    "would" if self.needed else "; within reach of no repeat count")
        elif self.status == "not tested":
            need = ("; cannot tell: one number cannot tell a change from noise: 2 or more "
                    "repeats a side")
        elif self.why:
            need = f"; no alarm: {self.why}"
        return (f"{head}{self.name}: per-GPU throughput {self.change:+.1%} "
                f"({statistics.median(self.newest):,.4g} vs "
                f"{statistics.median(self.baseline):,.4g}; {test}){need}{changed}")


#: A point's key (`point_of`): what it ran and everything that changes the work.
Point = tuple[object, ...]


def work_of(row: AttemptRow) -> dict[str, Any]:
    """The parameters beyond POINT_KEYS that change the work (from the stored params):
    image size, precision, workload kind, training options, system."""
    params = row.get(col.PARAMS) or {}
    return {k: v for k, v in params.items() if k not in NOT_WORK and v is not None
            and isinstance(v, (str, int, float, bool))}


def point_of(row: AttemptRow) -> Point:
    """A point's key: everything that changes the work (repeats of one key compare)."""
    return (*(row.get(k) for k in POINT_KEYS), tuple(sorted(work_of(row).items())))


def describe_point(row: AttemptRow) -> str:
    """`resnet50 4x4 (16 GPUs) batch 32 ddp/default` (a user's program: `command`)."""
    model = row.get(col.MODEL) or (row.get(col.PARAMS) or {}).get("workload") or "program"
    return (f"{model} {row.get('nodes')}x{row.get('ranks_per_node')} "
            f"({row.get('world_size')} GPUs) batch {row.get('batch_size')} "
            f"{row.get('backend')}/{row.get('tuning')}")


def work_label(row: AttemptRow) -> str:
    """The work beyond describe_point, `name=value` sorted (`container=pt.sif`); the
    system and the workload kind aside (one study's points share them)."""
    return " ".join(f"{k}={v}" for k, v in sorted(work_of(row).items())
                    if k not in ("system", "workload"))


def differences(newest: AttemptRow, baseline: AttemptRow) -> list[str]:
    """What differs in the work of two rows' points, as `name old -> new`."""
    a = {**{k: newest.get(k) for k in POINT_KEYS}, **work_of(newest)}
    b = {**{k: baseline.get(k) for k in POINT_KEYS}, **work_of(baseline)}
    return [f"{k} {b.get(k, '(none)')} -> {a.get(k, '(none)')}"
            for k in sorted(set(a) | set(b), key=str) if a.get(k) != b.get(k)]


def check(newest: Sequence[AttemptRow], baseline: Sequence[AttemptRow],
          alpha: float = 0.01, min_drop: float = 0.03, nights: float = 0.0) -> list[Verdict]:
    """A verdict per point measured on both sides (completed attempts only), and an
    `unlike` or `new` one per newest point the baseline lacks. `nights`: the relative
    noise between campaigns beyond the repeats' (the system's tau, results.history.
    changes, measured without the newest side), which a drop must exceed too."""
    ours, theirs = _by_point(newest), _by_point(baseline)
    shared = [k for k in ours if k in theirs]
    tested = sum(len(ours[k]) > 1 and len(theirs[k]) > 1 for k in shared)
    threshold = alpha / max(tested, 1)
    verdicts: dict[Point, Verdict] = {}
    for key in shared:
        a = [stored.per_gpu(r) for r in ours[key]]
        b = [stored.per_gpu(r) for r in theirs[key]]
        change = statistics.median(a) / statistics.median(b) - 1
        p = welch_less(a, b) if len(a) > 1 and len(b) > 1 else None
        beyond = -change > max(min_drop, NOISE_BANDS * math.hypot(noise(a, b), nights))
        alarm = beyond and max(a) < min(b)
        if p is None:
            status = "not tested"
        elif alarm and p < threshold:
            status = "regression"
        elif alarm:
            status = "undecided"
        else:
            status = "ok"
        verdicts[key] = Verdict(
            describe_point(ours[key][0]), stored.world_size(ours[key][0]), a, b, change, p,
            status == "regression", "", provenance_changes(ours[key], theirs[key]),
            status=status, beyond_noise=beyond, threshold=threshold if p is not None else None,
            needed=(repeats_needed(a, b, threshold) if status == "undecided" else None),
            comm=(_comm(ours[key]), _comm(theirs[key])), work=work_label(ours[key][0]),
            why=(_why_ok(a, b, noise(a, b), nights)
                 if status == "ok" and -change > min_drop else ""))
    return [*_with_causes(verdicts), *_unmatched(ours, theirs)]


def _why_ok(a: Sequence[float], b: Sequence[float], repeats: float, nights: float) -> str:
    """Why a drop larger than `min_drop` is no alarm: the noise (the repeats', and the
    baseline's campaigns' spread), or the bands overlap (the test alone never passes
    such a drop: that is `undecided`)."""
    bound = NOISE_BANDS * math.hypot(repeats, nights)
    if bound >= -(statistics.median(a) / statistics.median(b) - 1):
        spread = f" and campaigns by {nights:.1%} more" if nights else ""
        return (f"within the noise: the repeats vary by {repeats:.1%} (coefficient of "
                f"variation){spread}, and a drop must exceed {NOISE_BANDS:g} times that "
                f"({bound:.1%}); steadier runs would tell")
    return (f"the repeats overlap (the newest's fastest {max(a):,.4g} is not slower than "
            f"the baseline's slowest {min(b):,.4g})")


def _unmatched(ours: dict[Point, list[AttemptRow]],
               theirs: dict[Point, list[AttemptRow]]) -> list[Verdict]:
    """Newest points the baseline lacks: `unlike` where it has the same scale with other
    work, `new` where it has nothing there (another batch size, scale or setting)."""
    out = []
    for key, rows in ours.items():
        if key in theirs:
            continue
        scale = key[:len(POINT_KEYS)]
        other = next((r for k, r in theirs.items() if k[:len(POINT_KEYS)] == scale), None)
        a = [stored.per_gpu(r) for r in rows]
        if other is None:
            out.append(Verdict(describe_point(rows[0]), stored.world_size(rows[0]), a, [],
                               None, None, False, "", status="new",
                               work=work_label(rows[0])))
            continue
        out.append(Verdict(describe_point(rows[0]), stored.world_size(rows[0]), a,
                           [stored.per_gpu(r) for r in other], None, None, False,
                           "", status="unlike", differs=differences(rows[0], other[0]),
                           work=work_label(rows[0])))
    return out


def _comm(rows: Sequence[AttemptRow]) -> float | None:
    """The median comm overhead the runs measured themselves (1 - compute / step)."""
    values = [float(v) for r in rows
              if isinstance(v := member(r, col.METRICS).get(col.COMM_OVERHEAD), (int, float))]
    return statistics.median(values) if values else None


def repeats_needed(a: Sequence[float], b: Sequence[float], threshold: float) -> int | None:
    """The repeats a side that would make this drop, at this noise, significant below
    `threshold` (the same means and spreads, more of them); None: more than
    MAX_SUGGESTED."""
    sa, sb = statistics.stdev(a), statistics.stdev(b)
    for n in range(max(len(a), len(b)) + 1, MAX_SUGGESTED + 1):
        if welch_p(statistics.fmean(a), sa, n, statistics.fmean(b), sb, n) < threshold:
            return n
    return None


def _by_point(rows: Iterable[AttemptRow]) -> dict[Point, list[AttemptRow]]:
    out: dict[Point, list[AttemptRow]] = {}
    for r in rows:
        if r.get(col.STATE) == "completed" and r.get(col.THROUGHPUT_PER_GPU):
            out.setdefault(point_of(r), []).append(r)
    return out


def _with_causes(verdicts: dict[Point, Verdict]) -> list[Verdict]:
    """Name each regression. Compute: the group's smallest scale dropped beyond the noise
    too (whether or not its own test could call it), or the regressed point's own comm
    overhead did not grow (the runs measure it: the loss is in the work per GPU).
    Communication: only larger scales dropped, and the share of a step spent
    communicating grew (or was not measured)."""
    groups: dict[Point, list[Point]] = {}
    for key in verdicts:
        fields_ = dict(zip(POINT_KEYS, key[:len(POINT_KEYS)], strict=True))
        groups.setdefault((*(fields_[k] for k in GROUP_KEYS), key[-1]), []).append(key)
    out = []
    for keys in groups.values():
        keys.sort(key=lambda k: verdicts[k].world_size)
        smallest = verdicts[keys[0]]
        for k in keys:
            v = verdicts[k]
            new_comm, old_comm = v.comm
            comm_grew = new_comm is None or old_comm is None or new_comm > old_comm
            compute = smallest.beyond_noise or smallest.regressed or not comm_grew
            cause = ("compute" if compute else "communication") if v.regressed else ""
            out.append(Verdict(**{**v.__dict__, "cause": cause}))
    return out


def noise(a: Sequence[float], b: Sequence[float]) -> float:
    """The repeats' coefficient of variation, pooled over both sides."""
    va = statistics.variance(a) if len(a) > 1 else 0.0
    vb = statistics.variance(b) if len(b) > 1 else 0.0
    return math.sqrt((va + vb) / 2) / statistics.fmean(b)


def provenance_changes(newest: Sequence[AttemptRow],
                       baseline: Sequence[AttemptRow]) -> list[str]:
    """What differs between the two sides' provenance: versions, hardware, the tuning
    environment, the container and the program's commit, as `name old -> new`."""
    def flat(rows: Sequence[AttemptRow]) -> dict[str, str]:
        values: dict[str, set[str]] = {}
        for r in rows:
            prov = member(r, col.PROVENANCE)
            conf = member(prov, "configuration")
            items = [*member(prov, "versions").items(),
                     *member(prov, "hardware").items(),
                     *((f"env {k}", v) for k, v in member(conf, "environment").items()),
                     *((k, conf[k]) for k in ("container", "container_digest",
                                             "container_runtime", "program_commit",
                                             "system") if conf.get(k))]
            for name, value in items:
                values.setdefault(str(name), set()).add(str(value))
        return {k: "/".join(sorted(v)) for k, v in values.items()}

    a, b = flat(newest), flat(baseline)
    return [f"{k} {b.get(k, '(none)')} -> {a.get(k, '(none)')}"
            for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def welch_less(a: Sequence[float], b: Sequence[float]) -> float:
    """One-sided Welch's t-test p-value for mean(a) < mean(b) (two repeats or more on
    each side); equal samples give 1 where a is not lower."""
    return welch_p(statistics.fmean(a), statistics.stdev(a), len(a),
                   statistics.fmean(b), statistics.stdev(b), len(b))


def welch_p(ma: float, sa: float, na: int, mb: float, sb: float, nb: int) -> float:
    """Welch's one-sided p-value for mean a < mean b from the sides' means, standard
    deviations and counts."""
    va, vb = sa * sa / na, sb * sb / nb
    if va + vb == 0:
        return 0.0 if ma < mb else 1.0
    t = (ma - mb) / math.sqrt(va + vb)
    dof = (va + vb) ** 2 / ((va ** 2 / (na - 1) if va else 0.0)
                            + (vb ** 2 / (nb - 1) if vb else 0.0))
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
