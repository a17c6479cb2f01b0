"""The three backends for real on this machine: DDP, Horovod and DeepSpeed runs of the
same grid points side by side, through `scalestudy run`, and the diagnostics they carry.

Horovod tests skip where `horovod.torch` cannot be imported (build it with
scripts/build-horovod) and fail instead when SCALESTUDY_REQUIRE_HOROVOD=1 (CI).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.slow


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def _need(module: str, require_env: str) -> None:
    if _importable(module):
        if module == "deepspeed":
            _deepspeed_op()
        return
    if os.environ.get(require_env) == "1":
        pytest.fail(f"{module} is not importable but {require_env}=1")
    pytest.skip(f"{module} is not installed")


@functools.cache
def _deepspeed_op() -> None:
    """DeepSpeed compiles its CPU shared-memory allreduce the first time a rank starts
    (minutes on two cores): build it here, once, into torch's extension cache where the
    ranks find it, so that no study's walltime pays for a compiler."""
    done = subprocess.run(
        [sys.executable, "-c", "from deepspeed.comm.torch import build_shm_op; build_shm_op()"],
        capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture
def horovod() -> None:
    _need("horovod.torch", "SCALESTUDY_REQUIRE_HOROVOD")


@pytest.fixture
def deepspeed() -> None:
    _need("deepspeed", "SCALESTUDY_REQUIRE_DEEPSPEED")


SIDE_BY_SIDE = """
name: hvd-vs-ddp
workload: {model: small_cnn, image_size: 16, num_classes: 10, warmup_iters: 1, iters: 2,
           batches_per_iter: 2}
grid:
  ranks_per_node: [1, 2, 4]
  batch_size: 4
  backend: [ddp, horovod]
  tuning: [default, fp16-wire, no-fusion]
exclude:  # the Horovod variants at 2 ranks only (CI time)
  - {backend: ddp, tuning: [fp16-wire, no-fusion]}
  - {tuning: [fp16-wire, no-fusion], ranks_per_node: [1, 4]}
tuning:
  fp16-wire: {options: {compression: fp16}}
  no-fusion:
    env: {HOROVOD_FUSION_THRESHOLD: 0, HOROVOD_CYCLE_TIME: 1, HOROVOD_TIMELINE: timeline.json}
job: {walltime: "00:03:00"}
"""


def test_horovod_and_ddp_side_by_side_with_1_2_4_ranks(tmp_path: Path, write_spec,
                                                       horovod: None) -> None:
    spec = str(write_spec(SIDE_BY_SIDE))
    done = run_cli("run", spec, cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    runs = pd.read_csv(tmp_path / "results" / "hvd-vs-ddp" / "runs.csv")
    assert len(runs) == 3 + 3 + 2 and set(runs["state"]) == {"completed"}
    assert (runs["throughput"] > 0).all()
    for backend in ("ddp", "horovod"):
        sizes = sorted(runs.loc[runs["backend"] == backend, "world_size"].unique())
        assert sizes == [1, 2, 4], backend
    hvd = runs[runs["backend"] == "horovod"].set_index(["tuning", "world_size"])
    full = hvd.loc[("default", 2)]
    half = hvd.loc[("fp16-wire", 2)]
    # fp16 compression halves the bytes on the wire, and the record says so
    assert half["grad_bytes"] * 2 == full["grad_bytes"] == 4 * full["num_params"]
    assert half["horovod.compression"] == "fp16" and full["horovod.compression"] == "none"
    no_fusion = hvd.loc[("no-fusion", 2)]
    assert float(no_fusion["env.HOROVOD_FUSION_THRESHOLD"]) == 0
    assert pd.isna(full.get("env.HOROVOD_FUSION_THRESHOLD"))
    for row in runs.itertuples():
        assert -1 < row.comm_overhead < 1 and row.allreduce_busbw_GBps >= 0
    # a relative HOROVOD_TIMELINE is kept in the run directory, with Horovod's events
    timeline = hvd.loc[("no-fusion", 2)]
    trace = tmp_path / "results" / "hvd-vs-ddp" / "runs" / timeline["run_id"] / "timeline.json"
    assert trace.is_file() and "allreduce" in trace.read_text().lower()
    report = tmp_path / "results" / "hvd-vs-ddp" / "report" / "index.html"
    assert report.is_file()


def test_deepspeed_zero_stages_as_a_grid_axis(tmp_path: Path, write_spec,
                                              deepspeed: None) -> None:
    spec = str(write_spec("""
name: zero
workload: {model: small_cnn, image_size: 16, num_classes: 10, warmup_iters: 1, iters: 2,
           batches_per_iter: 2}
grid: {ranks_per_node: [2], batch_size: 4, backend: [ddp, deepspeed], zero_stage: [0, 1, 2, 3]}
job: {walltime: "00:05:00"}
"""))
    done = run_cli("run", spec, cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    runs = pd.read_csv(tmp_path / "results" / "zero" / "runs.csv")
    assert len(runs) == 1 + 4 and set(runs["state"]) == {"completed"}
    ds = runs[runs["backend"] == "deepspeed"]
    assert sorted(ds["zero_stage"]) == [0, 1, 2, 3]
    assert (ds["deepspeed.zero_stage"] == ds["zero_stage"]).all()
    for row in ds.itertuples():
        config = json.loads((tmp_path / "results" / "zero" / "runs" / row.run_id
                             / "deepspeed_config.json").read_text())
        assert config["zero_optimization"]["stage"] == row.zero_stage
        assert config["train_micro_batch_size_per_gpu"] == 4
        assert config["train_batch_size"] == 8
    assert (runs["throughput"] > 0).all()


def test_ddp_speed_options_run_and_are_recorded(tmp_path: Path) -> None:
    metrics = tmp_path / "m.jsonl"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           "-m", "scalestudy.workload", "--model", "small_cnn", "--image-size", "16",
           "--num-classes", "10", "--batch-size", "4", "--warmup-iters", "1", "--iters", "2",
           "--batches-per-iter", "2", "--precision", "bf16", "--channels-last", "--compile",
           "--comm-hook", "fp16", "--bucket-cap-mb", "1", "--gradient-as-bucket-view",
           "--static-graph", "--mllog", "--lr", "0.2", "--base-lr", "0.1",
           "--lr-warmup-iters", "4", "--metrics", str(metrics)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(metrics.read_text().splitlines()[-1])
    assert record["precision"] == "bf16" and record["channels_last"] and record["compile"]
    assert record["ddp"] == {"bucket_cap_mb": 1.0, "gradient_as_bucket_view": True,
                             "static_graph": True, "comm_hook": "fp16"}
    assert record["grad_bytes"] == 2 * record["num_params"]  # fp16 on the wire
    assert (record["lr"], record["base_lr"], record["lr_warmup_iters"]) == (0.2, 0.1, 4)
    probe = record["allreduce_probe"]
    for algbw, busbw in zip(probe["algbw_GBps"], probe["busbw_GBps"], strict=True):
        assert busbw == pytest.approx(algbw * 2 * (2 - 1) / 2, rel=1e-4, abs=1e-6)
    assert probe["bytes"][-1] == record["grad_bytes"]
    assert ":::MLLOG" in done.stdout and "total images/sec: " in done.stdout
