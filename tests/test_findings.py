"""findings: the headline's three lines and at most eight findings, each saying one thing
once with the numbers the tables show, from known synthetic studies."""

from __future__ import annotations

import pandas as pd

from scalestudy.results.analysis.commmodel import model_study, qualified, ring_bounds
from scalestudy.results.analysis.efficiency import scaling_table
from scalestudy.results.analysis.findings import MAX_FINDINGS, Findings, findings, lr_findings
from scalestudy.results.analysis.quality import host_view
from scalestudy.results.analysis.summary import headline
from tests.test_commmodel import comm_bound_runs
from tests.test_efficiency import frame, run


def report(runs: pd.DataFrame, scaling: str = "weak", cores: int | None = None,
           one_host: bool = False) -> tuple[list[str], Findings]:
    """(headline, findings) as the report computes them."""
    table = host_view(scaling_table(runs, scaling), cores, one_host)
    fits, points, preds = model_study(table, scaling)
    found = findings(table, runs, scaling, fits, points, ring_bounds(table, fits))
    return headline(table, scaling, fits, points, qualified(fits, preds)), found


def diag_runs(compute: dict[int, float], overhead: dict[int, float], batch: int = 16,
              **kw: object) -> pd.DataFrame:
    """One node, 1/2/4 ranks, with the bundled workload's diagnostics: compute time per
    step (no sync) and comm overhead; throughput follows from them."""
    rows = []
    for p in (1, 2, 4):
        step = compute[p] / (1 - overhead[p])
        rows.append(run(1, p, batch * p / step, batch=batch, **kw))
    runs = frame(rows)
    runs["compute_time_s"] = [compute[p] for p in (1, 2, 4)]
    runs["comm_overhead"] = [overhead[p] for p in (1, 2, 4)]
    return runs


def test_perfect_scaling() -> None:
    head, found = report(frame([run(n, 4, 400.0 * n) for n in (1, 2, 4, 8)]))
    assert head == [
        "Scaling: 100.0% efficiency at 32 GPUs (8 × 4, global batch 512), against 4 GPUs.",
        "Main cause: no large loss: in batch 16 at 32 GPUs, efficiency stays at 100.0%.",
        "Try next: measure 16 nodes (64 GPUs), where the model predicts 100.0% efficiency."]
    assert found.items[0] == ("Efficiency stays at or above 90% in batch 16: up to 32 GPUs, "
                              "lowest 100.0% at 4 GPUs.")
    assert any("Predictions for batch 16." in f for f in found.items)
    assert any("grows 8× within each group (batch 16: 64 → 512): linear scaling multiplies "
               "the learning rate by 8, square-root scaling by 2.83" in f for f in found.items)


def test_amdahl_strong_scaling_has_no_lr_advice_across_groups() -> None:
    s = 0.1  # speedup 1 / (s + (1 - s) / P): efficiency 0.909, 0.769, 0.588 at 2, 4, 8
    runs = frame([run(1, p, g / 64 * 1000.0 / (s + (1 - s) / p), global_batch=g)
                  for g in (64, 256) for p in (1, 2, 4, 8)])
    head, found = report(runs, "strong")
    assert found.items[0] == (
        "Efficiency falls below 90% at 4 GPUs (1 × 4): 76.9% in global batch 64 and 76.9% "
        "in global batch 256; falls below 75% at 8 GPUs (1 × 8): 58.8% in global batch 64 "
        "and 58.8% in global batch 256.")
    lr = [f for f in found.items if "learning rate" in f]
    assert lr == ["Strong scaling keeps each group's global batch fixed, so the learning rate "
                  "needs no rescaling as GPUs are added (and none is advised across groups)."]
    assert not any("grows" in f or "multiplies" in f for f in found.all)
    # One node: the model explains but does not predict, and says why.
    assert any("Predictions: none, because the runs span 1 node count" in f
               for f in found.items)
    assert head[0] == ("Scaling: 58.8% efficiency at 8 GPUs (1 × 8) in each of the 2 groups "
                       "there, against 1 GPU.")


def test_comm_bound_with_batch_sweep_and_failures() -> None:
    runs = pd.concat([comm_bound_runs(batch=16), comm_bound_runs(batch=64)],
                     ignore_index=True)
    runs["run_id"] = [f"r{i}" for i in range(len(runs))]
    runs.loc[len(runs)] = {**runs.iloc[0].to_dict(), "run_id": "bad", "state": "failed",
                           "throughput": float("nan"), "reason": "exit code 1"}
    head, found = report(runs)
    assert head[1].startswith("Main cause: communication, as the model attributes it: in "
                              "batch 16 at 32 GPUs, ")
    assert head[2] == ("Try next: a larger per-GPU batch (fewer syncs per image) or fp16 "
                       "gradient compression (`comm_hook: fp16`) or larger buckets "
                       "(`bucket_cap_mb`), as a grid axis or a tuning variant.")
    batch = [f for f in found.items if f.startswith("Per-GPU batch: ")]
    assert len(batch) == 1 and "the larger batch helps" in batch[0]
    assert batch[0].startswith("Per-GPU batch: at 32 GPUs, per-GPU batch 64 (global 2048) "
                               "gives")
    assert "1 of 13 runs failed: see Failed runs for why." in found.items


def test_headline_names_compute_slowdown_and_skips_one_rank_overhead() -> None:
    # Compute per step grows 1x, 1.5x, 2.5x; the measured sync adds 0 %, 5 %, 12.5 %.
    # The overhead measured at one rank (-19 %) is noise: never quoted.
    runs = diag_runs({1: 0.1, 2: 0.15, 4: 0.25}, {1: -0.19, 2: 0.05, 4: 0.125})
    head, found = report(runs)
    assert head[0] == ("Scaling: 29.4% efficiency at 4 GPUs (1 × 4, global batch 64), "
                       "against 1 GPU.")  # (0.1 / 1.19) / (0.25 / 0.875)
    assert head[1] == (
        "Main cause: compute slowing down, not communication: in batch 16 at 4 GPUs, compute "
        "alone (no gradient sync) takes 2.50× as long per image as at 1 GPU (250 ms vs 100 "
        "ms per step); gradient sync not hidden behind compute adds 12.5% of the step "
        "(measured comm overhead).")
    assert head[2].startswith("Try next: find what slows compute as ranks are added")
    assert not any("-19" in f for f in [*head, *found.all])
    # The headline's group is not explained again below it.
    assert not any("12.5%" in f for f in found.items)


def test_comm_dominated_headline_and_ring_bound_reconciled() -> None:
    runs = diag_runs({1: 0.1, 2: 0.1, 4: 0.1}, {1: 0.0, 2: 0.3, 4: 0.5})
    runs["grad_bytes"] = 40e6
    runs["allreduce_busbw_GBps"] = 4.0  # ring at 4 GPUs: 1.5 x 40 MB / 4 GB/s = 15 ms
    head, found = report(runs)
    assert head[1] == ("Main cause: gradient sync: in batch 16 at 4 GPUs, gradient sync not "
                       "hidden behind compute adds 50.0% of the step (measured comm "
                       "overhead); compute alone (no gradient sync) takes 1.00× as long per "
                       "image as at 1 GPU (100 ms vs 100 ms per step).")
    bound = [f for f in found.items if f.startswith("Ring allreduce bound")]
    assert bound == [
        "Ring allreduce bound (bandwidth only, no overlap): batch 16 at 4 GPUs: 15 ms per "
        "step for 40.0 MB at the probe's 4 GB/s, allowing 87.0% efficiency (measured "
        "50.0%), 15% of the 100 ms of sync not hidden (50.0% comm overhead beside 100 ms of "
        "compute); so the allreduce's bandwidth is not what limits: most of the sync not "
        "hidden is latency and ranks waiting for each other."]


def test_at_most_eight_findings_none_repeated() -> None:
    frames = []
    for tuning, speed in (("default", 1.0), ("tree", 1.12)):
        for batch in (16, 32):
            for rep in (0, 1):
                r = diag_runs({1: 0.1, 2: 0.12, 4: 0.14}, {1: 0.0, 2: 0.2 / speed,
                                                         4: 0.3 / speed},
                              batch=batch, tuning=tuning, repeat=rep)
                r["throughput"] *= speed * (1 + 0.005 * rep)
                frames.append(r)
    runs = pd.concat(frames, ignore_index=True)
    runs["run_id"] = [f"r{i}" for i in range(len(runs))]
    runs["grad_bytes"] = 40e6
    runs["allreduce_busbw_GBps"] = 4.0
    runs["throughput_per_rank_mean"] = 100.0
    runs["throughput_per_rank_min"] = [50.0 if i == 5 else 100.0 for i in range(len(runs))]
    runs.loc[len(runs)] = {**runs.iloc[0].to_dict(), "run_id": "bad", "state": "failed"}
    head, found = report(runs, cores=2, one_host=True)
    assert len(head) == 3 and len(found.items) <= MAX_FINDINGS
    assert len(set(found.all)) == len(found.all)
    starts = [f.split(":")[0] for f in found.all]
    assert len(set(starts)) == len(starts), starts  # one finding per subject
    assert sum("Ring allreduce bound" in f for f in found.all) == 1
    assert sum(f.startswith("Oversubscribed") for f in found.all) == 1
    assert not any("oversubscribed:" in f for f in found.all)  # not counted twice
    assert "Tuning: `tree` beats `default` by +17.1% at 4 GPUs" in " ".join(found.items)
    assert found.items[1] == ("1 of 25 runs failed: see Failed runs for why; 1 of 12 points "
                              "carry quality flags (straggler: 1); they are kept in the "
                              "medians, see Quality flags.")
    # The headline explains the least efficient group; the most efficient one is
    # explained once below it, and the bound quotes those two only.
    assert "in default batch 16 at 4 GPUs" in head[1]
    where = [f for f in found.items if f.startswith("Where the step time goes")]
    assert len(where) == 1 and "tree batch 32 (52.3%, best of 4 groups)" in where[0]
    assert "; the least and the most efficient of 4 groups, all in its table): default batch 16" \
        in " ".join(found.items)


def test_variant_findings_beat_or_within_the_band() -> None:
    def runs_with(gain: float) -> pd.DataFrame:
        rows = [run(n, 4, 400.0 * n * (1 + gain * (t == "tree")) * (1 + 0.02 * rep),
                    tuning=t, repeat=rep)
                for t in ("default", "tree") for n in (1, 2) for rep in (0, 1)]
        out = frame(rows)
        out["run_id"] = [f"r{i}" for i in range(len(out))]
        return out

    head, found = report(runs_with(0.12))
    assert ("Tuning: `tree` beats `default` by +12.0% at 8 GPUs (2 × 4, global batch 128): "
            "905 vs 808 img/s.") in found.items
    assert head[2] == ("Try next: tuning `tree`: it beats `default` by +12.0% at 8 GPUs "
                       "(2 × 4, global batch 128): 905 vs 808 img/s.")
    _, found = report(runs_with(0.01))  # repeats 2 % apart: the bands overlap
    assert ("Tuning: `tree` and `default` are within the repeat band at 8 GPUs (2 × 4, global"
            " batch 128): 816 vs 808 img/s: no difference.") in found.items


def test_oversubscription_is_named() -> None:
    runs = diag_runs({1: 0.1, 2: 0.1, 4: 0.2}, {1: 0.0, 2: 0.1, 4: 0.1})
    head, found = report(runs, cores=2, one_host=True)
    assert ("Oversubscribed (flag `oversubscribed`, 1 of 3 points): 4 GPUs (1 × 4): 4 ranks "
            "on 2 cores. Ranks there share cores, so compute slows and efficiency understates"
            " how communication scales; compare scales up to the core count.") in found.items
    assert "(200 ms vs 100 ms per step; 4 ranks on 2 cores)" in head[1]
    assert head[2] == ("Try next: at most 2 ranks per host (it has 2 cores): with 4 ranks on "
                       "it, the 4-GPU points measure core sharing, not scaling; add hosts or "
                       "GPUs to go further.")
    _, unknown = report(runs)  # cores unknown: nothing claimed
    assert not any("Oversubscribed" in f for f in unknown.all)


def test_lr_per_group_in_weak_scaling_and_the_rule_the_runs_used() -> None:
    runs = frame([run(1, p, 100.0 * p, batch=b) for b in (8, 16) for p in (1, 2, 4)])
    runs["run_id"] = [f"r{i}" for i in range(len(runs))]
    runs["lr"] = [0.1 * p for _ in (8, 16) for p in (1, 2, 4)]
    runs["lr_warmup_iters"] = 100
    out = lr_findings(scaling_table(runs, "weak"), "weak")
    assert out == [
        "Learning rate: the global batch grows 4× within each group (batch 8: 8 → 32; batch "
        "16: 16 → 64): linear scaling multiplies the learning rate by 4, square-root scaling "
        "by 2.00; use a short warm-up; the runs used linear scaling (4×: lr 0.1 → 0.4, "
        "warm-up 100 iterations)."]
