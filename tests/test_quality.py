"""quality: straggler, too few iterations and noise are flagged, never silently dropped."""

from __future__ import annotations

import pandas as pd
import pytest

from scalestudy.results.analysis.efficiency import scaling_table
from scalestudy.results.analysis.quality import (
    Thresholds,
    flagged_runs,
    host_view,
    merge_flags,
    repeat_cv,
    run_quality,
)
from tests.test_efficiency import frame, run


def with_metrics(rows: list[dict], metrics: list[dict]) -> pd.DataFrame:
    runs = frame(rows)
    for key in metrics[0]:
        runs[key] = [m[key] for m in metrics]
    return runs


def metrics(rank_min: float = 100.0, iters: int = 20, cv: float = 0.01) -> dict:
    return {"throughput_per_rank_min": rank_min, "throughput_per_rank_mean": 100.0,
            "throughput_per_rank_max": 100.0, "iters": iters, "iter_time_mean": 0.1,
            "iter_time_std": 0.1 * cv}


def test_run_flags_at_the_default_thresholds() -> None:
    rows = [run(1, 2, 200.0, repeat=i) for i in range(5)]
    ms = [metrics(), metrics(rank_min=89.0), metrics(rank_min=91.0), metrics(iters=5),
          metrics(cv=0.2, rank_min=50.0)]
    q = run_quality(with_metrics(rows, ms), Thresholds())
    assert q["flags"].tolist() == ["", "straggler", "", "few-iters", "straggler,noisy-run"]
    assert q["rank_spread"].tolist() == pytest.approx([0.0, 0.11, 0.09, 0.0, 0.5])
    assert q["iter_cv"].iloc[4] == pytest.approx(0.2)
    loose = run_quality(with_metrics(rows, ms), Thresholds(straggler=0.6, max_cv=0.3,
                                                           min_iters=1))
    assert set(loose["flags"]) == {""}


def test_missing_metric_columns_flag_nothing() -> None:
    q = run_quality(frame([run(1, 1, 10.0)]), Thresholds())
    assert q["flags"].tolist() == [""]


def test_point_flags_and_repeat_noise() -> None:
    rows = [run(1, 1, 100.0, repeat=i) for i in range(3)]
    rows += [run(1, 2, v, repeat=i) for i, v in enumerate((200.0, 150.0, 190.0))]
    ms = [metrics()] * 3 + [metrics(rank_min=80.0), metrics(), metrics()]
    t = scaling_table(with_metrics(rows, ms), "weak")
    assert t["flags"].tolist() == ["", "straggler,noisy-repeats"]
    assert t["throughput_cv"].iloc[0] == pytest.approx(0.0)
    assert t["throughput_cv"].iloc[1] == pytest.approx(pd.Series([200, 150, 190]).std()
                                                       / (540 / 3))
    # Flagged runs stay in the median, and are listed with their numbers.
    assert t["throughput_median"].iloc[1] == 190.0
    listed = flagged_runs(with_metrics(rows, ms), Thresholds())
    assert listed["flags"].tolist() == ["straggler"]
    assert listed["rank_spread"].tolist() == pytest.approx([0.2])


def test_helpers() -> None:
    assert merge_flags(["noisy-run,straggler", "", "straggler"]) == "straggler,noisy-run"
    assert pd.isna(repeat_cv(pd.Series([5.0])))
    assert "10%" in Thresholds().describe()


def test_host_view_blanks_comm_at_one_rank_and_flags_oversubscription() -> None:
    runs = frame([run(1, p, 100.0 * p) for p in (1, 2, 4)])
    runs["comm_overhead"] = [-0.19, 0.1, 0.2]  # at 1 rank: noise, no sync
    t = host_view(scaling_table(runs, "weak"), cores_per_host=2, one_host=True)
    assert pd.isna(t["comm_overhead"].iloc[0]) and t["comm_overhead"].iloc[2] == 0.2
    assert t["ranks_per_host"].tolist() == [1, 2, 4]
    assert t["flags"].tolist() == ["", "", "oversubscribed"]
    # Several nodes, not all on one host: the ranks of one node share its cores.
    runs = frame([run(n, 4, 400.0 * n) for n in (1, 2)])
    assert host_view(scaling_table(runs, "weak"), 4)["flags"].tolist() == ["", ""]
    assert host_view(scaling_table(runs, "weak"), 2)["flags"].tolist() == [
        "oversubscribed", "oversubscribed"]
    unknown = host_view(scaling_table(runs, "weak"))  # cores unknown: not checked
    assert unknown["flags"].tolist() == ["", ""] and unknown["host_cores"].isna().all()


def test_the_shipped_example_times_enough_iterations() -> None:
    # The example's first report is not all warnings: its runs time at least the
    # iterations the few-iters flag asks for (and so are not flagged).
    from pathlib import Path

    from scalestudy.core.load import load_study

    study = load_study(Path(__file__).resolve().parents[1] / "studies" / "example.yaml")
    iters = study.workload.iters
    assert iters >= Thresholds().min_iters
    rows = [run(1, 2, 200.0, repeat=i) for i in range(2)]
    q = run_quality(with_metrics(rows, [metrics(iters=iters)] * 2), Thresholds())
    assert "few-iters" not in ",".join(q["flags"])
