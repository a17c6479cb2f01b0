"""Where the hours go: each point's measured wall clock split into start-up, compute,
communication, input wait, checkpoints, evaluation and what no timer covers, plus the
time failures would add at the system's failure rate (docs/goodput.md).

Per completed run, from runs.csv: the wall clock is the run's `elapsed_s` (its status:
from the job's start to its end); start-up the record's `startup_s` (launch line to the
last rank's first step; a resumed attempt's checkpoint load is inside it); the training
steps `train_s` (a run to a target) or (warmup_iters + iters) × iter_time_mean (the
warm-up at the timed step time), split by the measured shares: `comm_overhead` (time
with gradient sync against without) and `input_wait_fraction`, compute the rest;
checkpoints `checkpoints` (this attempt's saves) × `checkpoint_save_s` (absent: none
written); evaluation `eval_s`. A resumed attempt's `train_s` and `eval_s` carry on from
the checkpoint (the whole run's), so this attempt's share is taken in proportion to the
steps it trained, (steps_trained − resumed_from_step) / steps_trained. What is left of
the wall clock is "not timed" (the job's prologue, diagnostics, teardown): when it is
more than TOLERANCE of the wall clock, the parts do not add up and the report says so.
A point's parts are the means over its runs (means add up; medians do not).

Expected failures are a model, not a measurement: the time failures add, in
expectation, to a run of this length on this many nodes (results.analysis.goodput's
expected wall clock, with the run's own checkpoint interval, or none), shown beside the
measured bar, never inside it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from scalestudy.core.values import number
from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.efficiency import completed_runs, format_value, group_keys
from scalestudy.results.analysis.goodput import FailureInputs, expected_wall, job_mtbf_s

#: The parts of the measured wall clock, in the bar's order.
PARTS: tuple[str, ...] = ("startup_s", "compute_s", "communication_s", "input_wait_s",
                          "checkpoints_s", "evaluation_s", "not_timed_s")
#: The part names as the report says them.
LABELS: dict[str, str] = {
    "startup_s": "start-up", "compute_s": "compute", "communication_s": "communication",
    "input_wait_s": "input wait", "checkpoints_s": "checkpoints",
    "evaluation_s": "evaluation", "not_timed_s": "not timed",
    "expected_failures_s": "expected failures"}
#: runs.csv's wall clock of a run (its status's: the job's start to its end).
ELAPSED = "elapsed_s"
#: The share of the wall clock the timed parts may leave untimed and still add up.
TOLERANCE = 0.05
#: The start-up's split, where the record carries it (they sum to `startup_s`).
STARTUP_SPLIT: dict[str, str] = {
    "startup_launch_s": "launch", "startup_imports_s": "imports",
    "startup_rendezvous_s": "rendezvous", "startup_data_s": "data",
    "first_step_s": "first step"}
COLUMNS: tuple[str, ...] = ("group", "nodes", "ranks_per_node", "world_size", "runs",
                            "wall_s", *PARTS, "expected_failures_s", "adds_up", "unknown",
                            *STARTUP_SPLIT)


def _num(row: Mapping[str, object], key: str) -> float:
    """A runs.csv cell as a float; NaN where absent or not a number."""
    value = number(row.get(key), text=True, booleans=True, finite=False)
    return math.nan if value is None else value


def run_parts(row: Mapping[str, object]) -> dict[str, float]:
    """One completed run's wall clock and its parts (seconds; NaN: not measured)."""
    parts = parts_frame(pd.DataFrame([dict(row)])).iloc[0]
    return {k: float(parts[k]) for k in ("wall_s", *PARTS)}


def _col(runs: pd.DataFrame, key: str) -> pd.Series:
    """A runs.csv column as floats; NaN where absent or not a number."""
    if key not in runs:
        return pd.Series(math.nan, index=runs.index, dtype=float)
    values = pd.to_numeric(runs[key], errors="coerce").astype(float)
    return values.where(np.isfinite(values))


def parts_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """Each completed run's wall clock and its parts (seconds; NaN: not measured), a
    column per part, computed on whole columns (a 10,000-run history in milliseconds)."""
    wall, startup = _col(runs, ELAPSED), _col(runs, "startup_s")
    share = attempt_shares(runs)
    steps = _col(runs, "train_s") * share
    warm = _col(runs, "warmup_iters").fillna(0.0)
    steps = steps.where(steps.notna(),
                        _col(runs, "iter_time_mean") * (_col(runs, "iters") + warm))
    comm_share = _col(runs, col.COMM_OVERHEAD).clip(0.0, 1.0)
    wait_share = _col(runs, "input_wait_fraction").clip(0.0, 1.0).fillna(0.0)
    comm = steps * comm_share
    waiting = steps * wait_share
    compute = steps - waiting - comm.fillna(0.0)
    ckpt = (_col(runs, "checkpoints") * _col(runs, "checkpoint_save_s")).fillna(0.0)
    evaluation = (_col(runs, "eval_s") * share).fillna(0.0)
    out = pd.DataFrame({"wall_s": wall, "startup_s": startup, "compute_s": compute,
                        "communication_s": comm, "input_wait_s": waiting,
                        "checkpoints_s": ckpt, "evaluation_s": evaluation},
                       index=runs.index)
    out["not_timed_s"] = wall - out[list(PARTS[:-1])].sum(axis=1, skipna=True)
    return out


def attempt_shares(runs: pd.DataFrame) -> pd.Series:
    """The share of each run's training its attempt did: 1, or for an attempt resumed
    from a checkpoint the steps it trained over all the run's steps."""
    resumed, trained = _col(runs, "resumed_from_step"), _col(runs, "steps_trained")
    resumed_here = (resumed >= 0) & (trained > resumed)
    return ((trained - resumed) / trained).where(resumed_here, 1.0)


def expected_failures_s(parts: Mapping[str, float], nodes: int, per_node_hour: float,
                        row: Mapping[str, object], queue_wait_s: float = 0.0) -> float:
    """The time failures add in expectation to a run like this one: its wall clock after
    start-up is the work, each failure costs the queue wait, a start-up, a load (inside a
    resumed run's start-up; else a save's time) and the work since the last save (the
    run's interval, else none)."""
    work = parts["wall_s"] - (parts["startup_s"] if math.isfinite(parts["startup_s"]) else 0)
    if not math.isfinite(work) or work <= 0:
        return math.nan
    save = _num(row, "checkpoint_save_s")
    save = save if math.isfinite(save) else 0.0
    load = _num(row, "checkpoint_load_s")
    restart = queue_wait_s + (parts["startup_s"] if math.isfinite(parts["startup_s"]) else 0)
    restart += 0.0 if math.isfinite(load) else save  # a resumed start-up holds its load
    every = _num(row, "checkpoint_every_s")
    saves = _num(row, "checkpoints")
    if not math.isfinite(every) and math.isfinite(saves) and saves > 0:
        every = work / saves
    got = expected_wall(work, save_s=save, mtbf_s=job_mtbf_s(per_node_hour, nodes),
                        restart_s=restart,
                        interval_s=every if math.isfinite(every) and every > 0 else math.inf)
    return got.failures_s


def where_hours_go(runs: pd.DataFrame, table: pd.DataFrame, scaling: str,
                   failures: FailureInputs | None = None,
                   queue_waits: Mapping[int, float] | None = None) -> pd.DataFrame:
    """One row per point (COLUMNS) with the mean of each part over its completed runs;
    empty when no completed run has a wall clock. `failures`: the rate for the expected
    failures (None: not known, NaN in the column); `queue_waits`: the store's expected
    queue wait per node count."""
    done = completed_runs(runs)
    if done.empty or ELAPSED not in done:
        return pd.DataFrame(columns=list(COLUMNS))
    keys = group_keys(runs, scaling)
    labels = {(*(format_value(r.get(k)) for k in keys), format_value(r[col.NODES]),
               format_value(r[col.RANKS_PER_NODE])): str(r[col.GROUP])
              for _, r in table.iterrows()}
    parts = parts_frame(done)
    measured = parts["wall_s"].notna()
    done, parts = done[measured], parts[measured]
    if done.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    splits = pd.DataFrame({k: _col(done, k) for k in STARTUP_SPLIT}, index=done.index)
    values = pd.concat([parts, splits], axis=1)
    values["world_size"] = _col(done, col.WORLD_SIZE)
    values["expected_failures_s"] = math.nan
    if failures is not None:
        waits: dict[int, float | None] = dict(queue_waits or {})

        def lost(p: dict[str, float], r: dict[str, object]) -> float:
            nodes = int(r[col.NODES])  # type: ignore[call-overload]
            wait = waits.get(nodes, failures.queue_wait_s)
            return expected_failures_s(p, nodes, failures.per_node_hour, r, wait or 0.0)
        values["expected_failures_s"] = [
            lost(p, r) for p, r in zip(parts.to_dict("records"), done.to_dict("records"),
                                       strict=True)]
    by = [done[k] for k in (*keys, col.NODES, col.RANKS_PER_NODE)]
    grouped = values.groupby(by, dropna=False, sort=False)
    means = grouped.mean()
    counts = grouped["wall_s"].count().to_numpy()
    rows = []
    for key, mean, runs_here in zip(means.index, means.to_dict("records"), counts,
                                    strict=True):
        nodes, per_node = int(key[-2]), int(key[-1])
        unknown = [LABELS[k] for k in PARTS if math.isnan(mean[k])]
        label_key = tuple(format_value(v) for v in key)
        rows.append({**mean, "group": labels.get(label_key, ""), "nodes": nodes,
                     "ranks_per_node": per_node, "world_size": int(mean["world_size"]),
                     "runs": int(runs_here),
                     "adds_up": abs(mean["not_timed_s"]) <= TOLERANCE * mean["wall_s"],
                     "unknown": ", ".join(unknown)})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def startup_words(row: Mapping[str, object]) -> str:
    """A point's start-up split in words ("" where its runs did not record it)."""
    said = [f"{name} {_num(row, k):,.3g} s" for k, name in STARTUP_SPLIT.items()
            if math.isfinite(_num(row, k))]
    return ", ".join(said)


def sentence(hours: pd.DataFrame) -> str:
    """Whether the parts add up to the measured wall clock, and where they do not."""
    if hours.empty:
        return ""
    off = hours[~hours["adds_up"].astype(bool)]
    if off.empty:
        return (f"The timed parts add up to the measured wall clock within "
                f"{TOLERANCE:.0%} at every point.")
    worst = (off["not_timed_s"].abs() / off["wall_s"]).max()
    return (f"At {len(off)} of {len(hours)} point(s) the timed parts do not add up to the "
            f"measured wall clock within {TOLERANCE:.0%}: up to {worst:.0%} of it is not "
            "timed (the job's prologue, warm-up beyond the timed step time, diagnostics, "
            "teardown); longer runs shrink it.")
