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

import pandas as pd

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
    try:
        value = float(row.get(key))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
    return value


def run_parts(row: Mapping[str, object]) -> dict[str, float]:
    """One completed run's wall clock and its parts (seconds; NaN: not measured)."""
    wall, startup = _num(row, ELAPSED), _num(row, "startup_s")
    share = attempt_share(row)
    steps = _num(row, "train_s") * share
    if math.isnan(steps):
        per, iters, warm = (_num(row, k) for k in ("iter_time_mean", "iters", "warmup_iters"))
        steps = per * (iters + (0 if math.isnan(warm) else warm))
    comm_share = _num(row, col.COMM_OVERHEAD)
    comm_share = min(max(comm_share, 0.0), 1.0) if math.isfinite(comm_share) else math.nan
    wait_share = _num(row, "input_wait_fraction")
    wait_share = min(max(wait_share, 0.0), 1.0) if math.isfinite(wait_share) else 0.0
    comm = steps * comm_share
    waiting = steps * wait_share
    compute = steps - waiting - (0.0 if math.isnan(comm) else comm)
    saves = _num(row, "checkpoints")
    save_s = _num(row, "checkpoint_save_s")
    ckpt = saves * save_s if math.isfinite(saves) and math.isfinite(save_s) else 0.0
    evaluation = _num(row, "eval_s") * share
    out = {"wall_s": wall, "startup_s": startup, "compute_s": compute,
           "communication_s": comm, "input_wait_s": waiting, "checkpoints_s": ckpt,
           "evaluation_s": 0.0 if math.isnan(evaluation) else evaluation}
    timed = sum(v for k, v in out.items() if k != "wall_s" and math.isfinite(v))
    out["not_timed_s"] = wall - timed
    return out


def attempt_share(row: Mapping[str, object]) -> float:
    """The share of a run's training this attempt did: 1, or for an attempt resumed from
    a checkpoint the steps it trained over all the run's steps."""
    resumed, trained = _num(row, "resumed_from_step"), _num(row, "steps_trained")
    if math.isfinite(resumed) and math.isfinite(trained) and trained > resumed >= 0:
        return (trained - resumed) / trained
    return 1.0


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
    rows = []
    for key, part in done.groupby([*keys, col.NODES, col.RANKS_PER_NODE], dropna=False,
                                  sort=False):
        first = part.iloc[0]
        nodes = int(first[col.NODES])
        each = [(run_parts(r), r) for r in part.to_dict("records")]
        each = [(p, r) for p, r in each if math.isfinite(p["wall_s"])]
        if not each:
            continue
        mean = {k: _mean([p[k] for p, _ in each]) for k in ("wall_s", *PARTS)}
        split = {k: _mean([_num(r, k) for _, r in each]) for k in STARTUP_SPLIT}
        wait = (queue_waits or {}).get(nodes, failures.queue_wait_s if failures else None)
        lost = (_mean([expected_failures_s(p, nodes, failures.per_node_hour, r, wait or 0.0)
                       for p, r in each]) if failures is not None else math.nan)
        unknown = [LABELS[k] for k in PARTS if math.isnan(mean[k])]
        label_key = (*(format_value(v) for v in key[:-2]), format_value(key[-2]),
                     format_value(key[-1]))
        rows.append({"group": labels.get(label_key, ""), "nodes": nodes,
                     "ranks_per_node": int(first[col.RANKS_PER_NODE]),
                     "world_size": int(first[col.WORLD_SIZE]), "runs": len(each), **mean,
                     "expected_failures_s": lost,
                     "adds_up": abs(mean["not_timed_s"]) <= TOLERANCE * mean["wall_s"],
                     "unknown": ", ".join(unknown), **split})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _mean(values: list[float]) -> float:
    """The mean of the measured values; NaN where none is."""
    kept = [v for v in values if math.isfinite(v)]
    return sum(kept) / len(kept) if kept else math.nan


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
