"""How the findings and the headline say numbers: images/s and seconds in the tables'
formats, GPU counts, a point, short lists and spans of fractions."""

from __future__ import annotations

import pandas as pd

from scalestudy.results.analysis.efficiency import format_value

#: Groups named in one sentence; more are counted, not named.
SHOWN = 3


def img_text(value: float) -> str:
    """Images/s as the tables print them."""
    return f"{value:,.0f}" if abs(value) >= 100 else (
        f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}")


def sec_text(value: float) -> str:
    """Seconds as the tables print them (s, ms, µs)."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(value) >= scale or unit == "µs":
            return f"{value / scale:.3g} {unit}"
    return f"{value:g} s"


def gpus_text(p: float) -> str:
    """"1 GPU", "8 GPUs"."""
    return f"{int(p)} GPU{'s' if int(p) != 1 else ''}"


def point_text(row: pd.Series) -> str:
    """A point as "8 GPUs (2 × 4, global batch 128)"."""
    return (f"{gpus_text(row['world_size'])} ({int(row['nodes'])} × {int(row['ranks_per_node'])}"
            f", global batch {format_value(row['global_batch'])})")


def list_text(items: list[str]) -> str:
    """Short items as "a", "a and b", "a, b and c" (at most SHOWN named)."""
    named = items[:SHOWN] + ([f"{len(items) - SHOWN} more"] if len(items) > SHOWN else [])
    return named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]


def span_text(values: list[float] | pd.Series) -> str:
    """Fractions as "12.0%" or "12.0–15.5%" (lowest to highest)."""
    lo, hi = f"{min(values):.1%}", f"{max(values):.1%}"
    return lo if lo == hi else f"{lo[:-1]}–{hi}"


def names_text(items: list[str]) -> str:
    """At most SHOWN items joined, the rest counted."""
    shown = "; ".join(items[:SHOWN])
    return shown + (f"; and {len(items) - SHOWN} more (see the tables)"
                    if len(items) > SHOWN else "")
