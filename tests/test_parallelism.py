"""What each kind of parallelism sends and idles, and the findings that name the fastest
factorisation at each scale with why."""

from __future__ import annotations

import pandas as pd
import pytest

from scalestudy.results.analysis.parallelism import factorisation_findings, traffic

# gpt-mini: 4 layers, d = 128
BASE = {"model": "gpt-mini", "seq_len": 64, "batch_size": 8, "precision": "fp32",
        "num_params": 1_000_000, "backend": "ddp"}


def point(**kw: object) -> dict[str, object]:
    return {**BASE, **kw}


def test_data_parallel_ddp_and_fsdp_bytes() -> None:
    ddp = traffic(point(world_size=4, dp=4, tp=1, pp=1))
    assert ddp["dp_bytes"] == pytest.approx(2 * 3 / 4 * 4e6)  # ring allreduce of 4 MB
    assert ddp["tp_bytes"] == ddp["pp_bytes"] == ddp["bubble"] == 0
    fsdp = traffic(point(world_size=4, dp=4, backend="fsdp"))
    assert fsdp["dp_bytes"] == pytest.approx(1.5 * ddp["dp_bytes"])
    assert traffic(point(world_size=1, dp=1))["dp_bytes"] == 0


def test_tensor_parallel_activations_and_the_shard_it_leaves() -> None:
    t = traffic(point(world_size=4, dp=2, tp=2, pp=1))
    activations = 8 * 64 * 128 * 4  # B T d bytes
    assert t["tp_bytes"] == pytest.approx(4 * 4 * 2 * (1 / 2) * activations)
    assert t["dp_bytes"] == pytest.approx(2 * 1 / 2 * 4e6 / 2)  # half the model per rank


def test_pipeline_bubble_and_point_to_point() -> None:
    t = traffic(point(world_size=2, dp=1, tp=1, pp=2, microbatches=2))
    assert t["bubble"] == pytest.approx(1 / 3)  # (p-1)/(m+p-1)
    assert t["pp_bytes"] == pytest.approx(2 * 8 * 64 * 128 * 4)
    assert traffic(point(world_size=2, pp=2, microbatches=6))["bubble"] == pytest.approx(1 / 7)
    assert traffic({"model": "resnet50", "world_size": 4})["dp_bytes"] != \
        traffic({"model": "resnet50", "world_size": 4})["dp_bytes"]  # NaN: not modelled


def test_findings_name_the_fastest_factorisation_and_why_others_lose() -> None:
    table = pd.DataFrame([
        point(world_size=2, dp=2, tp=1, pp=1, throughput_median=9000.0, global_batch=16),
        point(world_size=2, dp=1, tp=2, pp=1, throughput_median=6000.0, global_batch=8),
        point(world_size=2, dp=1, tp=1, pp=2, microbatches=2, throughput_median=5000.0,
              global_batch=8),
        point(world_size=1, dp=1, tp=1, pp=1, throughput_median=5000.0, global_batch=8),
    ])
    found = factorisation_findings(table)
    assert len(found) == 1  # one world size with several factorisations
    text = found[0]
    assert text.startswith("At 2 GPUs, dp 2 x tp 1 x pp 1 (ddp) is fastest (9,000 tokens/s")
    assert "dp 1 x tp 2 x pp 1 (ddp) is 33% slower: tensor parallelism sends" in text
    assert "dp 1 x tp 1 x pp 2 (ddp) is 44% slower: the pipeline bubble idles 33%" in text
    assert factorisation_findings(pd.DataFrame([point(world_size=2)]).assign(
        throughput_median=1.0, global_batch=8, model="resnet50")) == []


def test_one_mfu_denominator_for_the_study() -> None:
    # Each run measured its own matmul peak on a loaded machine: dp 4's lower peak made
    # its MFU read higher than dp 2's although it does less per GPU.
    from scalestudy.results.analysis.efficiency import one_peak

    runs = pd.DataFrame({"model_tflops_per_gpu": [0.0389, 0.0176],
                         "peak_tflops": [0.0772, 0.0328], "mfu": [0.504, 0.537],
                         "peak_source": ["measured matmul", "measured matmul"]})
    out = one_peak(runs)
    assert out["peak_tflops"].tolist() == [0.0772, 0.0772]
    assert out["mfu"].tolist() == pytest.approx([0.0389 / 0.0772, 0.0176 / 0.0772])
    assert out["mfu"].iloc[0] > out["mfu"].iloc[1]
    assert "highest of 2 peaks" in out["peak_source"].iloc[0]
    given = runs.assign(peak_tflops=312.0)
    assert one_peak(given) is given  # one peak already: nothing recomputed
