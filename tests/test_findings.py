"""findings: sentences from known synthetic studies carry the numbers the formulas give."""

from __future__ import annotations

import pandas as pd

from scalestudy.results.analyze import scaling_table
from scalestudy.results.commmodel import model_study
from scalestudy.results.findings import findings, lr_findings
from tests.test_analyze import frame, run
from tests.test_commmodel import comm_bound_runs


def all_findings(runs: pd.DataFrame, scaling: str = "weak") -> list[str]:
    table = scaling_table(runs, scaling)
    fits, points, preds = model_study(table, scaling)
    return findings(table, runs, scaling, fits, points, preds)


def test_perfect_scaling() -> None:
    out = all_findings(frame([run(n, 4, 400.0 * n) for n in (1, 2, 4, 8)]))
    assert out[0] == ("batch 16: efficiency stays at or above 90% up to 32 GPUs "
                      "(lowest 100.0% at 4 GPUs).")
    assert any("predicted efficiency at 1024 nodes (4096 GPUs): 100.0%" in f for f in out)
    assert any("from 64 to 512 (8×): linear scaling multiplies the learning rate by 8, "
               "square-root scaling by 2.83" in f for f in out)


def test_amdahl_strong_scaling() -> None:
    s = 0.1  # speedup 1 / (s + (1 - s) / P): efficiency 0.909, 0.769, 0.588 at 2, 4, 8
    runs = frame([run(1, p, 1000.0 / (s + (1 - s) / p), global_batch=64) for p in (1, 2, 4, 8)])
    out = all_findings(runs, "strong")
    assert out[0] == ("global batch 64: efficiency falls below 90% at 4 GPUs (1 × 4, "
                      "global batch 64): 76.9%.")
    assert out[1].startswith("global batch 64: efficiency falls below 75% at 8 GPUs")
    assert out[1].endswith(": 58.8%.")
    assert "The global batch is 64 at every scale (strong scaling)" in out[-1]


def test_comm_bound_with_batch_sweep_and_failures() -> None:
    runs = pd.concat([comm_bound_runs(batch=16), comm_bound_runs(batch=64)],
                     ignore_index=True)
    runs["run_id"] = [f"r{i}" for i in range(len(runs))]
    runs.loc[len(runs)] = {**runs.iloc[0].to_dict(), "run_id": "bad", "state": "failed",
                           "throughput": float("nan"), "reason": "exit code 1"}
    out = all_findings(runs)
    batch = [f for f in out if "per-GPU batch 64 (global 2048) gives" in f]
    assert len(batch) == 1 and "the larger batch helps" in batch[0]
    assert batch[0].startswith("at 32 GPUs, per-GPU batch 64 (global 2048) gives")
    assert "at batch 16 (global 512) (" in batch[0]
    comm = [f for f in out if "attributes" in f]
    assert len(comm) == 2 and "batch 16: at 32 GPUs, the model attributes" in comm[0]
    assert "1 of 13 runs failed" in out[-1]


def test_measured_comm_overhead_and_flags_are_quoted() -> None:
    runs = frame([run(1, p, 100.0 * p) for p in (1, 2, 4)])
    runs["comm_overhead"] = [0.0, 0.05, 0.125]
    runs["throughput_per_rank_min"] = [100.0, 100.0, 50.0]
    runs["throughput_per_rank_mean"] = 100.0
    out = all_findings(runs)
    assert "batch 16: at 4 GPUs, gradient sync takes 12.5% of the step time" in " ".join(out)
    assert "1 of 3 points carry quality flags (straggler: 1)" in out[-1]


def test_lr_finding_small_growth_short_warmup() -> None:
    table = scaling_table(frame([run(1, p, 100.0 * p) for p in (1, 2)]), "weak")
    assert lr_findings(table, "weak") == [
        "The global batch grows from 16 to 32 (2×): linear scaling multiplies the learning "
        "rate by 2, square-root scaling by 1.41; use a short warm-up."]


def test_one_point_below_both_levels_is_one_sentence() -> None:
    out = all_findings(frame([run(1, p, v) for p, v in ((1, 100.0), (2, 120.0), (4, 200.0))]))
    assert out[0] == ("batch 16: efficiency falls below 90% and 75% at 2 GPUs (1 × 2, "
                      "global batch 32): 60.0%.")
    assert not any(f.startswith("batch 16: efficiency falls below 75%") for f in out)


def test_ring_bound_finding() -> None:
    from scalestudy.results.commmodel import ring_bounds

    runs = comm_bound_runs()
    runs["allreduce_busbw_GBps"] = 10.0
    table = scaling_table(runs, "weak")
    fits, points, preds = model_study(table, "weak")
    bounds = ring_bounds(table, fits)
    out = findings(table, runs, "weak", fits, points, preds, bounds)
    b = bounds.iloc[0]
    sentence = [f for f in out if "ring allreduce of 100.0 MB" in f]
    assert sentence == [
        f"batch 32: at 32 GPUs a ring allreduce of 100.0 MB at the probe's 10 GB/s takes "
        f"{b.ring_time_s * 1e3:.3g} ms per step, which caps efficiency at "
        f"{b.efficiency_bound:.1%} without overlap; measured {b.efficiency_measured:.1%}."]


def test_compute_slowdown_finding() -> None:
    runs = frame([run(1, p, 100.0 * p / (1 + 0.5 * (p - 1))) for p in (1, 2, 4)])
    runs["compute_time_s"] = [0.1, 0.15, 0.25]  # per step, per-GPU batch 16 throughout
    out = all_findings(runs)
    assert ("batch 16: compute alone (no gradient sync) takes 250 ms per step at 4 GPUs vs "
            "100 ms at 1 (2.50× per image): part of the loss is compute slowing down") in \
        " ".join(out)
    runs["compute_time_s"] = 0.1
    assert not any("compute alone" in f for f in all_findings(runs))


def test_lr_the_runs_used() -> None:
    runs = frame([run(1, p, 100.0 * p) for p in (1, 2, 4)])
    runs["lr"] = [0.1, 0.2, 0.4]
    runs["lr_warmup_iters"] = 100
    table = scaling_table(runs, "weak")
    out = lr_findings(table, "weak")
    assert out[1] == ("The runs used lr 0.1 at global batch 16 and 0.4 at 64 (4×: linear "
                      "scaling), warm-up 100 iterations.")
    runs["lr"] = [0.1, 0.1 * 2 ** 0.5, 0.2]
    assert "(2×: square-root scaling)" in lr_findings(scaling_table(runs, "weak"), "weak")[1]
