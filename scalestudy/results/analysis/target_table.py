"""A table of samples (or epochs) to a target against the global batch, for `predict
--to-target`: a CSV checked row by row (what is wrong, on which line and column, how to fix).

Columns: `global_batch` and one of `samples_to_target` or `epochs_to_target` (the unit of
the forecast; with both, samples are read). One row per run: the seeds of one global batch
repeat it. Other columns (seed, benchmark, notes) are ignored. A study's own runs.csv
reads as it is: a run that did not complete (`state`) or did not reach the target
(`target_reached` false) has no samples to the target, and its row is left out.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from scalestudy.core.errors import ScalestudyError

#: The value columns, in the order one is chosen, with the unit each gives.
VALUE_COLUMNS: dict[str, str] = {"samples_to_target": "samples", "epochs_to_target": "epochs"}
#: Distinct global batches a forecast needs (a 2-parameter law, and one batch to spare).
MIN_BATCHES = 3


def read_target_table(path: Path) -> tuple[np.ndarray, np.ndarray, str]:
    """(global batch of each run, its samples or epochs to the target, the unit) of a CSV."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScalestudyError(f"{path}: cannot read it ({exc})") from None
    rows = [r for r in csv.reader(line for line in text.splitlines()
                                  if not line.lstrip().startswith("#"))]
    if not rows:
        raise ScalestudyError(f"{path}: empty; its first line names the columns, e.g. "
                              "global_batch,samples_to_target")
    header = [h.strip().lower() for h in rows[0]]
    value = next((c for c in VALUE_COLUMNS if c in header), None)
    if "global_batch" not in header or value is None:
        missing = [c for c, ok in (("global_batch", "global_batch" in header),
                                   ("samples_to_target or epochs_to_target", value))
                   if not ok]
        raise ScalestudyError(f"{path}:1: no {' and no '.join(missing)} column: the "
                              "columns are global_batch and samples_to_target (or "
                              "epochs_to_target), one row per run")
    at_b, at_v = header.index("global_batch"), header.index(value)
    state = header.index("state") if "state" in header else None
    reached = header.index("target_reached") if "target_reached" in header else None
    batches: list[float] = []
    values: list[float] = []
    for line, cells in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in cells):
            continue
        if len(cells) != len(header):
            raise ScalestudyError(f"{path}:{line}: {len(cells)} cells for {len(header)} "
                                  "columns: give one cell a column")
        if (state is not None and cells[state].strip() != "completed") or (
                reached is not None and cells[reached].strip().lower() != "true"):
            continue  # a run of a study that failed, or never reached the target
        batches.append(_positive(path, line, "global_batch", cells[at_b]))
        values.append(_positive(path, line, value, cells[at_v]))
    b = np.asarray(batches, float)
    if len(np.unique(b)) < MIN_BATCHES:
        raise ScalestudyError(
            f"{path}: {len(np.unique(b))} distinct global batch(es): a forecast of the "
            f"samples to the target needs runs at {MIN_BATCHES} global batches or more")
    return b, np.asarray(values, float), VALUE_COLUMNS[value]


def _positive(path: Path, line: int, name: str, raw: str) -> float:
    """A cell that must hold a number above 0."""
    try:
        got = float(raw.strip())
    except ValueError:
        raise ScalestudyError(f"{path}:{line}: {name}: {raw.strip()!r} is not a number: "
                              "give one (a run that did not reach the target has no "
                              "row)") from None
    if not math.isfinite(got) or got <= 0:
        raise ScalestudyError(f"{path}:{line}: {name}: {raw.strip()} must be a number "
                              "above 0")
    return got
