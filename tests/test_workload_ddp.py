"""workload.ddp: the simulated network (a comm hook with a known alpha and beta) that
gives the scaling model a known truth to recover."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from scalestudy.workload.ddp import simulated_delay
from tests.test_workload_main import TINY, run_workload


def test_the_simulated_delay_is_the_models_own_form() -> None:
    assert simulated_delay(0.01, 1e-9, 1, 4_000_000) == 0.0  # one rank: no network
    assert simulated_delay(0.01, 1e-9, 2, 4_000_000) == pytest.approx(0.01 + 4e-3)
    assert simulated_delay(0.01, 1e-9, 8, 4_000_000) == pytest.approx(
        0.03 + 1e-9 * 2 * 7 / 8 * 4_000_000)


@pytest.mark.slow  # trains for real under torchrun
def test_every_allreduce_waits_the_simulated_network(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", "-m", "scalestudy.workload", *TINY, "--no-diagnostics", "--metrics",
           str(metrics), "--sim-latency-ms", "40", "--sim-ns-per-byte", "5"]
    proc = run_workload(cmd, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(metrics.read_text().splitlines()[-1])
    ddp = record["ddp"]
    assert (ddp["sim_latency_ms"], ddp["sim_ns_per_byte"]) == (40.0, 5.0)
    assert ddp["buckets"] >= 1  # alpha is paid once per bucket
    # a lower bound only (a loaded machine makes steps slower, never faster): each step
    # waits at least alpha·log2 2 per bucket + beta·2(2−1)/2·S
    wait = ddp["buckets"] * 0.040 * math.log2(2) + 5e-9 * record["grad_bytes"]
    step = record["iter_time_mean"] / record["batches_per_iter"]
    assert step >= wait
