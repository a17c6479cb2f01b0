"""The best known way to do a job: across every stored study of one model on one system,
each configuration measured (any scale, batch, backend, tuning, layout) priced per
million samples (tokens for a transformer): time and node-hours, and the front of
those no other beats on both. Each point keeps its study and date. A result whose nodes
are unknown (an import made without `--nodes`) has a time but no node-hours: it is listed,
and joins the front only where no configuration of its work has a known node count (the
front is then the fastest)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import pandas as pd

from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.cost import PER_MILLION, WORK_COLUMNS, pareto_front
from scalestudy.results.history import rows as stored
from scalestudy.results.history.rows import AttemptRow

#: Parameters that do not make a configuration different (which run, which repeat).
NOT_CONFIGURATION = frozenset({"run_id", "repeat", "study", "system", "scaling"})
COLUMNS: tuple[str, ...] = (
    "work", "configuration", "study", "ended", "nodes", "world_size", "batch_size",
    "global_batch", "backend", "tuning", "repeats", "throughput", "unit", "time_s",
    "node_hours", "front")


def best_known(rows: Sequence[AttemptRow]) -> pd.DataFrame:
    """One row per (study, configuration) measured, with its median throughput over the
    repeats, the time and node-hours of a million units, and whether it is on the front
    of its work (the same model and input), fastest first."""
    groups: dict[tuple[str, str, str], list[AttemptRow]] = {}
    for r in rows:
        if r.get(col.STATE) != "completed" or not r.get(col.THROUGHPUT):
            continue
        params = r.get(col.PARAMS) or {}
        work = " ".join(f"{k}={params[k]}" for k in WORK_COLUMNS if params.get(k) is not None)
        config = ", ".join(f"{k}={v}" for k, v in sorted(params.items())
                           if k not in NOT_CONFIGURATION and k not in WORK_COLUMNS)
        groups.setdefault((work, config, str(r[col.DIRECTORY])), []).append(r)
    out = []
    for (work, config, _), items in groups.items():
        first = items[0]
        throughput = statistics.median(stored.throughput(r) for r in items)
        time_s = PER_MILLION / throughput
        ends = [e for r in items if (e := r.get(col.ENDED)) is not None]
        out.append({"work": work, "configuration": config, "study": first[col.STUDY],
                    "ended": max(ends) if ends else None, "nodes": first[col.NODES],
                    "world_size": first[col.WORLD_SIZE], "batch_size": first[col.BATCH_SIZE],
                    "global_batch": first[col.GLOBAL_BATCH], "backend": first[col.BACKEND],
                    "tuning": first[col.TUNING], "repeats": len(items),
                    "throughput": throughput, "unit": first.get(col.UNIT) or "img/s",
                    "time_s": time_s, "node_hours": _node_hours(first.get(col.NODES), time_s),
                    "front": False})
    frame = pd.DataFrame(out, columns=list(COLUMNS))
    for _, part in frame.groupby("work", sort=False):
        priced = part[part[col.NODE_HOURS].notna()]
        if priced.empty:  # no node counts known: time alone ranks them
            frame.loc[part["time_s"].idxmin(), "front"] = True
            continue
        kept = pareto_front(priced["time_s"].to_numpy(), priced[col.NODE_HOURS].to_numpy())
        frame.loc[priced.index[kept], "front"] = True
    hours = frame[col.NODE_HOURS].astype(object)  # unknown: None, not NaN (JSON has none)
    frame[col.NODE_HOURS] = hours.where(hours.notna(), None)
    return frame.sort_values(["work", "time_s"]).reset_index(drop=True)


def _node_hours(nodes: object, time_s: float) -> float | None:
    """The node-hours of `time_s` on `nodes` (None: the nodes are not known)."""
    if nodes is None or nodes != nodes:  # None, or NaN from a frame
        return None
    return float(nodes) * time_s / 3600  # type: ignore[arg-type]
