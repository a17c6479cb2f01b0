"""The report's summary for machines (`scalestudy report --json`, report/summary.json):
plain JSON, NaN as null, every throughput with its per-GPU and global batch."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

POINT_KEYS: tuple[str, ...] = (
    "nodes", "ranks_per_node", "world_size", "batch_size", "global_batch", "n_repeats",
    "throughput_median", "throughput_min", "throughput_max", "throughput_per_gpu",
    "speedup", "efficiency", "baseline", "comm_overhead", "flags",
)


def _plain(value: Any) -> Any:
    """numpy / pandas scalars -> JSON values; NaN -> None."""
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if not math.isfinite(float(value)) else float(value)
    if value is pd.NA or value is None:
        return None
    return value


def records(frame: pd.DataFrame, keys: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """Rows of a frame as plain dicts (only `keys` when given and present)."""
    cols = [c for c in (keys or tuple(frame.columns)) if c in frame.columns]
    return [{c: _plain(v) for c, v in zip(cols, row, strict=True)}
            for row in frame[cols].itertuples(index=False)]


def summary_dict(name: str, scaling: str, date: str, runs: pd.DataFrame,
                 table: pd.DataFrame, parts: dict[str, Any]) -> dict[str, Any]:
    """Study, run counts, per-group points, model, references, findings."""
    states = runs["state"].value_counts().to_dict() if "state" in runs.columns else {}
    groups = []
    for group, rows in table.groupby("group", sort=False):
        base = rows[rows["baseline"].astype(bool)]
        groups.append({
            "group": group,
            "baseline": records(base, ("nodes", "ranks_per_node", "world_size"))[0],
            "baseline_rule": str(rows["baseline_rule"].iloc[0]),
            "points": records(rows, POINT_KEYS),
        })
    checks = parts["checks"]
    return {
        "study": name, "scaling": scaling, "generated": date,
        "runs": {"planned": len(runs), **{str(k): int(v) for k, v in states.items()}},
        "groups": groups,
        "model": {"fits": records(parts["fits"]), "predictions": records(parts["preds"]),
                  "ring_bounds": records(parts["bounds"])},
        "references": {"passed": int((checks["result"] == "pass").sum()),
                       "failed": int((checks["result"] == "fail").sum()),
                       "checks": records(checks)},
        "findings": list(parts["findings"]),
    }


def dump(summary: dict[str, Any]) -> str:
    """The summary as indented JSON (strict: no NaN)."""
    return json.dumps(summary, indent=1, allow_nan=False) + "\n"
