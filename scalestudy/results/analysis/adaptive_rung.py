"""Successive halving within a rung of an adaptive study (pure; results.analysis.adaptive
calls it): the points of one node count get their repeats one at a time, and after each
the worse half stops.

At one node count, a faster point is also the cheaper one (node-hours = nodes x time),
so only the best can be on the front of time against node-hours there: measuring the
others' every repeat buys nothing. After each repeat the open points of the rung are
ranked by the objective (throughput, or the rate to the target); the better half
(ceil(n/2)) goes on, and so does every point whose band overlaps the best one's (the
noise cannot separate them: a tie is never dropped). The rest stop with the repeats they
have: measured partly. Only the point stops; its alternative still goes to its next node
count, where it may win (the rule's other parts decide that).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

Key = tuple[str, int]
#: (low, mid, high) of a point's objective, higher better, and the objective's name.
Band = tuple[float, float, float]


def halve(keys: Sequence[Key], bands: Mapping[Key, Band], units: Mapping[Key, str],
          repeats: int, text: Callable[[Key, float], str]
          ) -> tuple[list[Key], list[tuple[Key, str]]]:
    """(the keys that go on, [(a key that stops, the evidence)]) for the open points of
    one node count, each measured `repeats` times. Points compared by different
    objectives (a batch the target gives no samples for) are halved apart; a point with
    no band (its repeats failed) goes on."""
    kept: list[Key] = [k for k in keys if k not in bands]
    stopped: list[tuple[Key, str]] = []
    for unit in dict.fromkeys(units[k] for k in keys if k in bands):
        group = sorted((k for k in keys if k in bands and units[k] == unit),
                       key=lambda k: -bands[k][1])
        best = group[0]
        half = math.ceil(len(group) / 2)
        for rank, key in enumerate(group):
            if rank < half or bands[key][2] >= bands[best][0]:
                kept.append(key)
                continue
            ratio = bands[key][1] / bands[best][1] - 1
            stopped.append((key, (
                f"bottom half at {key[1]} node(s) after {repeats} repeat(s): "
                f"{text(key, bands[key][1])} against {text(best, bands[best][1])} for "
                f"{best[0]} ({ratio:+.1%} by {unit}, beyond the noise); on that many "
                "nodes the faster point is the cheaper one too")))
    order = {k: i for i, k in enumerate(keys)}
    return sorted(kept, key=order.__getitem__), stopped
