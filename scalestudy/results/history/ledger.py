"""The prediction ledger: every forecast `predict` made for a system, scored once a later
study of that system measures the scale it forecast ("predicted 9,840 [9,310–10,400],
measured 9,520: inside"). A forecast is kept once (one entry per source, point and
scale, updated when made again), and scored only against runs of its system and model:
one whose point names no model (a table kept without `--model`) is never scored."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Protocol

from scalestudy.core.values import JSONMapping
from scalestudy.results.analysis import columns as col
from scalestudy.results.history import rows as stored
from scalestudy.results.history.rows import AttemptRow, ForecastRow
from scalestudy.results.history.store import as_utc

#: What a forecast's point names (the work and the way it ran), matched against the
#: stored attempts' columns, or their parameters for the last two.
POINT_COLUMNS: tuple[str, ...] = ("model", "batch_size", "backend", "tuning")
POINT_PARAMS: tuple[str, ...] = ("image_size", "precision")


#: Why a forecast is not scored although runs of its system measured its scale.
NO_MODEL = "not scored: it names no model (keep a table's forecasts with --model)"


class Predicted(Protocol):
    """What the ledger keeps of a prediction (results.analysis.forecast.Prediction)."""

    @property
    def gpus(self) -> int: ...
    @property
    def throughput(self) -> float: ...
    @property
    def low(self) -> float: ...
    @property
    def high(self) -> float: ...
    @property
    def level(self) -> float: ...
    @property
    def unit(self) -> str: ...


def entries(predictions: Iterable[Predicted], *, system: str, source: str,
            point: JSONMapping, model: JSONMapping,
            made: datetime | None = None) -> list[ForecastRow]:
    """The ledger's rows for a forecast's predictions (results.analysis.forecast.Prediction)."""
    when = made or datetime.now(timezone.utc)
    return [{"made": when, "system": system, "source": source, "point": dict(point),
             "gpus": p.gpus, "throughput": p.throughput, "low": p.low, "high": p.high,
             "level": p.level, "unit": p.unit, "model": dict(model)} for p in predictions]


@dataclass(frozen=True)
class Score:
    """One forecast and, once a later study measured its scale, how it did."""

    forecast: ForecastRow
    measured: float | None  # the median throughput measured after it was made
    runs: int  # the completed attempts that measured it
    why: str = ""  # why it is not scored (NO_MODEL), empty where it may be

    @property
    def inside(self) -> bool | None:
        """The measurement fell inside the interval (None: not measured yet)."""
        if self.measured is None:
            return None
        return bool(self.forecast["low"] <= self.measured <= self.forecast["high"])

    @property
    def error(self) -> float | None:
        """Forecast / measured − 1 (positive: the forecast was optimistic)."""
        return None if self.measured is None else self.forecast[col.THROUGHPUT] / self.measured - 1

    def line(self) -> str:
        """`predicted 9,840 img/s [9,310–10,400] at 64 GPUs, measured 9,520: inside`."""
        f = self.forecast
        head = (f"{f['system']}: {_point(f['point'])} at {f['gpus']} GPUs: predicted "
                f"{_rate(f['throughput'])} {f['unit']} [{_rate(f['low'])}–{_rate(f['high'])}] "
                f"on {as_utc(f['made']):%Y-%m-%d} from {f['source']}")
        if self.why:
            return f"{head}: {self.why}"
        if self.measured is None:
            return head + ": not measured yet"
        where = "inside" if self.inside else "outside"
        return (f"{head}, measured {_rate(self.measured)} ({self.runs} run(s)): {where}, "
                f"{self.error:+.1%}")


def score(forecasts: Sequence[ForecastRow], attempts: Sequence[AttemptRow]
          ) -> list[Score]:
    """Each forecast against the completed attempts of its system and point (its model
    named) at its scale that ended after it was made; one naming no model is not scored."""
    out = []
    for f in forecasts:
        if not (f["point"] or {}).get("model"):
            out.append(Score(f.copy(), None, 0, NO_MODEL))
            continue
        made = as_utc(f["made"])
        measured = [stored.throughput(a) for a in attempts
                    if a.get(col.STATE) == "completed" and a.get(col.THROUGHPUT)
                    and a.get(col.SYSTEM) == f[col.SYSTEM] and a.get(col.WORLD_SIZE) == f[col.GPUS]
                    and a.get(col.ENDED) is not None and as_utc(a[col.ENDED]) > made
                    and _matches(a, f["point"])]
        out.append(Score(f.copy(), statistics.median(measured) if measured else None,
                         len(measured)))
    return out


def summary(scores: Sequence[Score]) -> list[dict[str, object]]:
    """Per system: forecasts made, scored, how often the interval held, median |error|."""
    out = []
    for system in dict.fromkeys(s.forecast[col.SYSTEM] for s in scores):
        mine = [s for s in scores if s.forecast[col.SYSTEM] == system]
        scored = [s for s in mine if s.measured is not None]
        out.append({
            "system": system, "forecasts": len(mine), "scored": len(scored),
            "unscorable": sum(bool(s.why) for s in mine),
            "coverage": (sum(bool(s.inside) for s in scored) / len(scored)) if scored else None,
            "median_abs_error": (statistics.median(abs(s.error or 0.0) for s in scored)
                                 if scored else None)})
    return out


def _matches(attempt: AttemptRow, point: JSONMapping) -> bool:
    params = attempt.get(col.PARAMS) or {}
    return all(attempt.get(k) == point[k] for k in POINT_COLUMNS if k in point) and all(
        params.get(k) == point[k] for k in POINT_PARAMS if k in point)


def _point(point: JSONMapping) -> str:
    return " ".join(f"{v}" if k == "model" else f"{k} {v}" for k, v in point.items())


def _rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
