"""workload/totarget.py and data/heldout.py: the loop to a measured target stops where
it should and records what it did; the held-out split is shared out evenly; and, on 2
gloo ranks under torchrun, gpt-tiny trains on a Markov token source to a val_loss just
above its entropy, and runs into max_steps (exit 0, not reached) below it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from scalestudy.site import datagen
from scalestudy.workload.data import DataError, heldout
from scalestudy.workload.totarget import Goal, Outcome, fields, metric_of, train
from tests.test_workload_data_dist import workload


def run_loop(values: list[float], goal: Goal, warmup: int = 2, per_iter: int = 2
             ) -> tuple[list[float], dict[str, object], int]:
    """The loop over a real (trivial) step, the evaluations answering `values` in turn."""
    steps = [0]
    answers = iter(values)

    def step() -> None:
        steps[0] += 1

    times, out = train(step, goal, warmup, per_iter, lambda: next(answers), lambda: None)
    return times, fields(goal, out, global_batch=8), steps[0]


def test_the_loop_stops_at_the_first_evaluation_that_reaches_the_value() -> None:
    times, record, steps = run_loop([3.0, 2.4, 1.9, 1.0], Goal("val_loss", 2.0, 3, 100))
    assert steps == 9 and record["steps_trained"] == 9
    assert (record["target_reached"], record["steps_to_target"], record["samples_to_target"]) \
        == (True, 9, 72)
    assert [c[:2] for c in record["eval_curve"]] == [[3, 24], [6, 48], [9, 72]]
    assert record["best_value"] == 1.9 and len(times) == 3  # steps 3-8 after 2 warm-up
    assert record["time_to_target_s"] is not None


def test_a_target_not_reached_by_max_steps_is_not_a_failure() -> None:
    _, record, steps = run_loop([0.2, 0.4, 0.3, 0.35], Goal("val_accuracy", 0.9, 5, 18))
    assert steps == 18
    assert [c[0] for c in record["eval_curve"]] == [5, 10, 15, 18]  # and at max_steps
    assert (record["target_reached"], record["steps_to_target"], record["samples_to_target"],
            record["time_to_target_s"], record["best_value"]) == (False, None, None, None, 0.4)


def test_reached_in_the_warmup_still_times_one_iteration() -> None:
    times, record, steps = run_loop([1.0] * 10, Goal("val_loss", 2.0, 1, 100), warmup=4,
                                    per_iter=3)
    assert record["steps_to_target"] == 1  # the first evaluation reached it
    assert steps == 7 and len(times) == 1  # 4 warm-up steps, then one timed iteration


def test_metric_sums_over_ranks() -> None:
    sums = [(10.0, 3.0, 5.0), (2.0, 1.0, 3.0)]
    assert metric_of(sums, "val_loss") == pytest.approx(1.5)
    assert metric_of(sums, "val_accuracy") == pytest.approx(0.5)


def test_heldout_tokens_each_replica_an_equal_share(tmp_path: Path) -> None:
    root = tmp_path / "tok"
    datagen.write_atomic_dir(root, lambda d: datagen.write_tokens(d, 20_000, 16, seed=1))
    shares = [heldout.batches(root, "tokens", r, 3, 4, 8, 0, 0) for r in range(3)]
    val = torch.frombuffer(bytearray((root / "val.bin").read_bytes()), dtype=torch.uint16)
    windows = (len(val) - 1) // 8
    for r, batches in enumerate(shares):
        assert len(batches) == math.ceil((windows // 3) / 4)
        x, y = batches[0]
        assert x.shape == (4, 8) and y.shape == (32,)
        assert x[1].tolist() == val[(r + 3) * 8:(r + 3) * 8 + 8].tolist()  # window r + dp
        assert y[:8].tolist() == val[r * 8 + 1:r * 8 + 9].tolist()  # next tokens
    (root / "val.bin").unlink()
    with pytest.raises(DataError, match=r"val\.bin: missing; a measured target"):
        heldout.batches(root, "tokens", 0, 1, 4, 8, 0, 0)


def test_heldout_images_from_the_val_shards(tmp_path: Path) -> None:
    root = tmp_path / "img"
    datagen.write_atomic_dir(root, lambda d: datagen.write_images(d, 50, 8, 2, seed=0))
    got = [heldout.batches(root, "images", r, 2, 2, 0, 8, 4) for r in range(2)]
    assert [sum(len(b[1]) for b in g) for g in got] == [2, 2]  # 5 val images: 2 each
    assert got[0][0][0].shape == (2, 3, 8, 8)
    with pytest.raises(DataError, match="held-out images for 6 data-parallel replicas"):
        heldout.batches(root, "images", 0, 6, 2, 0, 8, 4)


GPT = ["--model", "gpt-tiny", "--seq-len", "32", "--batch-size", "16", "--warmup-iters",
       "1", "--batches-per-iter", "5", "--no-diagnostics", "--data-workers", "0",
       "--optimizer", "adamw", "--lr", "0.003", "--lr-warmup", "10"]


def tokens(tmp_path: Path) -> tuple[Path, float]:
    root = tmp_path / "tok"
    meta = datagen.write_atomic_dir(root, lambda d: datagen.write_tokens(d, 100_000, 16,
                                                                         seed=3))
    return root, float(meta["entropy_nats"])


@pytest.mark.slow
def test_two_ranks_train_to_a_val_loss_above_the_entropy(tmp_path: Path) -> None:
    root, entropy = tokens(tmp_path)
    goal = round(entropy * 1.3, 3)
    code, out, record = workload(tmp_path, [*GPT, "--data", str(root), "--target-metric",
                                            "val_loss", "--target-value", str(goal),
                                            "--eval-every", "20", "--max-steps", "400"],
                                 ranks=2)
    assert code == 0, out[-3000:]
    assert record is not None and record["target_reached"] is True, out[-3000:]
    steps = record["steps_to_target"]
    assert record["samples_to_target"] == steps * 32 == record["eval_curve"][-1][1]
    assert record["eval_curve"][-1][2] <= goal < record["eval_curve"][0][2]
    assert entropy < record["best_value"] <= goal  # nothing beats the source's entropy
    assert 0 < record["time_to_target_s"] <= record["train_s"] and record["eval_s"] > 0
    assert record["steps_trained"] == steps and record["iters"] >= 1
    assert (record["optimizer"], record["lr"], record["warmup_steps"]) == ("adamw", 0.003, 10)
    assert record["throughput"] > 0
    assert f"Target val_loss {goal} reached at step {steps}" in out


@pytest.mark.slow
def test_an_impossible_target_ends_at_max_steps_not_reached(tmp_path: Path) -> None:
    root, entropy = tokens(tmp_path)
    code, out, record = workload(tmp_path, [*GPT, "--data", str(root), "--target-metric",
                                            "val_loss", "--target-value",
                                            str(round(entropy * 0.8, 3)), "--eval-every", "10",
                                            "--max-steps", "30", "--lr-rule", "linear",
                                            "--lr-reference-batch", "64"], ranks=2)
    assert code == 0, out[-3000:]
    assert record is not None
    assert (record["target_reached"], record["steps_to_target"], record["samples_to_target"],
            record["time_to_target_s"]) == (False, None, None, None)
    assert record["steps_trained"] == 30 and [c[0] for c in record["eval_curve"]] == [10, 20,
                                                                                      30]
    assert record["best_value"] == min(c[2] for c in record["eval_curve"]) > entropy
    assert (record["lr"], record["lr_given"], record["lr_rule"]) == (0.0015, 0.003, "linear")
    assert "not reached in 30 steps" in out
    json.dumps(record)  # a plain JSON record (no NaN: the metric is finite)


def test_target_flags_are_checked_before_torch_loads(tmp_path: Path) -> None:
    for args, expected in [
        (["--target-metric", "val_loss", "--target-value", "2"],
         "--target-metric needs --eval-every, --max-steps"),
        (["--eval-every", "5"], "--eval-every needs --target-metric"),
        (["--model", "gpt-tiny", "--target-metric", "val_loss", "--target-value", "2",
          "--eval-every", "5", "--max-steps", "50"], "--target-metric needs --data"),
        (["--model", "gpt-tiny", "--data", "x", "--target-metric", "val_accuracy",
          "--target-value", "0.5", "--eval-every", "5", "--max-steps", "50"],
         "val_accuracy is for classifiers"),
        (["--data", "x", "--target-metric", "val_loss", "--target-value", "2",
          "--eval-every", "5", "--max-steps", "3"], "--max-steps 3 leaves no timed iteration"),
    ]:
        code, out, record = workload(tmp_path, args)
        assert code == 2 and expected in out and record is None
        assert "Traceback" not in out and len(out.strip().splitlines()) == 1, out


def test_a_resumed_loop_goes_on_from_the_checkpoints_outcome() -> None:
    saved = Outcome(steps=6, train_s=1.0, curve=[(3, 3.0), (6, 2.4)], best=2.4)
    answers, boundaries = iter([2.2, 1.9]), []
    times, out = train(lambda: None, Goal("val_loss", 2.0, 3, 100), 2, 2,
                       lambda: next(answers), lambda: None, start=saved,
                       after_step=lambda s, o: boundaries.append(s))
    assert out.steps == 12 and out.reached_at == 12 and out.curve[-1] == (12, 1.9)
    assert [c[0] for c in out.curve] == [3, 6, 9, 12] and out.train_s > 1.0
    assert boundaries == [7, 8, 9, 10, 11] and len(times) == 2  # warmed up again: 7, 8
    # resumed one step before max_steps: the warm-up shrinks to leave a timed iteration
    late = Outcome(steps=9, curve=[(9, 3.0)], best=3.0)
    times, out = train(lambda: None, Goal("val_loss", 0.1, 5, 12), 4, 2,
                       lambda: 3.0, lambda: None, start=late)
    assert out.steps == 12 and len(times) == 1
