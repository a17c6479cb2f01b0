"""reporttables: numbers for people, and tables that say why a value is missing."""

from __future__ import annotations

import pandas as pd

from scalestudy.report.tables import (
    fit_table,
    group_tables,
    num,
    pct,
    prediction_table,
    seconds,
)
from scalestudy.results.analysis.commmodel import model_study
from scalestudy.results.analysis.efficiency import scaling_table
from scalestudy.results.analysis.quality import host_view
from tests.test_efficiency import frame, run


def test_number_formats() -> None:
    assert [num(v) for v in (12345.6, 123.4, 12.34, 1.234, float("nan"))] == [
        "12,346", "123", "12.3", "1.23", "n/a"]
    assert pct(0.1234) == "12.3%" and pct(-0.05, signed=True) == "-5.0%"
    assert pct(float("nan")) == "n/a"
    assert [seconds(v) for v in (2.5, 0.0123, 4.5e-5)] == ["2.5 s", "12.3 ms", "45 µs"]


def test_fit_table_says_why_there_is_no_fit() -> None:
    two = scaling_table(frame([run(1, p, 100.0 * p) for p in (1, 2)]), "weak")
    fits, _, preds = model_study(two, "weak")
    headers, rows = fit_table(fits)
    assert headers[-2:] == ["hold-out error", "predictions"]
    assert rows[0][1].startswith("too few points: 2 world size(s) measured")
    assert rows[0][2:] == ["n/a"] * 7 + ["withheld"]
    assert prediction_table(preds)[1] == []
    four = scaling_table(frame([run(1, p, 90.0 * p) for p in (1, 2, 4, 8)]), "weak")
    rows = fit_table(model_study(four, "weak")[0])[1]
    assert rows[0][3] == "n/a (gradient size unknown)"
    assert rows[0][7].endswith("img/s at 8 GPUs")  # three points left: a hold-out fit
    three = scaling_table(frame([run(1, p, 90.0 * p) for p in (1, 2, 4)]), "weak")
    assert fit_table(model_study(three, "weak")[0])[1][0][7] == "too few points to hold one out"


def test_group_table_hides_comm_at_one_gpu_and_shows_ranks_per_host() -> None:
    runs = frame([run(1, p, 100.0 * p) for p in (1, 2, 4)])
    runs["comm_overhead"] = [0.36, 0.1, 0.2]
    table = host_view(scaling_table(runs, "weak"), cores_per_host=2, one_host=True)
    (_, _, (headers, rows)), = group_tables(table)
    assert headers[-3:] == ["comm overhead", "ranks per host / cores", "flags"]
    assert [r[-3:] for r in rows] == [["—", "1 / 2", ""], ["10.0%", "2 / 2", ""],
                                      ["20.0%", "4 / 2", "oversubscribed"]]


def test_prediction_above_the_measured_trend_says_so() -> None:
    preds = pd.DataFrame([{"group": "g", "factor": 2, "nodes": 2, "world_size": 8,
                           "batch_size": 16, "global_batch": 128,
                           "throughput_predicted": 1000.0, "efficiency_predicted": 0.4,
                           "comm_share": 0.5, "above_measured": True, "low": 900.0,
                           "high": 1080.0, "level": 0.9,
                           "forecast_model": "compute+bandwidth (log)"}])
    headers, rows = prediction_table(preds)
    assert headers[7] == "90% interval" and rows[0][7] == "900–1,080"  # never without one
    assert rows[0][8] == "40.0% (above the largest measured scale's)"
