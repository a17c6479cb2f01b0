"""A side of `compare` from the results store: `history:NAME` (a stored study, or results
imported from another tool) as a table of runs, laid out as collect's runs.csv."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from scalestudy.core.errors import ScalestudyError
from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.collect import STATUS_COLUMNS

#: A stored attempt's metrics and parameters that a forecast reads (forecast_study).
FORECAST_METRICS: tuple[str, ...] = ("grad_bytes", "allreduce_busbw_GBps")
FORECAST_PARAMS: tuple[str, ...] = ("seq_len",)
#: How a comparison names a stored study.
PREFIX = "history:"
#: The parameter columns, in collect's order (those before `state`).
PARAMS: tuple[str, ...] = ("run_id", "study", "system", "scaling", "nodes", "ranks_per_node",
                           "world_size", "batch_size", "global_batch", "backend", "tuning",
                           "repeat", "model")


def is_stored(arg: Path | str) -> bool:
    """Whether a compare argument names a stored study."""
    return str(arg).startswith(PREFIX)


def stored_runs(arg: Path | str) -> tuple[str, pd.DataFrame]:
    """(study name, runs frame) of `history:NAME`: the newest attempt of each of its runs
    that measured a throughput. The store is $SCALESTUDY_STORE's (or the default)."""
    from scalestudy.results.history.store import Store, latest_attempts

    name = str(arg)[len(PREFIX):]
    store = Store()
    try:
        rows = store.rows(study=name)
    finally:
        store.dispose()
    if not rows:
        raise ScalestudyError(f"{arg}: the results store holds no study {name!r} "
                              "(`scalestudy history` lists them)")
    rated = [r for r in latest_attempts(rows)
             if r[col.THROUGHPUT] is not None or r[col.STATE] != "completed"]
    if not rated:
        raise ScalestudyError(f"{arg}: its results are not throughputs "
                              f"({rows[0]['unit']}): nothing to compare a study with")
    missing = [r for r in rated if r[col.NODES] is None or r[col.RANKS_PER_NODE] is None]
    if missing:
        raise ScalestudyError(
            f"{arg}: {len(missing)} of its results do not say their nodes (an import of "
            "a log that does not print them): import it again with --nodes N")
    scaling = next((str(s) for r in rated if (s := (r.get(col.PARAMS) or {}).get("scaling"))),
                   "weak")
    frame = pd.DataFrame([{
        **{k: r.get(k) for k in PARAMS}, "study": name, "scaling": scaling,
        # what a forecast from the stored copy needs, as the study's runs.csv has it: the
        # allreduce probe, the gradient size, the tokens of a sample
        **{k: (r.get(col.METRICS) or {}).get(k) for k in FORECAST_METRICS},
        **{k: (r.get(col.PARAMS) or {}).get(k) for k in FORECAST_PARAMS},
        "system": r.get(col.SYSTEM), "state": r[col.STATE], "reason": None, "exit_code": None,
        "elapsed_s": None, "failure": None, "failure_line": None, "job_power_w": None,
        "throughput": r[col.THROUGHPUT], "throughput_unit": r[col.UNIT]} for r in rated])
    keep = [c for c in (*FORECAST_METRICS, *FORECAST_PARAMS) if frame[c].notna().any()]
    return name, frame[[*PARAMS, *STATUS_COLUMNS, "throughput", "throughput_unit", *keep]]
