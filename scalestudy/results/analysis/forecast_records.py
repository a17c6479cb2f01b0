"""What a forecast hands on, as typed records: the model it came from, the points it was
fitted on and the cost at each scale. results.analysis.forecast makes them; study.predict
adds the model's source and ledger note; `predict --json`, the ledger's model column and
the CLI's table read them."""

from __future__ import annotations

from typing import TypedDict

from scalestudy.results.analysis.goodput import ScaleWallRecord


class ForecastModel(TypedDict, total=False):
    """The model a forecast came from, in words and figures (`predict --json`'s `model`,
    the ledger's `model` column); `source` and `ledger` are added by study.predict."""

    form: str
    terms: str
    latency: str
    chosen_by: str
    holdout_errors: dict[str, float]
    a_s_per_unit: float
    c_s: float
    alpha_s: float
    c_inter_s: float
    rms_residual: float
    reading: str
    split: str
    max_factor: float
    interval: str
    lean: str
    source: str  # the results or table it was fitted on
    ledger: str  # what became of it in the ledger, in words


class FittedPoint(TypedDict):
    """One measured scale the model was fitted on."""

    gpus: int
    throughput: float
    per_gpu_batch: float


class ScaleCost(TypedDict):
    """Time and node-hours at one forecast scale, with the interval's band; `of`: to the
    study's target, or per million of the throughput's units."""

    gpus: int
    nodes: int
    time_s: float
    time_s_low: float
    time_s_high: float
    node_hours: float
    node_hours_low: float
    node_hours_high: float
    of: str


class WallScale(ScaleWallRecord):
    """The wall clock at one forecast batch (study.wall): its goodput figures, the batch,
    the throughput asked for it and what a restart costs."""

    global_batch: float
    throughput: float
    restart_s: float


class WallRate(TypedDict):
    """The failure rate the wall clock assumed, per node-hour, with its interval."""

    per_node_hour: float
    low: float
    high: float


class WallClock(TypedDict):
    """The wall clock to a target at each forecast batch, with what it assumed."""

    scales: list[WallScale]
    assumed: list[str]
    rate: WallRate


class TargetModel(TypedDict, total=False):
    """The law a samples-to-target forecast came from (`predict --to-target --json`'s
    `model`); `source` and `wall_clock` are added by study.predict."""

    law: str
    name: str
    chosen_by: str
    holdout_misses: dict[str, float]
    s_min: float | None
    b_crit: float | None
    interval: str
    max_factor: float
    unit: str
    source: str
    wall_clock: WallClock


class TargetFittedPoint(TypedDict):
    """One measured global batch the law was fitted on: its centre over its runs."""

    global_batch: float
    centre: float
    runs: int
