"""`predict TABLE.csv --to-target`: the samples to the target at global batches not
measured, and with --checkpoint-save-s the wall clock with checkpoints and failures."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from scalestudy.cli.app import out, print_json
from scalestudy.core.errors import ScalestudyError
from scalestudy.study.wall import WallAsk

if TYPE_CHECKING:
    from scalestudy.results.analysis.target_forecast import TargetForecast


def wall_ask(save_s: float | None, nodes: str | None, throughput: str | None,
             per_node_hour: float | None, startup_s: float | None,
             queue_wait_s: float | None, system: str | None, store: str | None
             ) -> WallAsk | None:
    """The wall clock asked by --checkpoint-save-s, or None when it is not."""
    if save_s is None:
        if throughput is not None or per_node_hour is not None:
            raise ScalestudyError("--throughput and --failures-per-node-hour price the wall "
                                  "clock: give --checkpoint-save-s C too")
        return None
    if nodes is None or throughput is None:
        raise ScalestudyError("--checkpoint-save-s: give --nodes N,N and --throughput S,S "
                              "(samples/s), one per --batches entry")
    node_counts = [int(x) for x in _numbers("--nodes", nodes)]
    if any(n < 1 or n != x for n, x in zip(node_counts, _numbers("--nodes", nodes),
                                           strict=True)):
        raise ScalestudyError(f"--nodes {nodes!r}: give whole node counts of 1 or more")
    return WallAsk(node_counts, _numbers("--throughput", throughput), save_s,
                   per_node_hour, startup_s, queue_wait_s, system=system, store=store)


def to_target_command(source: str, batches: str | None, level: float, as_json: bool,
                      to_target: bool, scales: str | None, beyond: bool,
                      wall: WallAsk | None = None) -> None:
    """`predict TABLE.csv --to-target --batches B,B`: the samples to the target."""
    from scalestudy.report.tables import num
    from scalestudy.report.terminal import text_table
    from scalestudy.study.predict import predict_to_target

    if not to_target or batches is None or scales:
        raise ScalestudyError("--to-target forecasts global batches: give --to-target "
                              "--batches B,B (e.g. 1024,4096), without --gpus or --nodes "
                              "(--nodes goes with --checkpoint-save-s)")
    got = predict_to_target(source, _numbers("--batches", batches), level=level,
                            beyond=beyond, wall=wall)
    if as_json:
        print_json({"predictions": [p.as_dict() for p in got.predictions],
                    "model": got.model, "fitted_on": got.fitted_on})
        return
    unit = got.predictions[0].unit
    rows = [[f"{p.global_batch:,.0f}", f"{num(p.value)} [{num(p.low)}–{num(p.high)}]",
             f"{p.extrapolation:.3g}×" + (" (beyond: rough guide)" if p.limit else "")]
            for p in got.predictions]
    out.print(text_table(
        f"{unit} to the target, from {got.model['source']}",
        ["global batch", f"{unit} [{got.predictions[0].level:.0%} interval]",
         "× largest measured"], rows,
        f"law: {got.model['law']}; chosen: {got.model['chosen_by']}; interval: "
        f"{got.model['interval']}; fitted on global batches "
        + ", ".join(f"{p['global_batch']:,.0f}" for p in got.fitted_on)
        + "".join(f"; {p.limit}" for p in got.predictions if p.limit), out.width))
    if "wall_clock" in got.model:
        _wall_table(got)


def _wall_table(got: TargetForecast) -> None:
    """The wall clock with checkpoints and failures, and Young's and Daly's interval."""
    from scalestudy.report.terminal import text_table

    wall = got.model["wall_clock"]
    rows = [[f"{s['global_batch']:,.0f}", f"{s['nodes']:,}", _h(s["work_s"]),
             f"{_h(s['wall_s'])} [{_h(s['wall_low_s'])}–{_h(s['wall_high_s'])}]",
             f"{s['goodput']:.1%} [{s['goodput_low']:.1%}–{s['goodput_high']:.1%}]",
             f"{s['expected_failures']:,.3g}", _h(s["lost_per_failure_s"]),
             f"{_h(s['young_interval_s'])} / {_h(s['daly_interval_s'])}"]
            for s in wall["scales"]]
    out.print(text_table(
        "wall clock to the target with checkpoints and failures",
        ["global batch", "nodes", "training", "wall clock [interval]", "goodput",
         "failures", "lost per failure", "save every (Young / Daly)"], rows,
        "; ".join(wall["assumed"]), out.width))


def _h(seconds: float) -> str:
    """A duration for people (cost.hours); an infinite one is "never"."""
    from scalestudy.results.analysis.cost import hours

    return hours(seconds) if math.isfinite(seconds) else "never"


def _numbers(option: str, value: str) -> list[float]:
    """`--batches 1024,4096` as numbers above 0 (one line and exit 2 otherwise)."""
    try:
        numbers = [float(v) for v in value.replace(" ", "").split(",") if v]
    except ValueError:
        numbers = []
    if not numbers or min(numbers) <= 0 or not all(math.isfinite(x) for x in numbers):
        what = "global batches" if option == "--batches" else "numbers"
        raise ScalestudyError(f"{option} {value!r}: give {what} above 0 joined by commas, "
                              "e.g. 1024,4096")
    return numbers
