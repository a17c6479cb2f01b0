"""analyze: speedup / efficiency with known numbers, grouping, baselines, medians."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest

from scalestudy.core.choices import parse_baseline
from scalestudy.results.analysis.efficiency import failures, group_keys, scaling_table

PARAMS = ("run_id", "study", "system", "scaling", "nodes", "ranks_per_node", "world_size",
          "batch_size", "global_batch", "backend", "tuning", "repeat", "workload", "model",
          "image_size", "precision")


def run(nodes: int, rpn: int, throughput: float, *, batch: int | None = None,
        global_batch: int | None = None, repeat: int = 0, state: str = "completed",
        reason: str | None = None, **kw: Any) -> dict:
    """One runs.csv row in collect's layout (parameters, then status, then metrics)."""
    p = nodes * rpn
    if batch is None:
        batch = global_batch // p if global_batch else 16
    row = {"run_id": f"{nodes}x{rpn}-{repeat}-{len(kw)}", "study": "t", "system": "local",
           "scaling": "weak", "nodes": nodes, "ranks_per_node": rpn, "world_size": p,
           "batch_size": batch, "global_batch": batch * p, "backend": "ddp",
           "tuning": "default", "repeat": repeat, "workload": "synthetic",
           "model": "small_cnn", "image_size": 32, "precision": "fp32"}
    row.update(kw)
    row.update(state=state, reason=reason, exit_code=0 if state == "completed" else 1,
               elapsed_s=1.0, throughput=throughput)
    return row


def frame(rows: list[dict]) -> pd.DataFrame:
    cols = [*PARAMS, "state", "reason", "exit_code", "elapsed_s", "throughput"]
    return pd.DataFrame(rows, columns=cols)


SHAPES = [(1, 1), (1, 2), (1, 4), (2, 4), (4, 4)]


def test_perfect_weak_scaling_has_efficiency_one() -> None:
    runs = frame([run(n, r, 100.0 * n * r) for n, r in SHAPES])
    t = scaling_table(runs, "weak")
    assert len(t) == 5
    assert t["group"].nunique() == 1
    assert list(t["world_size"]) == [1, 2, 4, 8, 16]
    assert t["efficiency"].tolist() == pytest.approx([1.0] * 5)
    assert t["speedup"].tolist() == pytest.approx([1, 2, 4, 8, 16])
    assert t["ideal_throughput"].tolist() == pytest.approx(t["throughput_median"].tolist())
    assert t["throughput_per_gpu"].tolist() == pytest.approx([100.0] * 5)
    assert list(t["global_batch"]) == [16, 32, 64, 128, 256]
    assert t["baseline"].tolist() == [True, False, False, False, False]


def test_amdahl_strong_scaling() -> None:
    s = 0.1  # serial fraction: speedup(P) = 1 / (s + (1 - s) / P)
    sizes = [1, 2, 4, 8]
    runs = frame([run(1, p, 1000.0 / (s + (1 - s) / p), global_batch=64) for p in sizes])
    t = scaling_table(runs, "strong")
    assert t["group"].nunique() == 1
    speedup = [1 / (s + (1 - s) / p) for p in sizes]
    assert t["speedup"].tolist() == pytest.approx(speedup)
    assert t["efficiency"].tolist() == pytest.approx([x / p for x, p in zip(speedup, sizes,
                                                                              strict=True)])
    assert list(t["batch_size"]) == [64, 32, 16, 8]
    assert t["group"].iloc[0] == "global batch 64"


def test_strong_vs_weak_grouping() -> None:
    strong = frame([run(1, p, 100.0 * p, global_batch=64) for p in (1, 2, 4)])
    assert scaling_table(strong, "strong")["group"].nunique() == 1
    # Read as weak scaling, each per-GPU batch is its own curve.
    assert scaling_table(strong, "weak")["group"].nunique() == 3
    weak = frame([run(1, p, 100.0 * p, batch=b) for p in (1, 2, 4) for b in (16, 32)])
    t = scaling_table(weak, "weak")
    assert sorted(t["group"].unique()) == ["batch 16", "batch 32"]
    assert "global_batch" not in group_keys(weak, "weak")
    assert "batch_size" not in group_keys(weak, "strong")
    with pytest.raises(ValueError, match="scaling"):
        scaling_table(weak, "diagonal")


def test_median_min_max_over_repeats() -> None:
    rows = [run(1, 1, 100.0, repeat=0), run(1, 1, 100.0, repeat=1)]
    rows += [run(1, 2, v, repeat=i) for i, v in enumerate((150.0, 190.0, 130.0))]
    t = scaling_table(frame(rows), "weak")
    two = t[t["world_size"] == 2].iloc[0]
    assert two["throughput_median"] == 150.0
    assert (two["throughput_min"], two["throughput_max"]) == (130.0, 190.0)
    assert two["n_repeats"] == 3
    assert two["efficiency"] == pytest.approx(0.75)
    assert t["n_repeats"].tolist() == [2, 3]


def test_baseline_is_exactly_one() -> None:
    runs = frame([run(1, 1, 0.1 + 0.2), run(1, 3, 0.7 + 0.1 / 3), run(1, 1, 0.3, repeat=1)])
    t = scaling_table(runs, "weak")
    base = t[t["baseline"]].iloc[0]
    assert base["efficiency"] == 1.0
    assert base["speedup"] == 1.0


def test_tie_at_smallest_world_size_picks_fewer_nodes() -> None:
    runs = frame([run(2, 1, 180.0), run(1, 2, 200.0), run(2, 2, 360.0)])
    t = scaling_table(runs, "weak")
    assert list(zip(t["nodes"], t["ranks_per_node"], strict=True)) == [(1, 2), (2, 1), (2, 2)]
    assert t["baseline"].tolist() == [True, False, False]
    assert t["efficiency"].tolist() == pytest.approx([1.0, 0.9, 0.9])
    assert t["ideal_throughput"].tolist() == pytest.approx([200.0, 200.0, 400.0])


def test_only_completed_rows_count() -> None:
    runs = frame([run(1, 1, 100.0), run(1, 2, 190.0),
                  run(1, 4, float("nan"), state="failed", reason="no metrics record"),
                  run(1, 8, float("nan"), state="pending"),
                  run(1, 16, 5.0, state="running")])
    t = scaling_table(runs, "weak")
    assert list(t["world_size"]) == [1, 2]
    f = failures(runs)
    assert list(f["run_id"]) == [runs.loc[2, "run_id"]]
    assert f.loc[0, "reason"] == "no metrics record"
    assert {"nodes", "ranks_per_node", "repeat", "exit_code"} <= set(f.columns)


def test_group_labels_name_only_varying_parameters() -> None:
    rows = []
    for model, prec, backend, tuning in [("small_cnn", "fp32", "ddp", "default"),
                                         ("resnet18", "bf16", "fsdp", "tuned")]:
        rows += [run(1, p, 10.0 * p, model=model, precision=prec, backend=backend,
                     tuning=tuning) for p in (1, 2)]
    t = scaling_table(frame(rows), "weak")
    assert list(t["group"].unique()) == ["small_cnn fp32 ddp default batch 16",
                                         "resnet18 bf16 fsdp tuned batch 16"]
    rows = [run(1, p, 10.0 * p, image_size=s) for p in (1, 2) for s in (32, 64)]
    t = scaling_table(frame(rows), "weak")
    assert list(t["group"].unique()) == ["image_size 32 batch 16", "image_size 64 batch 16"]
    assert {"model", "precision", "backend", "tuning"} <= set(t.columns)


def test_missing_parameters_group_together() -> None:
    # A `command` workload has null model / image_size / precision.
    rows = [run(1, p, 10.0 * p, workload="command", model=None, image_size=None,
                precision=None) for p in (1, 2, 4)]
    t = scaling_table(frame(rows), "weak")
    assert len(t) == 3
    assert t["group"].nunique() == 1
    assert t["efficiency"].tolist() == pytest.approx([1.0, 1.0, 1.0])


def test_empty_and_all_failed() -> None:
    t = scaling_table(frame([]), "weak")
    assert t.empty
    assert {"group", "world_size", "efficiency", "speedup"} <= set(t.columns)
    runs = frame([run(1, 1, math.nan, state="failed", reason="boom")])
    assert scaling_table(runs, "strong").empty
    assert len(failures(runs)) == 1


def test_table_from_csv_types() -> None:
    # Rows as they come back from runs.csv: numbers may be floats, throughput a string.
    runs = frame([run(1, 1, 100.0), run(2, 1, 150.0)])
    runs["nodes"] = runs["nodes"].astype(float)
    runs["throughput"] = runs["throughput"].astype(str)
    t = scaling_table(runs, "weak")
    assert t["world_size"].tolist() == [1, 2]
    assert t["efficiency"].tolist() == pytest.approx([1.0, 0.75])


def test_configurable_baseline() -> None:
    # 1x1, 1x2, 1x4 on one node, then 2x4 and 4x4: per-GPU img/s 100, 95, 90, 81, 72.
    per_gpu = {1: 100.0, 2: 95.0, 4: 90.0, 8: 81.0, 16: 72.0}
    runs = frame([run(n, r, per_gpu[n * r] * n * r) for n, r in SHAPES])
    node = scaling_table(runs, "weak", baseline="node")
    assert node["baseline"].tolist() == [False, False, True, False, False]
    assert node["efficiency"].tolist() == pytest.approx([v / 90.0 for v in per_gpu.values()])
    assert set(node["baseline_rule"]) == {"one node"}
    eight = scaling_table(runs, "weak", baseline=8)
    assert eight["efficiency"].tolist() == pytest.approx([v / 81.0 for v in per_gpu.values()])
    assert eight.loc[eight["baseline"], "world_size"].tolist() == [8]
    missing = scaling_table(runs, "weak", baseline=32)
    assert missing["baseline"].tolist()[0]
    assert missing["baseline_rule"].iloc[0] == "world size 32 not measured: smallest world size"
    no_node = scaling_table(frame([run(2, 1, 200.0), run(4, 1, 360.0)]), "weak",
                            baseline="node")
    assert no_node["baseline_rule"].iloc[0].startswith("no one-node run")
    assert no_node["efficiency"].tolist() == pytest.approx([1.0, 0.9])


def test_parse_baseline() -> None:
    assert parse_baseline("smallest") == "smallest"
    assert parse_baseline("node") == "node"
    assert parse_baseline("8") == 8
    for bad in ("0", "-2", "nodes", "2.5"):
        with pytest.raises(ValueError, match="use smallest, node or a world size"):
            parse_baseline(bad)


def test_strong_scaling_keeps_global_batch_next_to_throughput() -> None:
    runs = frame([run(n, 4, 400.0 * n * 0.9 ** (n - 1), global_batch=256) for n in (1, 2, 4)])
    t = scaling_table(runs, "strong", baseline="node")
    assert t["global_batch"].tolist() == [256, 256, 256]
    assert t["batch_size"].tolist() == [64, 32, 16]
    assert t["efficiency"].tolist() == pytest.approx([1.0, 0.9, 0.9 ** 3])
