"""The wall clock to a trained model with checkpoints and failures: the Poisson interval
of a failure rate, Young's and Daly's checkpoint intervals, the expected time lost per
failure, and the goodput and wall clock of a job (docs/goodput.md). Pure: numbers in,
numbers out; scipy is not needed (the chi-square quantile is solved here).

Assumptions, said once: failures of a job arrive as a Poisson process at rate λ · nodes
(λ per node-hour, the same on every node, no memory), so the job's mean time between
failures is M = 3600 / (λ · nodes) seconds; every failure costs a restart R (queue wait
+ start-up + checkpoint load) and the work since the last checkpoint; a checkpoint blocks
training for C seconds (an async save's blocked part); the work W (seconds of training
without checkpoints or failures) is cut into segments of τ seconds, each followed by a
save.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypedDict

#: The level of a failure rate's interval.
LEVEL = 0.90


def _gamma_p(a: float, x: float) -> float:
    """The regularized lower incomplete gamma function P(a, x) (the series below a + 1,
    Lentz's continued fraction for Q above: Numerical Recipes, ch. 6.2)."""
    if x <= 0:
        return 0.0
    log_front = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1:
        term = total = 1.0 / a
        n = a
        for _ in range(10_000):
            n += 1
            term *= x / n
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return min(1.0, total * math.exp(log_front))
    tiny = 1e-300
    b = x + 1 - a
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        step = d * c
        h *= step
        if abs(step - 1) < 1e-15:
            break
    return max(0.0, 1.0 - math.exp(log_front) * h)


def chi2_quantile(p: float, dof: float) -> float:
    """The p-quantile of the chi-square distribution with `dof` degrees of freedom: the
    x where P(dof / 2, x / 2) = p, by bisection (the cdf is monotone)."""
    if not 0 < p < 1 or dof <= 0:
        raise ValueError(f"chi2_quantile: p={p} must be in (0, 1) and dof={dof} above 0")
    low, high = 0.0, max(1.0, dof)
    while _gamma_p(dof / 2, high / 2) < p:
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        if _gamma_p(dof / 2, mid / 2) < p:
            low = mid
        else:
            high = mid
        if high - low <= 1e-12 * max(1.0, high):
            break
    return (low + high) / 2


def poisson_interval(count: int, level: float = LEVEL) -> tuple[float, float]:
    """Garwood's exact interval for a Poisson mean from `count` events: [χ²(α/2; 2k) / 2,
    χ²(1 − α/2; 2k + 2) / 2], α = 1 − level; the lower end is 0 at no event."""
    if count < 0:
        raise ValueError(f"poisson_interval: count {count} must be >= 0")
    alpha = 1 - level
    low = 0.0 if count == 0 else chi2_quantile(alpha / 2, 2 * count) / 2
    return low, chi2_quantile(1 - alpha / 2, 2 * count + 2) / 2


def job_mtbf_s(per_node_hour: float, nodes: int) -> float:
    """The job's mean time between failures in seconds, M = 3600 / (λ · nodes); infinite
    at a rate of 0."""
    rate = per_node_hour * nodes
    return math.inf if rate <= 0 else 3600.0 / rate


def young_interval(save_s: float, mtbf_s: float) -> float:
    """Young's (1974) checkpoint interval τ = sqrt(2 C M), seconds of work between saves."""
    return math.sqrt(2 * save_s * mtbf_s)


def daly_interval(save_s: float, mtbf_s: float) -> float:
    """Daly's (2006) higher-order interval: τ = sqrt(2 C M) · [1 + sqrt(C / (2M)) / 3 +
    C / (18 M)] − C for C < 2M, else M."""
    if math.isinf(mtbf_s):
        return math.inf
    if save_s >= 2 * mtbf_s:
        return mtbf_s
    ratio = save_s / (2 * mtbf_s)
    return math.sqrt(2 * save_s * mtbf_s) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - save_s


def lost_work_s(segment_s: float, mtbf_s: float) -> float:
    """The expected work lost by a failure: the time since the segment (τ of work and C
    of save, L = τ + C) began, given that a failure struck within it.

    Failures arrive at rate 1/M, so the time t to the first one has density e^(−t/M) / M;
    given t < L, E[t | t < L] = ∫₀ᴸ t e^(−t/M) dt / ∫₀ᴸ e^(−t/M) dt
    = M − L / (e^(L/M) − 1). Expanded in L / M: L/2 − L² / (12 M) + ..., so the usual
    τ/2 (plus half the save) is the first term, and the failures' preference for the
    segment's start is the second."""
    if math.isinf(mtbf_s) or segment_s <= 0:
        return segment_s / 2
    x = segment_s / mtbf_s
    if x < 1e-6:
        return segment_s / 2 - segment_s * x / 12
    return mtbf_s - segment_s / math.expm1(x)


@dataclass(frozen=True)
class FailureInputs:
    """What the expected failures use: the rate, where it came from, and the queue wait
    a restart pays where the store knows none for a node count (None: 0, said)."""

    per_node_hour: float
    said: str
    queue_wait_s: float | None = None


@dataclass(frozen=True)
class Goodput:
    """The expected wall clock of W seconds of training, split into its parts (seconds)."""

    work_s: float  # training without saves or failures
    checkpoints_s: float  # blocked saves: W / τ · C
    failures_s: float  # restarts and lost work, over the expected failures
    startup_s: float  # the first start (its queue wait and start-up)
    failures: float  # the expected number of failures
    lost_per_failure_s: float  # restart + lost work, per failure
    interval_s: float  # τ used
    mtbf_s: float

    @property
    def wall_s(self) -> float:
        """The expected wall clock: the parts together."""
        return self.startup_s + self.work_s + self.checkpoints_s + self.failures_s

    @property
    def goodput(self) -> float:
        """The share of the wall clock that trained the model, W / wall clock."""
        return self.work_s / self.wall_s if self.wall_s > 0 else math.nan


def expected_wall(work_s: float, *, save_s: float, mtbf_s: float, restart_s: float,
                  interval_s: float | None = None, startup_s: float = 0.0) -> Goodput:
    """The expected wall clock to do `work_s` of training, with a save of `save_s` every
    `interval_s` of work (None: Daly's interval), failures every `mtbf_s` on average,
    each costing `restart_s` (queue wait + start-up + load) and the work since the last
    save; `startup_s`: the first start, paid once.

    Daly's (2006) exact expectation for exponential failures (a failure may strike a
    restart too): T = M e^(R/M) (e^((τ+C)/M) − 1) · W / τ. Split: the saves are W/τ · C,
    the failures the rest, T/M of them in expectation. At M → ∞ it is W (1 + C/τ); to
    first order in 1/M, W (1 + C/τ) (1 + (R + (τ + C)/2) / M): each failure costs R plus
    half a segment (lost_work_s)."""
    if work_s < 0 or save_s < 0 or restart_s < 0:
        raise ValueError("expected_wall: work, save and restart times must be >= 0")
    tau = daly_interval(save_s, mtbf_s) if interval_s is None else interval_s
    if math.isinf(mtbf_s):
        saves = 0.0 if math.isinf(tau) or tau <= 0 else work_s / tau * save_s
        return Goodput(work_s, saves, 0.0, startup_s, 0.0, 0.0, tau, mtbf_s)
    if tau == 0 and save_s == 0:  # free saves, taken continuously: only restarts cost
        total = work_s * math.exp(restart_s / mtbf_s)
        failures = total / mtbf_s
        return Goodput(work_s, 0.0, total - work_s, startup_s, failures,
                       (total - work_s) / failures if failures > 0 else 0.0, tau, mtbf_s)
    if not tau > 0:
        raise ValueError(f"expected_wall: the checkpoint interval {tau} must be above 0")
    if math.isinf(tau):  # never saved: every failure starts the work again
        segment = work_s
        saves = 0.0
        total = mtbf_s * math.exp(restart_s / mtbf_s) * math.expm1(segment / mtbf_s)
    else:
        saves = work_s / tau * save_s
        total = (mtbf_s * math.exp(restart_s / mtbf_s) * math.expm1((tau + save_s) / mtbf_s)
                 * work_s / tau)
    failures = total / mtbf_s
    lost = max(0.0, total - work_s - saves)
    return Goodput(work_s, saves, lost, startup_s, failures,
                   lost / failures if failures > 0 else 0.0, tau, mtbf_s)


class ScaleWallRecord(TypedDict):
    """One scale's wall clock as `predict --to-target --json` writes it (seconds)."""

    nodes: int
    work_s: float
    young_interval_s: float
    daly_interval_s: float
    wall_s: float
    wall_low_s: float
    wall_high_s: float
    goodput: float
    goodput_low: float
    goodput_high: float
    checkpoints_s: float
    failures_s: float
    expected_failures: float
    lost_per_failure_s: float
    startup_s: float
    mtbf_s: float


@dataclass(frozen=True)
class ScaleWall:
    """One scale's wall clock to the target with checkpoints and failures, and its
    interval (the failure rate's and the work's ends together: a wide, safe interval)."""

    nodes: int
    work_s: float  # training to the target without saves or failures
    young_s: float
    daly_s: float
    expected: Goodput  # at the rate's point value and Daly's interval
    wall_low_s: float
    wall_high_s: float
    goodput_low: float
    goodput_high: float

    def as_dict(self) -> ScaleWallRecord:
        """For `predict --to-target --json`."""
        g = self.expected
        return {"nodes": self.nodes, "work_s": self.work_s, "young_interval_s": self.young_s,
                "daly_interval_s": self.daly_s, "wall_s": g.wall_s,
                "wall_low_s": self.wall_low_s, "wall_high_s": self.wall_high_s,
                "goodput": g.goodput, "goodput_low": self.goodput_low,
                "goodput_high": self.goodput_high, "checkpoints_s": g.checkpoints_s,
                "failures_s": g.failures_s, "expected_failures": g.failures,
                "lost_per_failure_s": g.lost_per_failure_s, "startup_s": g.startup_s,
                "mtbf_s": g.mtbf_s}


def scale_wall(nodes: int, work: tuple[float, float, float], rate: tuple[float, float, float],
               *, save_s: float, restart_s: float, startup_s: float) -> ScaleWall:
    """The wall clock of one scale: `work` (value, low, high) seconds of training, `rate`
    (value, low, high) failures per node-hour, a save of `save_s` at Daly's interval for
    the rate's value, each failure costing `restart_s` and the work since the last save.
    The wall clock's interval takes the low ends together and the high ends together (it
    grows with both), the goodput's the rate's ends at the work's value, at the same τ."""
    mtbf = [job_mtbf_s(r, nodes) for r in rate]
    mid = expected_wall(work[0], save_s=save_s, mtbf_s=mtbf[0], restart_s=restart_s,
                        startup_s=startup_s)
    tau = None if math.isinf(mid.interval_s) else mid.interval_s

    def at(w: float, m: float) -> Goodput:
        return expected_wall(w, save_s=save_s, mtbf_s=m, restart_s=restart_s,
                             interval_s=tau, startup_s=startup_s)

    return ScaleWall(nodes, work[0], young_interval(save_s, mtbf[0]), mid.interval_s, mid,
                     at(work[1], mtbf[1]).wall_s, at(work[2], mtbf[2]).wall_s,
                     at(work[0], mtbf[2]).goodput, at(work[0], mtbf[1]).goodput)
