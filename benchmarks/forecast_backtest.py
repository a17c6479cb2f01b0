"""Backtest `predict` on published multi-scale results (tests/data/forecast/*.csv, sources
in its SOURCES.md): fit each series on its three smallest scales, forecast the larger
ones, and print the median |error| at <= 4x and >= 8x the largest fitted scale, the mean
signed error (the lean: positive is optimistic), and how often the 90 % interval held the
published figure, per series and overall.

    python benchmarks/forecast_backtest.py [--fit 3] [--json]

tests/test_forecast_backtest.py runs the same scoring and keeps it from getting worse.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scalestudy.results.analysis.forecast import forecast  # noqa: E402
from scalestudy.results.analysis.forecast_table import read_table  # noqa: E402

CORPUS = ROOT / "tests" / "data" / "forecast"


@dataclass(frozen=True)
class Scored:
    """One forecast against the published figure."""

    series: str
    gpus: int
    factor: float  # GPUs / the largest fitted scale
    error: float  # predicted / published - 1
    inside: bool


def backtest(fit: int = 3, level: float = 0.9) -> list[Scored]:
    """Every series of the corpus fitted on its `fit` smallest scales, scored above."""
    out = []
    for path in sorted(CORPUS.glob("*.csv")):
        frame, unit, per_node = read_table(path)
        scales = sorted(frame["gpus"].unique())
        if len(scales) <= fit:
            continue
        known = frame[frame["gpus"].isin(scales[:fit])]
        asked = [int(g) for g in scales[fit:]]
        got = forecast(known, asked, level=level, gpus_per_node=per_node, unit=unit)
        top = max(scales[:fit])
        for p in got.predictions:
            published = float(frame.loc[frame["gpus"] == p.gpus, "throughput"].median())
            out.append(Scored(path.stem, p.gpus, p.gpus / top, p.throughput / published - 1,
                              p.low <= published <= p.high))
    return out


def summary(scored: list[Scored]) -> dict[str, float]:
    """Median |error| near (<= 4x) and far (>= 8x), the lean, the coverage."""
    near = [abs(s.error) for s in scored if s.factor <= 4]
    far = [abs(s.error) for s in scored if s.factor >= 8]
    return {"points": len(scored), "series": len({s.series for s in scored}),
            "median_abs_error_le4x": statistics.median(near) if near else float("nan"),
            "median_abs_error_ge8x": statistics.median(far) if far else float("nan"),
            "mean_signed_error": statistics.fmean(s.error for s in scored),
            "coverage": statistics.fmean(s.inside for s in scored)}


#: The calibration grid: lean and spread per doubling (results/analysis/forecast.py's constants).
GRID = [(lean, spread) for lean in (0.0, 0.01, 0.02, 0.03)
        for spread in (0.0, 0.01, 0.02, 0.03, 0.05, 0.07)]


def cross_validated(fit: int = 3) -> list[Scored]:
    """Each series scored with the constants the other series choose (leave one series
    out): how the calibration does on a series it did not see."""
    import scalestudy.results.analysis.forecast as model

    kept = (model.LEAN_PER_DOUBLING, model.SPREAD_PER_DOUBLING)
    try:
        runs = {}
        for lean, spread in GRID:
            model.LEAN_PER_DOUBLING, model.SPREAD_PER_DOUBLING = lean, spread
            runs[(lean, spread)] = backtest(fit)
        out = []
        for series in dict.fromkeys(s.series for s in runs[GRID[0]]):
            def cost(key: tuple[float, float], series: str = series) -> float:
                rest = [s for s in runs[key] if s.series != series]
                total = summary(rest)
                return abs(total["mean_signed_error"]) + abs(total["coverage"] - 0.9)
            best = min(GRID, key=cost)
            out += [s for s in runs[best] if s.series == series]
        return out
    finally:
        model.LEAN_PER_DOUBLING, model.SPREAD_PER_DOUBLING = kept


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", type=int, default=3, help="smallest scales fitted on")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    scored = backtest(args.fit)
    total = summary(scored)
    if args.json:
        print(json.dumps({"overall": total, "points": [s.__dict__ for s in scored]},
                         indent=1))
        return 0
    for series in dict.fromkeys(s.series for s in scored):
        mine = [s for s in scored if s.series == series]
        cells = ", ".join(f"{s.gpus} ({s.factor:g}x): {s.error:+.1%}{'' if s.inside else ' !'}"
                          for s in mine)
        print(f"{series}: {cells}")
    print(f"overall, {total['points']} points of {total['series']} series: median |error| "
          f"{total['median_abs_error_le4x']:.1%} at <= 4x, {total['median_abs_error_ge8x']:.1%} "
          f"at >= 8x; mean signed error {total['mean_signed_error']:+.1%}; 90 % intervals "
          f"held {total['coverage']:.0%} ('!' marks a miss)")
    held = summary(cross_validated(args.fit))
    print(f"leave one series out (each scored with the lean and spread the others choose): "
          f"median |error| {held['median_abs_error_le4x']:.1%} at <= 4x, "
          f"{held['median_abs_error_ge8x']:.1%} at >= 8x; mean signed error "
          f"{held['mean_signed_error']:+.1%}; 90 % intervals held {held['coverage']:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
