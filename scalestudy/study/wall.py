"""The wall clock to the target with checkpoints and failures, for `predict --to-target`:
each forecast batch's samples become seconds of training at its throughput, on its node
count, with the failure rate (given, or the system's from the results store) and the
queue wait (given, from the store, else 0), through results.analysis.goodput."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from scalestudy.core.errors import ScalestudyError
from scalestudy.results.analysis.goodput import FailureInputs, scale_wall
from scalestudy.results.analysis.waits import expected, waits_by_nodes
from scalestudy.results.history.rows import AttemptRow

if TYPE_CHECKING:
    from scalestudy.core.failures import Failures
    from scalestudy.results.analysis.forecast_records import WallClock, WallScale
    from scalestudy.results.analysis.target_forecast import TargetForecast


@dataclass(frozen=True)
class WallAsk:
    """What the wall clock is asked with: per forecast batch its nodes and throughput
    (samples/s), the blocked save time, and the rest where known."""

    nodes: list[int]
    throughput: list[float]
    save_s: float
    per_node_hour: float | None = None  # None: the system's rate from the store
    startup_s: float | None = None
    queue_wait_s: float | None = None  # None: the store's median for the node count
    load_s: float | None = None  # None: estimated as the save time
    system: str | None = None
    store: str | None = None


def wall_clock(found: TargetForecast, ask: WallAsk) -> WallClock:
    """The wall clock at each forecast batch, with what it assumed, for model["wall_clock"]."""
    preds = found.predictions
    if len(ask.nodes) != len(preds) or len(ask.throughput) != len(preds):
        raise ScalestudyError(f"--nodes and --throughput: give one value per --batches "
                              f"entry ({len(preds)}), e.g. --nodes 16,64 --throughput "
                              "5000,18000")
    if preds and preds[0].unit != "samples":
        raise ScalestudyError("the wall clock needs the samples to the target: the table "
                              "gives epochs; give samples_to_target (epochs × samples per "
                              "epoch)")
    rate, said_rate = _rate(ask)
    waits, said_wait = _waits(ask)
    startup = ask.startup_s or 0.0
    load = ask.save_s if ask.load_s is None else ask.load_s
    scales: list[WallScale] = []
    for p, nodes, speed in zip(preds, ask.nodes, ask.throughput, strict=True):
        restart = waits.get(nodes, 0.0) + startup + load
        got = scale_wall(nodes, (p.value / speed, p.low / speed, p.high / speed), rate,
                         save_s=ask.save_s, restart_s=restart, startup_s=startup)
        scales.append({"global_batch": p.global_batch, "throughput": speed,
                       "restart_s": restart, **got.as_dict()})
    assumed = [said_rate, said_wait,
               f"start-up {startup:g} s" + ("" if ask.startup_s is not None else
                                            " (not given: --startup-s)"),
               f"save {ask.save_s:g} s blocked, load " + (
                   f"{load:g} s" if ask.load_s is not None else "= the save time (estimate)"),
               "a failure costs queue wait + start-up + load + the work since the last "
               "save (docs/goodput.md); interval: the rate's and the samples' ends together"]
    return {"scales": scales, "assumed": assumed,
            "rate": {"per_node_hour": rate[0], "low": rate[1], "high": rate[2]}}


def _rate(ask: WallAsk) -> tuple[tuple[float, float, float], str]:
    """(the failure rate: value, low, high; where it came from)."""
    if ask.per_node_hour is not None:
        r = ask.per_node_hour
        return (r, r, r), f"failure rate {r:g} per node-hour (given; no interval)"
    if ask.system is None:
        raise ScalestudyError("--checkpoint-save-s: the wall clock needs a failure rate: give "
                              "--failures-per-node-hour R, or --system S whose runs the "
                              "results store holds (`scalestudy history failures`)")
    from scalestudy.results.history.failures import chosen_rate
    from scalestudy.study.history import history

    found = chosen_rate(history(ask.store, system=ask.system), ask.system)
    if found is None:
        raise ScalestudyError(f"--system {ask.system}: the results store holds no node-hours "
                              "of it to measure a failure rate: give "
                              "--failures-per-node-hour R")
    return (found.per_node_hour, found.low, found.high), f"failure rate {found.line()}"


def _waits(ask: WallAsk) -> tuple[dict[int, float], str]:
    """(each node count's queue wait before a restart, in words)."""
    if ask.queue_wait_s is not None:
        return ({n: ask.queue_wait_s for n in ask.nodes},
                f"queue wait {ask.queue_wait_s:g} s (given)")
    if ask.system is None:
        return {}, "queue wait 0 s (not known: --queue-wait-s, or --system with a store)"
    from scalestudy.study.history import history

    found = expected(waits_by_nodes(history(ask.store, system=ask.system)), ask.nodes,
                     ask.system)
    return ({w.nodes: w.seconds or 0.0 for w in found},
            "queue wait: " + "; ".join(f"{w.nodes} node(s): " + (
                f"{w.seconds:g} s ({w.source})" if w.seconds is not None
                else f"0 s assumed ({w.source})") for w in found))


def study_failure_rate(system: str, spec: Failures | None) -> FailureInputs | None:
    """The failure rate a study's report uses for its expected failures: the store's for
    its system, or the spec's while the store holds too few failures; None when neither
    knows. A store that cannot be read costs the estimate only."""
    import sqlalchemy.exc

    from scalestudy.results.history.failures import chosen_rate
    from scalestudy.study.history import open_store

    rows: list[AttemptRow] = []
    try:
        store = open_store()
        try:
            rows = store.rows(system=system)
        finally:
            store.dispose()
    except (ScalestudyError, sqlalchemy.exc.SQLAlchemyError, OSError):
        rows = []
    found = chosen_rate(rows, system, spec.per_node_hour if spec is not None else None)
    return None if found is None else FailureInputs(
        found.per_node_hour, found.line(), spec.queue_wait_s if spec is not None else None)
