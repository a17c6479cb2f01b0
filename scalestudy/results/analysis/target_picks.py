"""What `--deadline` and `--budget` pick on the front to the target (target_front), among
measured and forecast points, with the interval used honestly.

- `--deadline D`: the cheapest point (node-hours to the target) that meets D: the long end
  of its interval, plus its expected queue wait, is within D. Where a cheaper point meets D
  only with its central value, it is named too: it "likely meets" D, with how far its
  interval reaches. With no point that surely meets D, the cheapest that likely meets it;
  with none at all, the first to finish.
- `--budget B`: the fastest point (time to the target) whose node-hours fit B, the long
  end included; a faster point that fits only with its central value "likely fits"; with
  none, the cheapest point.

Each pick is a record (summary.json's `cost.target_picks`) and one sentence (the report's
picks, cost.pick_sentences' words for the target).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.cost import hours, node_hours_text, point_name
from scalestudy.results.analysis.efficiency import format_value
from scalestudy.results.analysis.summary import records

MEETS, LIKELY, MISSES = "meets", "likely meets", "does not meet"
#: What a pick is to its option: the pick itself, a cheaper (or faster) point that only
#: likely meets it, or what comes closest when nothing does.
PICK, LIKELIER, CLOSEST = "pick", "likely alternative", "closest"


@dataclass(frozen=True)
class Pick:
    """One point an option names, why, and the sentence that says it."""

    option: str  # "deadline" | "budget"
    limit: float  # the deadline in seconds, the budget in node-hours
    role: str  # PICK, LIKELIER or CLOSEST
    verdict: str  # MEETS, LIKELY or MISSES (for a budget: whether it fits)
    point: dict[str, object]  # the front's row (target_front.FRONT_COLUMNS)
    sentence: str

    def as_dict(self) -> dict[str, object]:
        """The pick as summary.json keeps it."""
        return {"option": self.option, "limit": self.limit,
                "limit_unit": "s" if self.option == "deadline" else "node-hours",
                "role": self.role, "verdict": self.verdict, "point": self.point,
                "sentence": self.sentence}


def target_picks(front: pd.DataFrame, deadline_s: float | None,
                 budget_node_hours: float | None) -> list[Pick]:
    """What the deadline and the budget pick on the front (nothing without points)."""
    out: list[Pick] = []
    if front.empty:
        return [_nothing(option, limit) for option, limit in (
            ("deadline", deadline_s), ("budget", budget_node_hours)) if limit is not None]
    if deadline_s is not None:
        out += _deadline(front, deadline_s)
    if budget_node_hours is not None:
        out += _budget(front, budget_node_hours)
    return out


def _deadline(front: pd.DataFrame, limit: float) -> list[Pick]:
    head = f"Deadline {hours(limit)}, to the target:"
    sure = front[front["finish_high_s"] <= limit]
    likely = front[(front["finish_s"] <= limit) & (front["finish_high_s"] > limit)]
    if len(sure):
        got = _least(sure, col.NODE_HOURS, "time_to_target_s")
        out = [_pick("deadline", limit, PICK, MEETS, got,
                     f"{head} the cheapest point that meets it, its interval's long end "
                     f"included, is {_name(got)}: {_time(got)}, for {_nh(got)}.")]
        cheaper = likely[likely[col.NODE_HOURS] < got[col.NODE_HOURS]]
        if len(cheaper):
            alt = _least(cheaper, col.NODE_HOURS, "time_to_target_s")
            out.append(_pick("deadline", limit, LIKELIER, LIKELY, alt,
                             f"Cheaper, {_name(alt)} likely meets it "
                             f"({_upto(alt, 'finish_high_s', hours)}): {_time(alt)}, for "
                             f"{_nh(alt)}."))
        return out
    if len(likely):
        got = _least(likely, col.NODE_HOURS, "time_to_target_s")
        return [_pick("deadline", limit, PICK, LIKELY, got,
                      f"{head} no point meets it with its whole interval; the cheapest that "
                      f"likely meets it ({_upto(got, 'finish_high_s', hours)}) is "
                      f"{_name(got)}: {_time(got)}, for {_nh(got)}.")]
    first = _least(front, "finish_s", col.NODE_HOURS)
    return [_pick("deadline", limit, CLOSEST, MISSES, first,
                  f"{head} no measured or forecast point meets it; the first to finish is "
                  f"{_name(first)}: {_time(first)}, for {_nh(first)}.")]


def _budget(front: pd.DataFrame, limit: float) -> list[Pick]:
    head = f"Budget {limit:g} node-hours, to the target:"
    sure = front[front["node_hours_high"] <= limit]
    likely = front[(front[col.NODE_HOURS] <= limit) & (front["node_hours_high"] > limit)]
    if len(sure):
        got = _least(sure, "time_to_target_s", col.NODE_HOURS)
        out = [_pick("budget", limit, PICK, MEETS, got,
                     f"{head} the fastest point that fits it, its interval's long end "
                     f"included, is {_name(got)}: {_time(got, wait=False)}, for "
                     f"{_nh(got)}.")]
        faster = likely[likely["time_to_target_s"] < got["time_to_target_s"]]
        if len(faster):
            alt = _least(faster, "time_to_target_s", col.NODE_HOURS)
            out.append(_pick("budget", limit, LIKELIER, LIKELY, alt,
                             f"Faster, {_name(alt)} likely fits it "
                             f"({_upto(alt, 'node_hours_high', node_hours_text)}): "
                             f"{_time(alt, wait=False)}, for {_nh(alt)}."))
        return out
    if len(likely):
        got = _least(likely, "time_to_target_s", col.NODE_HOURS)
        return [_pick("budget", limit, PICK, LIKELY, got,
                      f"{head} no point fits it with its whole interval; the fastest that "
                      f"likely fits it ({_upto(got, 'node_hours_high', node_hours_text)}) is "
                      f"{_name(got)}: {_time(got, wait=False)}, for {_nh(got)}.")]
    cheapest = _least(front, col.NODE_HOURS, "time_to_target_s")
    return [_pick("budget", limit, CLOSEST, MISSES, cheapest,
                  f"{head} no measured or forecast point fits it; the cheapest is "
                  f"{_name(cheapest)}: {_nh(cheapest)}, in {_time(cheapest, wait=False)}.")]


def _nothing(option: str, limit: float) -> Pick:
    """No point has a time to the target: none reached it and none is forecast."""
    head = (f"Deadline {hours(limit)}" if option == "deadline"
            else f"Budget {limit:g} node-hours")
    return Pick(option, limit, CLOSEST, MISSES, {},
                f"{head}, to the target: no point has a time to the target yet (no run "
                "reached it, and no forecast reaches any point).")


def _least(rows: pd.DataFrame, by: str, then: str) -> pd.Series:
    """The row with the least `by` (ties: the least `then`)."""
    return rows.sort_values([by, then], kind="stable").iloc[0]


def _pick(option: str, limit: float, role: str, verdict: str, row: pd.Series,
          sentence: str) -> Pick:
    return Pick(option, limit, role, verdict, records(row.to_frame().T)[0], sentence)


def _name(row: pd.Series) -> str:
    """`4 nodes (16 GPUs) (global batch 128; forecast: throughput forecast × samples
    forecast)`."""
    group = str(row[col.GROUP])
    batch = "" if "global batch" in group else (
        f", global batch {format_value(row[col.GLOBAL_BATCH])}")
    return (f"{point_name(row)} ({group}{batch}; {row['kind']}: {row['basis']})"
            if group else f"{point_name(row)} (global batch "
            f"{format_value(row[col.GLOBAL_BATCH])}; {row['kind']}: {row['basis']})")


def _time(row: pd.Series, wait: bool = True) -> str:
    """`2.1 h [1.8 h–2.6 h] to the target, after an expected 12 min in the queue`."""
    said = f"{hours(row['time_to_target_s'])}{_band(row, 'time', hours)} to the target"
    queue = float(row["queue_wait_s"])
    return said + (f", after an expected {hours(queue)} in the queue"
                   if wait and math.isfinite(queue) else "")


def _nh(row: pd.Series) -> str:
    return node_hours_text(float(row[col.NODE_HOURS])) + _band(row, "node_hours", _nh_short)


def _nh_short(value: float) -> str:
    return f"{value:,.3g}"


def _band(row: pd.Series, stem: str, say: Callable[[float], str]) -> str:
    """` [low–high]` of a point's interval ("" where it has no width)."""
    low, high = float(row[f"{stem}_low"]), float(row[f"{stem}_high"])
    return "" if math.isclose(low, high) else f" [{say(low)}–{say(high)}]"


def _upto(row: pd.Series, column: str, say: Callable[[float], str]) -> str:
    """`90 % interval up to 6.8 h`, the queue wait included where it is known."""
    level = float(row["level"])
    what = f"{level * 100:.0f} % interval" if level > 0 else "interval of no stated coverage"
    queue = column == "finish_high_s" and math.isfinite(float(row["queue_wait_s"]))
    return f"{what} up to {say(float(row[column]))}" + (
        ", queue wait included" if queue else "")


def pick_sentences(picks: list[Pick]) -> list[str]:
    """The picks' sentences, in order."""
    return [p.sentence for p in picks]
