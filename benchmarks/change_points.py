"""Change points head to head with Apache Otava (E-divisive means with a t-test) on the
same synthetic series: unchanged ones, steps and drifts of 2 to 20 %, with a noise
within a campaign (repeats) and between campaigns (nights). scalestudy's detector
(results.history.changes) sees each campaign's repeats; Otava its campaign means, as a
benchmark dashboard would feed it.

    pip install apache-otava   # into a venv of its own if it would move your numpy
    python benchmarks/change_points.py [--trials 200] [--json]

Printed per detector: recall (changed series whose change was found within the window
where it happened, 3 campaigns either side: small steps are placed that loosely by
either detector), false alarms per 1,000 point-campaigns (a change reported anywhere
else), and Otava's false alarms at the p-value that gives it at
least scalestudy's recall. Then the issue's figures: a 5 % drop at CV 2 % found within 3
campaigns, and false alarms on unchanged reruns. Exit 0 when scalestudy has at most half
Otava's false alarms at the same recall, finds >= 95 % of the 5 % drops within 3
campaigns and stays at or below 1 false alarm per 1,000 point-campaigns.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scalestudy.results.history.changes import THRESHOLD, Campaign, cuts, noise  # noqa: E402

START = datetime(2026, 1, 1)
CAMPAIGNS = 30
REPEATS = 3
SIBLINGS = 7  # unchanged points of the same system: what the noise is estimated from
P_VALUES = (0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.002, 0.001, 1e-4, 1e-5)
#: scalestudy's thresholds tried beside its own (THRESHOLD): the other points of its curve
OTHER_THRESHOLDS = (3.0, 3.5, 4.5)


def series(rng: np.random.Generator, sigma: float, tau: float, shape: np.ndarray
           ) -> list[Campaign]:
    """One point's campaigns: level shape (1 = unchanged) x campaign noise x repeats."""
    shift = rng.normal(0, tau, len(shape))
    values = 100 * shape[:, None] * np.exp(shift[:, None]
                                          + rng.normal(0, sigma, (len(shape), REPEATS)))
    return [Campaign((i,), START + timedelta(days=i), tuple(map(float, values[i])), ())
            for i in range(len(shape))]


def shapes(rng: np.random.Generator, kind: str, size: float, length: int = CAMPAIGNS
           ) -> tuple[np.ndarray, tuple[int, int]]:
    """The level along the series and the window a change must be reported in."""
    level = np.ones(length)
    if kind == "none":
        return level, (-1, -1)
    start = int(rng.integers(10, length - 5))
    if kind == "step":
        level[start:] = 1 + size
        return level, (start - 3, start + 3)
    span = 8
    ramp = np.clip((np.arange(length) - start + 1) / span, 0, 1)
    return 1 + size * ramp, (start - 3, min(length, start + span + 3))


def ours(campaigns: list[Campaign], siblings: list[list[Campaign]],
         threshold: float = THRESHOLD) -> list[int]:
    return cuts(campaigns, noise([campaigns, *siblings]), threshold)


def otava(campaigns: list[Campaign], p_value: float) -> list[int]:
    from otava.analysis import compute_change_points

    means = [float(np.mean(c.values)) for c in campaigns]
    found, _ = compute_change_points(means, window_len=len(means), max_pvalue=p_value)
    return [int(c.index) for c in found]


def score(found: list[int], window: tuple[int, int]) -> tuple[bool, int]:
    """(the change was found, false alarms)."""
    hit = [k for k in found if window[0] <= k <= window[1]]
    return bool(hit), len(found) - len(hit)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--sigma", type=float, default=0.02)
    parser.add_argument("--tau", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    cases = [("none", 0.0)] * 3 + [(k, -s) for k in ("step", "drift")
                                   for s in (0.02, 0.05, 0.10, 0.20)]
    tally: dict[str, dict[str, float]] = {}
    for name in ("scalestudy", *(f"scalestudy z>{t:g}" for t in OTHER_THRESHOLDS),
                 *(f"otava p={p:g}" for p in P_VALUES)):
        tally[name] = {"found": 0, "changed": 0, "false": 0, "campaigns": 0}
    per_case: dict[str, dict[str, float]] = {}
    for kind, size in cases:
        label = f"{kind} {size:+.0%}" if kind != "none" else "unchanged"
        row = per_case.setdefault(label, {"scalestudy": 0, "otava": 0, "trials": 0})
        for _ in range(args.trials):
            level, window = shapes(rng, kind, size)
            mine = series(rng, args.sigma, args.tau, level)
            siblings = [series(rng, args.sigma, args.tau, np.ones(CAMPAIGNS))
                        for _ in range(SIBLINGS)]
            answers = {"scalestudy": ours(mine, siblings),
                       **{f"scalestudy z>{t:g}": ours(mine, siblings, t)
                          for t in OTHER_THRESHOLDS},
                       **{f"otava p={p:g}": otava(mine, p) for p in P_VALUES}}
            row["trials"] += 1
            for name, found in answers.items():
                hit, false = score(found, window) if kind != "none" else (False, len(found))
                t = tally[name]
                t["changed"] += kind != "none"
                t["found"] += hit
                t["false"] += false
                t["campaigns"] += CAMPAIGNS
            row["scalestudy"] += score(answers["scalestudy"], window)[0] if kind != "none" else 0
            row["otava"] += score(answers["otava p=0.001"], window)[0] if kind != "none" else 0
    summary = {name: {"recall": t["found"] / t["changed"],
                      "false_per_1000": 1000 * t["false"] / t["campaigns"]}
               for name, t in tally.items()}
    mine = summary["scalestudy"]
    matched = next((name for name in (f"otava p={p:g}" for p in P_VALUES[::-1])
                    if summary[name]["recall"] >= mine["recall"]), None)
    early = early_detection(rng, args.sigma, args.trials * 5)
    quiet = unchanged_rate(rng, args.sigma, args.tau, args.trials * 5)
    result = {"sigma": args.sigma, "tau": args.tau, "trials": args.trials,
              "summary": summary, "matched_otava": matched,
              "per_case": {k: {"scalestudy": v["scalestudy"] / v["trials"],
                               "otava p=0.001": v["otava"] / v["trials"]}
                           for k, v in per_case.items() if k != "unchanged"},
              "drop_5pct_cv2_within_3": early, "unchanged_false_per_1000": quiet}
    if args.json:
        print(json.dumps(result))
    else:
        for name, s in summary.items():
            print(f"{name:>16}: recall {s['recall']:.1%}, {s['false_per_1000']:.2f} false "
                  "alarms per 1,000 point-campaigns")
        print(f"Otava at the same recall (the strictest p with at least scalestudy's "
              f"z>{THRESHOLD:g} recall): {matched}")
        for k, v in result["per_case"].items():
            print(f"  {k:>12}: scalestudy {v['scalestudy']:.0%}, Otava (p=0.001) "
                  f"{v['otava p=0.001']:.0%}")
        print(f"5 % drop at CV {args.sigma:.0%}, found within 3 campaigns: {early:.1%}")
        print(f"unchanged reruns: {quiet:.3f} false alarms per 1,000 point-campaigns")
    ok = (matched is not None and mine["false_per_1000"]
          <= 0.5 * summary[matched]["false_per_1000"] + 1e-12
          and early >= 0.95 and quiet <= 1.0)
    return 0 if ok else 1


def early_detection(rng: np.random.Generator, sigma: float, trials: int) -> float:
    """A 5 % drop at CV `sigma` (no campaign noise beyond it): found at most 3 campaigns
    after it (the series ends there), as a share of trials."""
    found = 0
    for _ in range(trials):
        level = np.ones(13)
        level[10:] = 0.95
        mine = series(rng, sigma, 0.0, level)
        siblings = [series(rng, sigma, 0.0, np.ones(13)) for _ in range(SIBLINGS)]
        found += any(9 <= k <= 12 for k in ours(mine, siblings))
    return found / trials


def unchanged_rate(rng: np.random.Generator, sigma: float, tau: float, trials: int) -> float:
    """False alarms per 1,000 point-campaigns of unchanged reruns."""
    false = 0
    for _ in range(trials):
        mine = series(rng, sigma, tau, np.ones(CAMPAIGNS))
        siblings = [series(rng, sigma, tau, np.ones(CAMPAIGNS)) for _ in range(SIBLINGS)]
        false += len(ours(mine, siblings))
    return 1000 * false / (trials * CAMPAIGNS)


if __name__ == "__main__":
    sys.exit(main())
