"""What a forecast hands on, as typed records: the model it came from, the points it was
fitted on and the cost at each scale. results.analysis.forecast makes them; study.predict
adds the model's source and ledger note; `predict --json`, the ledger's model column and
the CLI's table read them."""

from __future__ import annotations

from typing import TypedDict


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
