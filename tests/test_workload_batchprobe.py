"""The batch-size search and the out-of-memory test."""

from __future__ import annotations

import pytest
import torch

from scalestudy.workload.batchprobe import (
    candidates,
    is_oom,
    peak_resident_bytes,
    reset_peak_resident,
)


@pytest.mark.parametrize(("limit", "largest"), [(1, 1), (5, 5), (64, 64), (100, 100),
                                                (1000, 1000), (4096, 4096)])
def test_doubling_then_bisection_finds_the_largest_fit(limit: int, largest: int) -> None:
    tried: list[int] = []

    def fits(batch: int) -> bool:
        tried.append(batch)
        return batch <= limit

    found = candidates(1, 4096, fits)
    # bisection stops within 1/8 of the batch: the answer fits and is close to the limit
    assert found is not None and found <= largest and found >= largest - max(1, largest // 8)
    assert tried[:3] == [1, 2, 4][: len(tried[:3])]
    assert len(tried) <= 2 * 13  # log2(4096) doublings + a short bisection


def test_nothing_fits_and_max_batch_is_respected() -> None:
    assert candidates(8, 64, lambda b: False) is None
    tried: list[int] = []
    assert candidates(3, 20, lambda b: tried.append(b) or True) == 20
    assert tried == [3, 6, 12, 20]


def test_out_of_memory_errors_are_recognised_and_others_are_not() -> None:
    assert is_oom(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert is_oom(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to "
                               "allocate 67108864 bytes"))
    assert is_oom(MemoryError())
    assert not is_oom(RuntimeError("Expected all tensors to be on the same device"))
    assert not is_oom(ValueError("out of memory"))


def test_peak_resident_memory_resets_between_batches() -> None:
    before = reset_peak_resident()
    block = torch.ones(64 << 20, dtype=torch.uint8)  # 64 MiB, touched
    grown = peak_resident_bytes()
    del block
    after = reset_peak_resident()
    assert grown >= before + (60 << 20)
    assert after < grown  # the peak of the freed block is forgotten


@pytest.mark.slow
def test_the_probe_tunes_the_backends_as_a_run_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """cuDNN's algorithm search is on in a run (train.run) and so in the probe, whose
    throughput per batch is meant to be what a run of that batch gets."""
    from scalestudy.workload import batchprobe
    from scalestudy.workload.models import build_model
    from scalestudy.workload.train import TrainConfig

    tuned: list[str] = []
    monkeypatch.setattr(batchprobe, "tune_backends", lambda device: tuned.append(device.type))
    cfg = TrainConfig(model="small_cnn", image_size=8, num_classes=4, batch_size=1,
                      precision="fp32", warmup_iters=0, iters=1, batches_per_iter=1, seed=0)
    points, best = batchprobe.probe(lambda: build_model("small_cnn", 4), cfg,
                                    torch.device("cpu"), 2, 4, log=lambda line: None)
    assert tuned == ["cpu"] and best == 4 and [p.batch_size for p in points] == [2, 4]


def test_cudnn_search_is_switched_on_for_cuda_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from scalestudy.workload.train import tune_backends

    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    tune_backends(SimpleNamespace(type="cpu"))
    assert torch.backends.cudnn.benchmark is False
    tune_backends(SimpleNamespace(type="cuda"))
    assert torch.backends.cudnn.benchmark is True
