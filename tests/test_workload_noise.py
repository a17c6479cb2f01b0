"""workload.noise: McCandlish's B_simple from each rank's gradient and the all-reduced one.

The estimator against synthetic gradients of known tr Σ and |G|² (its interval holds the
truth as often as its level says); the DDP comm hook in this process on a one-rank gloo
group (both norms are the gradient's, with and without a compression hook around it);
and, slow, real runs under torchrun: two ranks on a token dataset carry a finite
positive noise scale, one rank carries null and why.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from scalestudy.workload import noise
from scalestudy.workload.ddp import simulated_network
from tests.test_workload_data import write_tokens
from tests.test_workload_main import run_workload


def _steps(rng: np.random.Generator, steps: int, ranks: int, b_small: int, grad: np.ndarray,
           sigma: np.ndarray) -> list[tuple[float, float]]:
    """Each step's (|G_small|², |G_big|²) when per-sample gradients are G + noise of
    covariance diag(sigma²): a rank's mean over b_small samples has covariance Σ/b_small."""
    local = grad + rng.standard_normal((steps, ranks, grad.size)) * sigma / math.sqrt(b_small)
    small = (local ** 2).sum(axis=2).mean(axis=1)
    big = (local.mean(axis=1) ** 2).sum(axis=1)
    return list(zip(small.tolist(), big.tolist(), strict=True))


def _truth(dim: int = 20, trace: float = 40.0) -> tuple[np.ndarray, np.ndarray, float]:
    grad = np.linspace(1, 2, dim)
    grad /= np.linalg.norm(grad)  # |G|² = 1
    sigma = np.sqrt(np.linspace(0.5, 1.5, dim) * trace / dim)  # tr Σ = trace
    return grad, sigma, float((sigma ** 2).sum() / (grad ** 2).sum())


def test_b_simple_comes_out_within_its_interval_of_the_true_noise_scale() -> None:
    grad, sigma, true = _truth()
    assert true == pytest.approx(40.0)
    got = noise.estimate(_steps(np.random.default_rng(1), 200, 4, 8, grad, sigma), 8, 32)
    assert got["noise_scale_low"] <= true <= got["noise_scale_high"]
    assert got["noise_scale"] == pytest.approx(true, rel=0.25)
    assert got["noise_scale_level"] == noise.LEVEL and got["noise_scale_steps"] == 200
    assert got["noise_scale"] == pytest.approx(got["noise_trace"] / got["noise_grad_sq"])
    # the raw means recompute it: the ratio of the averages
    g2, tr = noise.per_step(got["grad_sq_small"], got["grad_sq_big"], 8, 32)
    assert tr / g2 == pytest.approx(got["noise_scale"])


def test_the_interval_holds_the_truth_about_as_often_as_its_level_says() -> None:
    grad, sigma, true = _truth()
    rng = np.random.default_rng(7)
    trials, held, unbounded = 300, 0, 0
    for _ in range(trials):
        got = noise.estimate(_steps(rng, 40, 2, 16, grad, sigma), 16, 32)
        if got["noise_scale"] is None or got["noise_scale_high"] is None:
            unbounded += 1
            held += 1  # an unbounded interval holds everything
            continue
        held += got["noise_scale_low"] <= true <= got["noise_scale_high"]
    assert unbounded < trials * 0.05
    assert 0.84 <= held / trials <= 0.96, held / trials


def test_more_steps_narrow_the_interval() -> None:
    grad, sigma, _ = _truth()
    width = []
    for steps in (30, 300):
        got = noise.estimate(_steps(np.random.default_rng(3), steps, 4, 8, grad, sigma), 8, 32)
        width.append(got["noise_scale_high"] - got["noise_scale_low"])
    assert width[1] < width[0] / 2


def test_what_cannot_be_said_is_null_with_the_reason() -> None:
    one = noise.estimate([(1.0, 1.0)] * 5, 8, 8)
    assert one["noise_scale"] is None and "2 or more ranks" in one["noise_scale_unavailable"]
    few = noise.estimate([(2.0, 1.0), (math.nan, 1.0)], 8, 16)
    assert few["noise_scale"] is None and "1 step(s)" in few["noise_scale_unavailable"]
    # the local norms no larger than the averaged one: |G|² fine, no noise between ranks
    flat = noise.estimate([(1.0, 1.0), (1.0, 1.01), (1.0, 1.0)], 8, 16)
    assert flat["noise_scale"] is None and "tr Σ not resolved" in \
        flat["noise_scale_unavailable"]
    # noise swamping the gradient: |G|² estimated below zero
    swamped = noise.estimate([(10.0, 4.0), (11.0, 5.0), (9.0, 4.5)], 8, 16)
    assert swamped["noise_scale"] is None and "|G|² not resolved" in \
        swamped["noise_scale_unavailable"]
    assert swamped["noise_scale_steps"] == 3 and swamped["grad_sq_small"] == 10.0


def test_a_denominator_not_resolved_gives_an_unbounded_interval() -> None:
    assert noise.fieller(4.0, 1.0, 0.01, 4.0, 0.0, 1.645) == (None, None)
    low, high = noise.fieller(4.0, 1.0, 0.01, 0.0001, 0.0, 1.645)
    assert low < 4.0 < high and high - 4.0 > 4.0 - low  # a ratio's: wider upward


def test_student_t_quantiles() -> None:
    for p, dof, exact in ((0.95, 10, 1.8125), (0.95, 3, 2.3534), (0.975, 5, 2.5706),
                          (0.95, 100, 1.6602)):
        assert noise.t_quantile(p, dof) == pytest.approx(exact, rel=0.01)


def test_why_a_ddp_run_does_not_measure_it() -> None:
    assert "world size 1" in noise.reason_not_measured(1, synthetic=False, environ={})
    assert "synthetic data" in noise.reason_not_measured(2, synthetic=True, environ={})
    assert "switched off" in noise.reason_not_measured(2, False, {noise.SWITCH_ENV: "off"})
    assert noise.reason_not_measured(2, synthetic=False, environ={}) == ""


@pytest.fixture
def one_rank() -> Iterator[None]:
    """A one-rank gloo group in this process (no port, no subprocess)."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # DDP's constructor imports torch._dynamo: 3-10 s, once
@pytest.mark.parametrize("inner", ["allreduce", "fp16", "simulated"])
def test_the_hook_measures_both_norms_around_the_hook_in_use(
        one_rank: None, inner: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(noise, "CHUNK", 2)  # 5 steps: two chunks of 2 and one open step
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    ddp = DistributedDataParallel(model, bucket_cap_mb=0.005)  # several buckets
    hook = {"allreduce": default_hooks.allreduce_hook,
            "fp16": default_hooks.fp16_compress_hook,
            "simulated": simulated_network(0.0, 1e-12, 1, default_hooks.allreduce_hook)}[inner]
    meter = noise.NoiseMeter(world_size=1)
    ddp.register_comm_hook(state=None, hook=meter.wrap(hook))
    expected = []
    for _ in range(5):
        ddp.zero_grad()
        ddp(torch.randn(16, 32)).square().mean().backward()
        meter.end_step()
        expected.append(sum(float(p.grad.double().square().sum()) for p in model.parameters()))
    with ddp.no_sync():  # no bucket reduced: not a step
        ddp(torch.randn(16, 32)).square().mean().backward()
    meter.end_step()
    got = meter.steps()
    assert len(got) == 5
    rel = 1e-3 if inner == "fp16" else 1e-6  # fp16 on the wire; fp32 norms
    assert inner != "fp16" or any(s != b for s, b in meter.steps())  # it did round
    for (small, big), want in zip(got, expected, strict=True):
        # p.grad is the hook's result: the averaged gradient (one rank: the local one,
        # after fp16 rounding when compressed)
        assert big == pytest.approx(want, rel=1e-6)
        assert small == pytest.approx(want, rel=rel)  # before the hook: the local gradient
    assert meter.steps(skip=1) == got[1:]


def _record(tmp_path: Path, ranks: int, data: Path | None) -> tuple[dict, str]:
    metrics = tmp_path / f"m{ranks}.jsonl"
    launch = (["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks)]
              if ranks > 1 else [])
    cmd = [sys.executable, *launch, "-m", "scalestudy.workload", "--model", "gpt-tiny",
           "--seq-len", "16", "--batch-size", "4", "--warmup-iters", "1", "--iters", "3",
           "--batches-per-iter", "4", "--no-diagnostics", "--metrics", str(metrics),
           *(["--data", str(data), "--data-workers", "0"] if data else [])]
    proc = run_workload(cmd, tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(metrics.read_text().splitlines()[-1]), proc.stdout


@pytest.mark.slow  # trains for real under torchrun
def test_two_ranks_on_a_dataset_record_a_finite_positive_noise_scale(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    data = write_tokens(tmp_path / "tok", rng.integers(0, 300, 20000), 300)
    record, _ = _record(tmp_path, 2, data)
    value = record["noise_scale"]
    assert value is not None and math.isfinite(value) and value > 0, record.get(
        "noise_scale_unavailable")
    assert record["noise_scale_steps"] == 12  # the timed steps: 3 iterations of 4
    assert (record["noise_scale_b_small"], record["noise_scale_b_big"]) == (4, 8)
    assert record["grad_sq_small"] > record["grad_sq_big"] > 0
    high = record["noise_scale_high"]
    assert record["noise_scale_low"] <= value <= (math.inf if high is None else high)


@pytest.mark.slow
def test_one_rank_records_null_and_why(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    data = write_tokens(tmp_path / "tok", rng.integers(0, 300, 20000), 300)
    record, _ = _record(tmp_path, 1, data)
    assert record["noise_scale"] is None
    assert "world size 1" in record["noise_scale_unavailable"]
