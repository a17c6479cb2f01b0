"""Change points in each point's series of campaigns: where a point's per-GPU throughput
stepped (or drifted) over months, how much, and what changed in the provenance there.

A point (results.history.regression.point_of: its scale and everything that changes its work)
has one value per campaign, the mean of its repeats' log per-GPU throughput. Two noises
are estimated per system, pooled over its points: within a campaign (the repeats'
spread, sigma) and between campaigns of an unchanged point (tau: nights differ more than
repeats of one night do), the latter robustly from consecutive campaigns' differences
(their median absolute deviation: a rare step does not inflate it). A campaign's mean
then has variance sigma^2 / repeats + tau^2.

Each series is cut by binary segmentation: the split of a segment whose before and after
means (weighted by those variances) differ most, in units of their standard error, is a
change point when that z passes THRESHOLD, and both sides are searched again. Pooling
every campaign after a change is what finds small steps that one night's test cannot.
THRESHOLD is set so that unchanged series alarm at most once per thousand point-
campaigns (benchmarks/change_points.py measures it, with the power on injected steps
and drifts, against Apache Otava). A change is *confirmed* once CONFIRM campaigns lie
after it (a nightly gate fails on those, not on one noisy night); before that it is
*suspected*. A change is *recent* when its first campaign is among its series' latest
RECENT campaigns (by place, however long the stretch after it), and a drop is *fixed*
when a later confirmed change brings the series back within half of it: a nightly gate
fails on a recent, confirmed drop that is not fixed, and passes once the fix is
confirmed.

Without repeats the within-campaign noise is not measured: the campaigns' own
night-to-night differences then give the whole noise, when there are at least
NO_REPEAT_DIFFS of them on the system; with fewer, the series cannot tell a change from
noise and no change point is claimed (`cannot_tell` names those systems).

Each change has its size (after / before − 1) with a 95 % interval, its cause by the
scaling model as `history check` decides it (a step at the group's smallest scale too:
compute; only at larger scales: communication), and the provenance that differs between
the campaigns on either side of it (versions, hardware, tuning environment, nodes).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from scalestudy.core.values import array, member
from scalestudy.results.analysis import columns as col
from scalestudy.results.history import rows as stored
from scalestudy.results.history.regression import (
    GROUP_KEYS,
    POINT_KEYS,
    Point,
    describe_point,
    point_of,
    provenance_changes,
)
from scalestudy.results.history.rows import AttemptRow
from scalestudy.results.history.store import campaign_of
from scalestudy.results.history.timeline import series_label

#: |z| a split must pass to be a change point (see the module's docstring).
THRESHOLD = 4.0
#: Campaigns after a change that confirm it.
CONFIRM = 2
#: The least relative noise believed (a perfectly steady series is not).
MIN_NOISE = 0.002
#: Campaigns a segment needs on each side of a split.
MIN_SIDE = 1
#: A change among a point's last RECENT campaigns is recent: `history check` gates on it.
RECENT = 5
#: Night-to-night differences (pooled over a system's points) that measure the noise of
#: campaigns without repeats; with fewer, a series without repeats cannot tell. Checked
#: nightly for 19 nights, 2 unchanged points of one run a night (2 % run noise, 1 %
#: night noise) ever alarmed in 3 of 100 series with 20 (13 of 100 with 6; 1 of 100 with
#: 3 repeats a night).
NO_REPEAT_DIFFS = 20


@dataclass(frozen=True)
class Campaign:
    """One campaign's measurements of one point."""

    key: Point
    when: datetime
    values: tuple[float, ...]  # per-GPU throughputs, the repeats
    rows: tuple[AttemptRow, ...]

    @property
    def mean_log(self) -> float:
        return statistics.fmean(math.log(v) for v in self.values)


@dataclass(frozen=True)
class Noise:
    """A system's noise: within a campaign (sigma) and between campaigns (tau), both
    relative (log units)."""

    sigma: float
    tau: float
    known: bool = True  # False: no repeats and too few campaigns to measure it

    def variance(self, repeats: int) -> float:
        """The variance of one campaign's mean log throughput."""
        return self.sigma ** 2 / max(repeats, 1) + self.tau ** 2


@dataclass(frozen=True)
class ChangePoint:
    """A change in one point's series: the first campaign after it, its size with a 95 %
    interval, its z, whether enough campaigns confirm it, its cause and what changed."""

    system: str
    point: str
    world_size: int
    group: Point
    when: datetime
    campaign: str
    before: int
    after: int
    size: float
    low: float
    high: float
    z: float
    cause: str = ""
    changed: tuple[str, ...] = ()
    key: Point = ()  # the point's (results.history.regression.point_of)
    series: str = ""  # its group's label on `history plot` (results.history.timeline)
    index: int = 0  # its first campaign's place in the series (0: the first campaign)
    total: int = 0  # the series' campaigns
    fixed: str = ""  # a drop undone: the later change that brought the series back

    @property
    def confirmed(self) -> bool:
        return self.after >= CONFIRM

    @property
    def recent(self) -> bool:
        """Its first campaign is among the series' latest RECENT campaigns."""
        return self.total - self.index <= RECENT

    @property
    def alarm(self) -> bool:
        """A confirmed drop that no later change fixed: what fails a nightly gate."""
        return self.confirmed and self.high < 0 and not self.fixed

    def as_dict(self) -> dict[str, object]:
        return {"system": self.system, "point": self.point, "world_size": self.world_size,
                "when": self.when.isoformat(), "campaign": self.campaign,
                "campaigns_before": self.before, "campaigns_after": self.after,
                "size": self.size, "low": self.low, "high": self.high, "z": self.z,
                "confirmed": self.confirmed, "cause": self.cause,
                "changed": list(self.changed), "campaign_index": self.index,
                "campaigns": self.total, "recent": self.recent, "fixed": self.fixed,
                "alarm": self.alarm}

    def line(self) -> str:
        """`2026-11-20 resnet50 2x4 (8 GPUs) ...: -6.1% [-7.0%, -5.2%], communication,
        confirmed by 3 campaigns; nccl 2.21.5 -> 2.23.4`."""
        state = (f"confirmed by {self.after} campaigns" if self.confirmed
                 else f"suspected ({self.after} campaign after it; {CONFIRM} confirm)")
        what = f"; {'; '.join(self.changed[:3])}" if self.changed else "; no provenance change"
        more = f" (+{len(self.changed) - 3} more)" if len(self.changed) > 3 else ""
        fixed = f"; fixed: {self.fixed}" if self.fixed else ""
        return (f"{self.when:%Y-%m-%d} {self.system}: {self.point}: {self.size:+.1%} "
                f"[{self.low:+.1%}, {self.high:+.1%}]"
                + (f", {self.cause}" if self.cause else "") + f", {state}{fixed}{what}{more}")


def series(rows: Sequence[AttemptRow]
           ) -> dict[tuple[str, Point], list[Campaign]]:
    """Each (system, point)'s campaigns, oldest first (completed attempts only)."""
    grouped: dict[tuple[str, Point], dict[Point, list[AttemptRow]]] = {}
    for r in rows:
        if r.get(col.STATE) != "completed" or not r.get(col.THROUGHPUT_PER_GPU) \
                or r.get(col.ENDED) is None:
            continue
        key = (str(r.get(col.SYSTEM) or "?"), point_of(r))
        campaign = (r.get(col.DIRECTORY), campaign_of(r))
        grouped.setdefault(key, {}).setdefault(campaign, []).append(r)
    out = {}
    for key, campaigns in grouped.items():
        made = [Campaign(ck, min(stored.ended(r) for r in rs),
                         tuple(stored.per_gpu(r) for r in rs), tuple(rs))
                for ck, rs in campaigns.items()]
        out[key] = sorted(made, key=lambda c: c.when)
    return out


def noise(all_series: Sequence[Sequence[Campaign]]) -> Noise:
    """A system's noise from its points' series: sigma pooled over the campaigns with
    repeats; tau from consecutive campaigns' differences (robust to rare steps)."""
    sums, dof = 0.0, 0
    for campaigns in all_series:
        for c in campaigns:
            logs = [math.log(v) for v in c.values]
            if len(logs) > 1:
                m = statistics.fmean(logs)
                sums += sum((x - m) ** 2 for x in logs)
                dof += len(logs) - 1
    diffs = [b.mean_log - a.mean_log for campaigns in all_series
             for a, b in itertools.pairwise(campaigns)]
    spread = None
    if len(diffs) >= 3:
        center = statistics.median(diffs)
        spread = 1.4826 * statistics.median(abs(d - center) for d in diffs)
    if not dof:  # no repeats: the differences alone measure a campaign's whole noise
        if spread is None or len(diffs) < NO_REPEAT_DIFFS:
            return Noise(0.0, 0.0, known=False)
        return Noise(0.0, max(spread / math.sqrt(2), MIN_NOISE))
    sigma = max(math.sqrt(sums / dof), MIN_NOISE)
    if spread is None:
        return Noise(sigma, 0.0)
    within = [sigma ** 2 / len(a.values) + sigma ** 2 / len(b.values)
              for campaigns in all_series for a, b in itertools.pairwise(campaigns)]
    tau2 = max(0.0, (spread ** 2 - statistics.fmean(within)) / 2)
    return Noise(sigma, math.sqrt(tau2))


def _side(campaigns: Sequence[Campaign], n: Noise) -> tuple[float, float]:
    """The weighted mean log throughput of campaigns, and its variance."""
    weights = [1 / n.variance(len(c.values)) for c in campaigns]
    total = sum(weights)
    return sum(w * c.mean_log for w, c in zip(weights, campaigns, strict=True)) / total, 1 / total


def split(campaigns: Sequence[Campaign], n: Noise) -> tuple[int, float] | None:
    """The best split of a segment (the index of the first campaign after it) and its
    z; None for a segment too short to split."""
    best: tuple[int, float] | None = None
    for k in range(MIN_SIDE, len(campaigns) - MIN_SIDE + 1):
        (m1, v1), (m2, v2) = _side(campaigns[:k], n), _side(campaigns[k:], n)
        z = (m2 - m1) / math.sqrt(v1 + v2)
        if best is None or abs(z) > abs(best[1]):
            best = (k, z)
    return best


def cuts(campaigns: Sequence[Campaign], n: Noise, threshold: float = THRESHOLD) -> list[int]:
    """Binary segmentation: the indices where the series changes, in order."""
    found: list[int] = []
    stack = [(0, len(campaigns))]
    while stack:
        start, end = stack.pop()
        if end - start < 2 * MIN_SIDE:
            continue
        got = split(campaigns[start:end], n)
        if got is None or abs(got[1]) < threshold:
            continue
        k = start + got[0]
        found.append(k)
        stack += [(start, k), (k, end)]
    return sorted(found)


def changes(rows: Sequence[AttemptRow], threshold: float = THRESHOLD
            ) -> list[ChangePoint]:
    """Every change point of every point's series, oldest first, with its cause and the
    provenance that changed there."""
    all_series = series(rows)
    by_system: dict[str, list[list[Campaign]]] = {}
    for (system, _), campaigns in all_series.items():
        by_system.setdefault(system, []).append(campaigns)
    noises = {s: noise(v) for s, v in by_system.items()}
    found = []
    for (system, key), campaigns in all_series.items():
        n = noises[system]
        if not n.known:
            continue
        marks = cuts(campaigns, n, threshold)
        bounds = [0, *marks, len(campaigns)]
        confirmed = [k for k in marks if len(campaigns) - k >= CONFIRM]
        # the level since the latest confirmed change (a suspected one after it aside)
        last = bounds.index(confirmed[-1]) if confirmed else 0
        latest = _side(campaigns[bounds[last]:bounds[last + 1]], n)[0]
        for i, k in enumerate(marks):
            before, after = campaigns[bounds[i]:k], campaigns[k:bounds[i + 2]]
            (m1, v1), (m2, v2) = _side(before, n), _side(after, n)
            se = math.sqrt(v1 + v2)
            first = after[0].rows[0]
            later = [j for j in confirmed if j > k]
            fixed = ""
            if m2 < m1 and later and latest - m1 > (m2 - m1) / 2:
                fix = campaigns[later[-1]]
                fixed = (f"back to {math.exp(latest - m1) - 1:+.1%} of before since "
                         f"{fix.when:%Y-%m-%d} ({campaign_of(fix.rows[0])})")
            found.append(ChangePoint(
                system=system, point=describe_point(first), world_size=stored.world_size(first),
                group=_group_of(key), key=key, series=series_label(first), when=after[0].when,
                campaign=str(first.get(col.CAMPAIGN) or first.get(col.STUDY)),
                before=len(before), after=len(after), size=math.exp(m2 - m1) - 1,
                low=math.exp(m2 - m1 - 1.96 * se) - 1, high=math.exp(m2 - m1 + 1.96 * se) - 1,
                z=(m2 - m1) / se,
                changed=tuple(provenance_changes(after[0].rows, before[-1].rows)
                              + _nodes_changed(after[0].rows, before[-1].rows)),
                index=k, total=len(campaigns), fixed=fixed))
    smallest: dict[tuple[str, Point], int] = {}
    for (system, key), campaigns in all_series.items():
        group, size = (system, _group_of(key)), stored.world_size(campaigns[0].rows[0])
        smallest[group] = min(smallest.get(group, size), size)
    return sorted(_with_causes(found, smallest), key=lambda c: (c.when, c.point))


def noises(rows: Sequence[AttemptRow]) -> dict[str, Noise]:
    """Each system's noise, from its points' series (`history check` adds the noise
    between campaigns to the repeats' own; `known` False: the series cannot tell)."""
    by_system: dict[str, list[list[Campaign]]] = {}
    for (system, _), campaigns in series(rows).items():
        by_system.setdefault(system, []).append(campaigns)
    return {s: noise(v) for s, v in by_system.items()}


def cannot_tell(rows: Sequence[AttemptRow]) -> list[str]:
    """The systems whose series have no repeats and too few campaigns to measure their
    noise: no change point is claimed there (one number cannot tell a change from
    noise)."""
    return sorted(s for s, n in noises(rows).items() if not n.known)


def _group_of(key: Point) -> Point:
    """A point key's group: its keys but the scale, and its work."""
    fields = dict(zip(POINT_KEYS, key[:len(POINT_KEYS)], strict=True))
    return (*(fields[k] for k in GROUP_KEYS), key[-1])


def _nodes_changed(after: Sequence[AttemptRow], before: Sequence[AttemptRow]
                   ) -> list[str]:
    """`nodes n1,n2 -> n3,n4` where the runs on either side ran on other hosts."""
    def hosts(rows: Sequence[AttemptRow]) -> str:
        found: set[str] = set()
        for r in rows:
            found.update(str(h) for h in array(member(r, col.PROVENANCE, "placement").get(
                "hosts")))
        return ",".join(sorted(found))

    a, b = hosts(after), hosts(before)
    return [f"nodes {b} -> {a}"] if a and b and a != b else []


def _with_causes(found: list[ChangePoint], smallest: Mapping[tuple[str, Point], int]
                 ) -> list[ChangePoint]:
    """Name each change as history check does: compute where the group's smallest
    measured scale changed too, within a day of it; communication where only larger
    scales did (`smallest`: each group's smallest world size)."""
    out = []
    for c in found:
        base = [o for o in found if (o.system, o.group) == (c.system, c.group)
                and o.world_size == smallest[(c.system, c.group)]
                and abs((o.when - c.when).total_seconds()) <= 86400]
        if c.world_size == smallest[(c.system, c.group)] or base:
            cause = "compute"
        else:
            cause = "communication"
        out.append(ChangePoint(**{**c.__dict__, "cause": cause}))
    return out
