"""A table of measured points for `predict`: a CSV a user writes from a vendor's published
results, checked row by row (what is wrong, on which line and column, and how to fix it).

Columns: `gpus` and `throughput` are required; `nodes`, `gpus_per_node`, `per_gpu_batch`,
`global_batch`, `unit` (a free label: images/s, tokens/s, sequences/s, TFLOP/s..., the
same on every row), `per_gpu` (true when the figure is per GPU, else the total) and a
transformer's layout, `tp`, `pp` and `microbatches` (per optimizer step; the pipeline's
bubble is (pp − 1) / (microbatches + pp − 1), microbatches = pp when not given), are
optional; an empty cell is not known. Several rows of one scale are its repeats.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import TypedDict, cast

import pandas as pd

from scalestudy.core.errors import ScalestudyError

REQUIRED: tuple[str, ...] = ("gpus", "throughput")
OPTIONAL: tuple[str, ...] = ("nodes", "gpus_per_node", "per_gpu_batch", "global_batch",
                             "unit", "per_gpu", "tp", "pp", "microbatches")
_INTEGERS = ("gpus", "nodes", "gpus_per_node", "per_gpu_batch", "global_batch", "tp", "pp",
             "microbatches")
_TRUE, _FALSE = ("true", "yes", "1"), ("false", "no", "0")


class _Point(TypedDict):
    """One row, checked: the columns in the table's order (REQUIRED, OPTIONAL), then the
    pipeline's bubble."""

    gpus: int
    throughput: float
    nodes: int | None
    gpus_per_node: int | None
    per_gpu_batch: int | None
    global_batch: int | None
    unit: str | None
    per_gpu: bool
    tp: int | None
    pp: int | None
    microbatches: int | None
    bubble_fraction: float


def read_table(path: Path) -> tuple[pd.DataFrame, str, int | None]:
    """(points with the total throughput, the unit, GPUs per node where the table says)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScalestudyError(f"{path}: cannot read it ({exc})") from None
    rows = list(csv.reader(text.splitlines()))
    if not rows:
        raise ScalestudyError(f"{path}: empty; its first line names the columns, e.g. "
                              "gpus,throughput,unit")
    header = [h.strip().lower() for h in rows[0]]
    missing = [c for c in REQUIRED if c not in header]
    unknown = [c for c in header if c not in (*REQUIRED, *OPTIONAL)]
    if missing or unknown:
        raise ScalestudyError(
            f"{path}:1: " + "; ".join(
                [f"no {c!r} column (required)" for c in missing]
                + [f"column {c!r} is not one predict reads" for c in unknown])
            + f": the columns are {', '.join(REQUIRED)} and optionally {', '.join(OPTIONAL)}")
    out = []
    for line, cells in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in cells):
            continue
        if len(cells) != len(header):
            raise ScalestudyError(f"{path}:{line}: {len(cells)} cells for {len(header)} "
                                  "columns: give one cell a column (an empty one if unknown)")
        out.append(_row(path, line, dict(zip(header, (c.strip() for c in cells),
                                             strict=True))))
    if not out:
        raise ScalestudyError(f"{path}: no rows under its header")
    units = {r["unit"] for r in out if r["unit"]}
    if len(units) > 1:
        raise ScalestudyError(f"{path}: the rows mix units ({', '.join(sorted(units))}): one "
                              "table is one series in one unit")
    per_node = {r["gpus_per_node"] for r in out if r["gpus_per_node"]}
    if len(per_node) > 1:
        raise ScalestudyError(f"{path}: gpus_per_node differs across rows "
                              f"({', '.join(map(str, sorted(per_node)))}): one system a table")
    frame = pd.DataFrame(out)
    if frame["gpus"].nunique() < 3:
        raise ScalestudyError(
            f"{path}: {frame['gpus'].nunique()} scale(s) (distinct gpus): a forecast needs "
            "points at 3 scales or more")
    return frame, units.pop() if units else "throughput", per_node.pop() if per_node else None


def _row(path: Path, line: int, cells: dict[str, str]) -> _Point:
    """One row, checked: numbers where numbers go, the total throughput."""
    values: dict[str, object] = {}
    for name in (*REQUIRED, *OPTIONAL):
        raw = cells.get(name, "")
        if name == "unit":
            values[name] = raw or None
        elif name == "per_gpu":
            if raw and raw.lower() not in (*_TRUE, *_FALSE):
                raise ScalestudyError(f"{path}:{line}: per_gpu: {raw!r} is not true or false")
            values[name] = raw.lower() in _TRUE
        elif not raw:
            if name in REQUIRED:
                raise ScalestudyError(f"{path}:{line}: {name}: empty, and it is required")
            values[name] = None
        else:
            values[name] = _number(path, line, name, raw)
    # Every column is set now, with its type (int for _INTEGERS); the bubble follows.
    point = cast(_Point, values)
    if point["gpus_per_node"] and point["nodes"] and \
            point["nodes"] * point["gpus_per_node"] != point["gpus"]:
        raise ScalestudyError(f"{path}:{line}: nodes × gpus_per_node is not gpus")
    replica = int(point["tp"] or 1) * int(point["pp"] or 1)
    if int(point["gpus"]) % replica:
        raise ScalestudyError(f"{path}:{line}: tp × pp ({replica}) does not divide gpus: "
                              "every data-parallel replica holds tp × pp GPUs")
    pp = int(point["pp"] or 1)
    point["bubble_fraction"] = (pp - 1) / (int(point["microbatches"] or pp) + pp - 1)
    if point["per_gpu"]:
        point["throughput"] = float(point["throughput"]) * int(point["gpus"])
    return point


def _number(path: Path, line: int, name: str, raw: str) -> float | int:
    try:
        value = float(raw.replace(",", "")) if name not in _INTEGERS else int(raw)
    except ValueError:
        kind = "a whole number" if name in _INTEGERS else "a number"
        raise ScalestudyError(f"{path}:{line}: {name}: {raw!r} is not {kind}") from None
    if not math.isfinite(value) or value <= 0:
        raise ScalestudyError(f"{path}:{line}: {name}: {raw!r} must be above 0")
    return value
