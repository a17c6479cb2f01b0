"""workload.accel and the device choice on Intel GPUs (Aurora's torch.xpu and xccl): what
this CPU machine can run for real. torch here has torch.xpu (is_available() False) and no
xccl backend, so an xpu job must fail at start, on one line, not fall back to the CPU."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from scalestudy.workload import accel, ddp
from scalestudy.workload.env import DistEnv
from scalestudy.workload.train import WorkloadError

ONE = DistEnv()  # one process: rank 0 of 1


def test_each_gpu_type_has_its_process_group_backend() -> None:
    assert accel.dist_backend(torch.device("cuda", 0)) == "nccl"
    assert accel.dist_backend(torch.device("xpu", 3)) == "xccl"
    assert accel.dist_backend(torch.device("cpu")) == "gloo"
    assert accel.is_gpu(torch.device("xpu", 0)) and not accel.is_gpu(torch.device("cpu"))


def test_on_the_cpu_the_gpu_calls_do_nothing() -> None:
    cpu = torch.device("cpu")
    accel.synchronize(cpu)
    accel.set_device(cpu)
    accel.reset_peak_memory(cpu)
    accel.empty_cache(cpu)
    assert accel.peak_memory(cpu) is None and accel.module("cpu") is None


def test_torch_here_has_xpu_but_sees_none() -> None:
    assert accel.module("xpu") is torch.xpu
    assert accel.available("xpu") is torch.xpu.is_available()
    assert accel.xccl_available() is bool(getattr(dist, "is_xccl_available", bool)())


@pytest.mark.skipif(torch.xpu.is_available(), reason="an XPU is present")
def test_an_xpu_job_without_xpu_devices_fails_instead_of_running_on_the_cpu() -> None:
    with pytest.raises(WorkloadError, match=r"expects Intel XPU devices but torch sees none.*"
                       r"module load frameworks.*ZE_FLAT_DEVICE_HIERARCHY=FLAT"):
        ddp.select_device(ONE, "xpu")
    assert ddp.select_device(ONE, "auto").type in ("cpu", "cuda")


def test_the_process_group_backend_must_match_the_device() -> None:
    xpu, cpu = torch.device("xpu", 0), torch.device("cpu")
    with pytest.raises(WorkloadError, match="--dist-backend nccl needs cuda devices, and "
                       "this rank runs on xpu; use xccl"):
        ddp.resolve_dist_backend("nccl", xpu)
    with pytest.raises(WorkloadError, match="--dist-backend xccl needs xpu devices"):
        ddp.resolve_dist_backend("xccl", cpu)
    assert ddp.resolve_dist_backend("auto", cpu) == "gloo"
    if accel.xccl_available():
        assert ddp.resolve_dist_backend("auto", xpu) == "xccl"
    else:  # this CPU build: said at start, with what to load
        with pytest.raises(WorkloadError, match=r"has no xccl backend.*module load frameworks"):
            ddp.resolve_dist_backend("auto", xpu)


def test_fp16_and_the_bf16_hook_stay_cuda_only() -> None:
    xpu = torch.device("xpu", 0)
    with pytest.raises(WorkloadError, match="fp16 needs a CUDA GPU; use bf16 or fp32 on xpu"):
        ddp.check_precision("fp16", xpu)
    ddp.check_precision("bf16", xpu)
    with pytest.raises(WorkloadError, match="use fp16 on xpu"):
        ddp.check_comm_hook("bf16", xpu)


@pytest.mark.slow
@pytest.mark.skipif(torch.xpu.is_available(), reason="an XPU is present")
def test_the_benchmark_asked_for_xpu_exits_2_with_one_line(tmp_path) -> None:
    """What an Aurora job's rank does when the site's XPU torch was not loaded."""
    done = subprocess.run(
        [sys.executable, "-m", "scalestudy.workload", "--model", "resnet18", "--iters", "1",
         "--warmup-iters", "0", "--batch-size", "2", "--image-size", "32", "--device", "xpu",
         "--metrics", str(tmp_path / "m.jsonl")],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    errors = [ln for ln in done.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and "expects Intel XPU devices" in errors[0], done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "m.jsonl").exists()
