"""benchmarks/goodput_slurm.py's accounting (its trials need the Slurm testbed; what they
measure is split here): a trial's timeline and record give the restart's two parts, the
first start and the time outside the steps, and the model's goodput; without failures
the conditional prediction is the measured goodput."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "goodput_slurm.py"


def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("goodput_slurm", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["goodput_slurm"] = module
    spec.loader.exec_module(module)
    return module


def killed_once(b: ModuleType) -> object:
    """First `run` at 1000, its job RUNNING at 1002, launch line at 1003, a rank killed
    at 1050 (the checkpoint then held 20 s of training); the next job RUNNING at 1060
    (R_out 10 s), launched at 1061, then 10 s of start-up (1 s load), 80 s of steps, 4
    saves of 0.5 s and 3 s of evaluation and record: done at 1156."""
    first = b.Attempt(1000.0, "1", 1002.0, 1003.0, 1050.0, "rank", 20.0)
    final = b.Attempt(1055.0, "2", 1060.0, 1061.0)
    record = {"train_s": 100.0, "steps_trained": 1000, "checkpoints": 4,
              "checkpoint_save_s": 0.5, "checkpoint_load_s": 1.0, "startup_s": 10.0,
              "resumed_from_step": 200}
    return b.Trial(0, 1000.0, [first, final], 1156.0, record)


def test_a_killed_trial_splits_into_the_parts_the_model_takes() -> None:
    b = bench()
    row = b.analyse([killed_once(b)], 1e7, 100)[0]
    assert row["failures"] == 1 and row["goodput"] == pytest.approx(100 / 156)
    assert row["restart_out_s"] == pytest.approx(10.0)
    assert row["restart_in_s"] == pytest.approx(11.0)  # the job's own line, then start-up
    assert row["first_start_s"] == pytest.approx(2.0 + 10.0)  # no load the first time
    assert row["other_s"] == pytest.approx(3.0)
    assert row["tau_s"] == pytest.approx(10.0)  # 100 steps of 0.1 s
    # failures all but never: the model is the first start, W, W/τ saves and the rest
    assert row["model_wall_s"] == pytest.approx(12.0 + 100 + 10 * 0.5 + 3.0, rel=1e-5)
    # the realised failure pays R_out, R_in and half a segment (τ + C) / 2
    assert row["per_failure_s"] == pytest.approx(10.0 + 11.0 + 5.25, rel=1e-4)


def test_without_failures_the_conditional_model_is_the_measured_goodput() -> None:
    b = bench()
    only = b.Attempt(1000.0, "1", 1002.0, 1003.0)
    record = {"train_s": 100.0, "steps_trained": 1000, "checkpoints": 10,
              "checkpoint_save_s": 0.5, "checkpoint_load_s": None, "startup_s": 9.0,
              "resumed_from_step": None}
    # 1 s job script, 9 s start-up, 100 s of steps, 10 saves of 0.5 s, 3 s of the rest
    clean = b.Trial(1, 1000.0, [only], 1002.0 + 1 + 9 + 100 + 5 + 3, record)
    rows = b.analyse([clean, killed_once(b)], 300.0, 100)
    row = rows[0]
    assert row["conditional_goodput"] == pytest.approx(row["goodput"])
    assert row["restart_out_s"] == pytest.approx(10.0)  # the other trial's, pooled
    assert row["load_s"] == pytest.approx(1.0)
    # at M = 300 s failures are expected: the model's wall clock is longer
    assert row["model_wall_s"] > row["wall_s"] and math.isfinite(row["model_wall_s"])
    summary = b.summary(rows, type("A", (), {"seed": 49, "mtbf_s": 300.0, "steps": 1000,
                                             "every_steps": 100, "model": "gpt-tiny",
                                             "ranks": 2, "nodes": 1})())
    assert summary["trials"] == 2 and summary["within_3_points_conditional"] >= 0.5


def test_trials_simulated_under_the_models_assumptions_average_its_wall_clock() -> None:
    b = bench()
    row = b.analyse([killed_once(b)], 120.0, 100)[0]
    within, mean = b.ceiling(row, 120.0, seed=3, n=4000)
    assert mean == pytest.approx(row["model_wall_s"], rel=0.02)
    assert 0 < within < 1  # Poisson luck alone moves a short run's goodput by points
    calm = b.analyse([killed_once(b)], 1e9, 100)[0]
    assert b.ceiling(calm, 1e9, seed=3, n=10) == (1.0, pytest.approx(calm["model_wall_s"]))
