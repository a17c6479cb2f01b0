"""What an adaptive study optimises: throughput, or, when the study has a target, the
time and node-hours to a trained model (pure; results.analysis.adaptive applies it).

With a target, a point's objective is its rate to the target, throughput / S(G): one
over its time to the target, S(G) the samples one training run needs at the point's
global batch G. The throughput bands (measured or projected) become rate bands by that
factor, so every comparison of the rule (beyond the noise, the front of time against
node-hours, a cheaper point on fewer nodes) is made to the target: a batch with a lower
throughput that needs fewer samples wins where it trains sooner.

- Priced target (total_samples or samples_per_epoch x epochs, with critical_batch or
  epochs_per_batch; core.target): S(G) is the rule's, exact, so the bands keep their
  width.
- Measured target (metric, value): S(G) is the median of the point's runs that reached
  it; elsewhere the forecast of target_forecast (from 3 or more global batches that
  reached it), whose interval widens the band.
- A point the target gives no samples for (a batch outside epochs_per_batch's table, too
  few batches reached a measured target, one beyond the forecast's reach) keeps the
  throughput objective; the rule compares it only with points that also do, and the
  journal says why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from scalestudy.core.errors import ScalestudyError
from scalestudy.core.target import Target
from scalestudy.results.analysis.cost import hours
from scalestudy.results.analysis.forecast_limits import MAX_FACTOR
from scalestudy.results.analysis.target_forecast import forecast_to_target

#: The forecast's interval level when it widens a band (the rule's bands are about 95 %).
LEVEL = 0.95
THROUGHPUT = "throughput"
TO_TARGET = "time to the target"


@dataclass(frozen=True)
class Objective:
    """Per point key, the factor (low, mid, high) that turns a throughput into a rate to
    the target (1 / samples); a point without one keeps the throughput objective, and
    `notes` says why."""

    name: str = THROUGHPUT
    factors: Mapping[tuple[str, int], tuple[float, float, float]] = field(
        default_factory=dict)
    notes: tuple[str, ...] = ()
    words: str = "throughput (samples/s)"

    def unit(self, key: tuple[str, int]) -> str:
        """The objective a point is compared by."""
        return TO_TARGET if key in self.factors else THROUGHPUT

    def scale(self, key: tuple[str, int], low: float, mid: float, high: float
              ) -> tuple[float, float, float]:
        """A throughput band as this point's objective band (higher is better)."""
        f = self.factors.get(key)
        if f is None:
            return low, mid, high
        return low * f[0], mid * f[1], high * f[2]

    def text(self, key: tuple[str, int], value: float) -> str:
        """A value of the objective in words: a throughput, or a time to the target."""
        if key not in self.factors:
            return f"{value:,.4g}/s"
        return f"{hours(1 / value)} to the target" if value > 0 else "never"


def objective(target: Target | None, batches: Mapping[tuple[str, int], float],
              smallest_batch: float,
              samples: Mapping[tuple[str, int], Sequence[float]] | None = None
              ) -> Objective:
    """The study's objective: per point key (with its global batch in `batches`), the
    rate factor, from a priced target's rule or a measured target's runs (`samples`:
    the samples to the target of each point's runs that reached it)."""
    if target is None:
        return Objective()
    if target.priced:
        return _priced(target, batches, smallest_batch)
    if target.measured:
        return _measured(target, batches, samples or {})
    return Objective()


def _priced(target: Target, batches: Mapping[tuple[str, int], float],
            smallest_batch: float) -> Objective:
    factors: dict[tuple[str, int], tuple[float, float, float]] = {}
    missing: dict[float, list[tuple[str, int]]] = {}
    for key, batch in batches.items():
        s = target.samples(batch, smallest_batch)
        if s is None or s <= 0:
            missing.setdefault(batch, []).append(key)
        else:
            factors[key] = (1 / s, 1 / s, 1 / s)
    notes = tuple(f"global batch {b:,.0f} ({len(keys)} point(s)): the target's table "
                  "gives no samples for it, so these points are compared by throughput, "
                  "and only with each other" for b, keys in sorted(missing.items()))
    return Objective(TO_TARGET, factors, notes, f"time to the target: {target.describe()}")


def _measured(target: Target, batches: Mapping[tuple[str, int], float],
              samples: Mapping[tuple[str, int], Sequence[float]]) -> Objective:
    factors: dict[tuple[str, int], tuple[float, float, float]] = {}
    runs_b = [batches[k] for k, v in samples.items() if k in batches for _ in v]
    runs_s = [float(x) for k, v in samples.items() if k in batches for x in v]
    for key, values in samples.items():
        if key in batches and values:
            med = float(np.median(values))
            lo, hi = min(values), max(values)
            factors[key] = (1 / hi, 1 / med, 1 / lo)
    asked = sorted({b for k, b in batches.items() if k not in factors})
    notes: list[str] = []
    if asked and len(set(runs_b)) >= 3:
        reach = [b for b in asked if b <= max(runs_b) * MAX_FACTOR]
        try:
            got = forecast_to_target(np.array(runs_b), np.array(runs_s), reach,
                                     level=LEVEL) if reach else None
        except ScalestudyError as err:  # the forecast refuses: say so, compare by img/s
            got, reach = None, []
            notes.append(f"no forecast of the samples to the target: {err}")
        by_batch = {p.global_batch: p for p in (got.predictions if got else [])}
        for key, batch in batches.items():
            p = by_batch.get(batch)
            if key not in factors and p is not None:
                factors[key] = (1 / p.high, 1 / p.value, 1 / p.low)
    left = sorted({b for k, b in batches.items() if k not in factors})
    if left:
        why = ("fewer than 3 global batches have reached the target yet, so no forecast"
               if len(set(runs_b)) < 3 else "beyond the forecast's reach")
        notes.append(f"global batch(es) {', '.join(f'{b:,.0f}' for b in left)}: {why}; "
                     "compared by throughput, and only with each other")
    return Objective(TO_TARGET, factors, tuple(notes),
                     f"time to the target: {target.describe_measured()} (measured "
                     "samples, or their forecast, over the throughput)")
