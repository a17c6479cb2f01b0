"""End to end: `python -m scalestudy.workload` as a subprocess, alone and under torchrun."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from scalestudy.workload.__main__ import MODEL_NAMES, append_record, parse_args
from scalestudy.workload.record import MetricsRecord

REPO = Path(__file__).resolve().parents[1]
TINY = [
    "--model", "small_cnn", "--image-size", "32", "--batch-size", "4",
    "--warmup-iters", "1", "--iters", "2", "--batches-per-iter", "2",
]  # fmt: skip

RECORD_KEYS = {
    "schema", "source", "throughput", "throughput_ci", "throughput_per_rank_min",
    "throughput_per_rank_mean", "throughput_per_rank_max", "iter_time_mean", "iter_time_std",
    "world_size", "local_world_size", "nodes", "batch_size", "global_batch", "model",
    "image_size", "precision", "backend", "dist_backend", "device", "warmup_iters", "iters",
    "batches_per_iter", "num_params", "hosts", "torch_version", "python_version", "elapsed_s",
    "channels_last", "compile", "lr", "base_lr", "lr_warmup_iters", "grad_bytes", "diagnostics",
    "step_time_s", "compute_time_s", "compute_throughput", "comm_overhead", "compute_iters",
    "allreduce_probe", "allreduce_busbw_GBps", "allreduce_latency_s", "ddp", "env",
    "throughput_unit", "throughput_mean_of_rates", "throughput_estimator", "rank_seconds",
    "units_per_rank", "provenance", "rank_hosts", "rank_compute_s", "data_kind",
    "noise_scale", "noise_scale_unavailable",
    "optimizer", "weight_decay", "lr_given", "lr_rule", "lr_reference_batch", "warmup_steps",
    "lr_decay",
}  # fmt: skip
# Energy: measured (NVIDIA GPU with nvidia-ml-py) or the reason why not.
ENERGY_KEYS = ({"energy_j", "energy_source", "energy_gpus", "energy_j_per_sample"},
               {"energy_unavailable"})


def harness_values(stdout: str, num_tasks: int, model: str, batch_size: int) -> dict[str, float]:
    """Parse stdout the way existing harnesses parse Horovod's pytorch_synthetic_benchmark."""
    # reframe-hpc/reframe: hpctestlib/ml/pytorch/horovod.py (pytorch_cnn_check)
    assert re.search(rf"Model: {model}", stdout)
    assert re.search(rf"Batch size: {batch_size}", stdout)
    per_gpu = [float(v) for v in re.findall(r"Img/sec per GPU: (\S+) \S+", stdout)]
    total = re.search(rf"Total img/sec on {num_tasks} GPU\(s\): (\S+) \S+", stdout)
    # EESSI/test-suite: eessi/testsuite/tests/apps/PyTorch/PyTorch_torchvision.py
    assert re.search(rf"Total img/sec on {num_tasks} .PU\(s\):.*", stdout)
    eessi_total = re.search(r"Total img/sec on [0-9]+ .PU\(s\):\s+(?P<perf>\S+)", stdout)
    eessi_per_gpu = re.search(r"Img/sec per GPU:\s+(?P<perf_per_gpu>\S+)", stdout)
    # Horovod's own format ('%.1f +-%.1f'), anchored per line
    strict = re.search(
        r"^Total img/sec on (\d+) GPU\(s\): (\d+\.\d) \+-(\d+\.\d)$", stdout, re.MULTILINE
    )
    iters = re.findall(r"^Iter #(\d+): (\d+\.\d) img/sec per GPU$", stdout, re.MULTILINE)
    assert re.search(rf"^Number of GPUs: {num_tasks}$", stdout, re.MULTILINE)
    assert total and eessi_total and eessi_per_gpu and strict and len(per_gpu) == 1
    assert float(eessi_total["perf"]) == float(total[1]) == float(strict[2])
    assert int(strict[1]) == num_tasks
    return {
        "per_gpu": per_gpu[0],
        "total": float(total[1]),
        "total_ci": float(strict[3]),
        "iters": len(iters),
    }


def run_workload(
    cmd: list[str], tmp_path: Path, timeout: float = 120
) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)}
    env.pop("SCALESTUDY_DIST_TIMEOUT_S", None)
    return subprocess.run(
        cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def read_record(path: Path) -> dict:
    lines = path.read_text().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert set(record) >= RECORD_KEYS and set(record) - RECORD_KEYS in ENERGY_KEYS
    assert record["throughput_unit"] == "img/s"
    assert record["schema"] == "scalestudy.metrics/2" and record["source"] == "workload"
    assert set(record) <= set(MetricsRecord.__annotations__)  # the typed record's keys
    assert record["global_batch"] == record["batch_size"] * record["world_size"]
    assert record["throughput"] > 0 and record["throughput_ci"] >= 0
    assert (
        record["throughput_per_rank_min"]
        <= record["throughput_per_rank_mean"]
        <= record["throughput_per_rank_max"]
    )
    assert record["throughput"] == pytest.approx(
        record["throughput_per_rank_mean"] * record["world_size"]
    )
    # The headline is the work the record's ranks did over the time they took.
    assert len(record["rank_seconds"]) == record["world_size"]
    assert record["throughput"] == pytest.approx(
        sum(record["units_per_rank"] / s for s in record["rank_seconds"]), rel=1e-6
    )
    assert record["throughput_estimator"] == "work over time"
    assert record["hosts"] == [socket.gethostname()]
    # each rank's host and compute-only step time, in rank order: the slow-node evidence
    assert record["rank_hosts"] == [socket.gethostname()] * record["world_size"]
    assert len(record["rank_compute_s"]) == record["world_size"]
    assert min(record["rank_compute_s"]) > 0
    assert record["nodes"] == 1
    return record


@pytest.mark.slow  # trains for real
def test_single_process(tmp_path):
    metrics = tmp_path / "deep" / "dir" / "metrics.jsonl"
    cmd = [sys.executable, "-m", "scalestudy.workload", *TINY, "--metrics", str(metrics)]
    proc = run_workload(cmd, tmp_path)
    assert proc.returncode == 0, proc.stderr
    record = read_record(metrics)
    assert record["world_size"] == record["local_world_size"] == 1
    assert record["throughput_per_rank_min"] == record["throughput"]
    expected = {"model": "small_cnn", "image_size": 32, "batch_size": 4, "precision": "fp32"}
    assert {k: record[k] for k in expected} == expected
    assert (record["warmup_iters"], record["iters"], record["batches_per_iter"]) == (1, 2, 2)
    dist_backend = "gloo" if record["device"] == "cpu" else "nccl"
    assert (record["backend"], record["dist_backend"]) == ("ddp", dist_backend)
    assert record["num_params"] == 1_014_920
    assert 0 < record["iter_time_mean"] < record["elapsed_s"]
    parsed = harness_values(proc.stdout, 1, "small_cnn", 4)
    assert parsed["iters"] == 2
    assert parsed["total"] == pytest.approx(record["throughput"], abs=0.051)
    assert parsed["total_ci"] == pytest.approx(record["throughput_ci"], abs=0.051)


@pytest.mark.slow
def test_two_ranks_under_torchrun(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
        "-m", "scalestudy.workload", *TINY, "--metrics", str(metrics),
    ]  # fmt: skip
    proc = run_workload(cmd, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "terminate called" not in proc.stderr
    record = read_record(metrics)
    assert (record["world_size"], record["local_world_size"], record["global_batch"]) == (2, 2, 8)
    # the sum of the two ranks' own rates
    assert record["throughput"] == pytest.approx(
        record["throughput_per_rank_min"] + record["throughput_per_rank_max"], rel=1e-12
    )
    parsed = harness_values(proc.stdout, 2, "small_cnn", 4)
    assert parsed["total"] == pytest.approx(record["throughput"], abs=0.051)
    assert parsed["per_gpu"] == pytest.approx(record["throughput"] / 2, abs=0.051)
    assert parsed["iters"] == 2  # only rank 0 prints


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--batch-size", "0"], "--batch-size: must be >= 1"),
        (["--iters", "many"], "--iters: 'many' is not an integer"),
        (["--model", "vgg16"], "unknown model 'vgg16'"),
        (["--backend", "mxnet"], "unknown --backend"),
        (["--precision", "fp8"], "invalid choice"),
        (["--no-such-flag"], "unrecognized arguments"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(tmp_path, args, message):
    proc = run_workload([sys.executable, "-m", "scalestudy.workload", *args], tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("scalestudy.workload: error: ")
    assert message in lines[0]


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "message"), [
    ("horovod", "--backend horovod needs Horovod, which this Python cannot import"),
    ("deepspeed", "--backend deepspeed needs DeepSpeed, which this Python cannot import"),
])
def test_a_missing_optional_backend_says_how_to_install_it(tmp_path, backend, message):
    # The import fails for real (the module is blocked), whether or not it is installed.
    code = (f"import runpy, sys; sys.modules[{backend!r}] = None; "
            "sys.argv = ['scalestudy.workload', *sys.argv[1:]]; "
            "runpy.run_module('scalestudy.workload', run_name='__main__')")
    proc = run_workload([sys.executable, "-c", code, *TINY, "--backend", backend], tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]
    assert ("scripts/build-horovod" if backend == "horovod" else "pip install") in lines[0]


@pytest.mark.slow
def test_bf16_compression_hook_on_cpu_is_a_one_line_error(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("the hook runs on CUDA")
    cmd = [sys.executable, "-m", "scalestudy.workload", *TINY, "--comm-hook", "bf16"]
    proc = run_workload(cmd, tmp_path)
    assert proc.returncode == 2
    assert "--comm-hook bf16 needs CUDA GPUs with NCCL" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_fp16_on_cpu_is_a_one_line_error(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("fp16 runs on CUDA")
    cmd = [sys.executable, "-m", "scalestudy.workload", *TINY, "--precision", "fp16"]
    proc = run_workload(cmd, tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "scalestudy.workload: error: --precision fp16 needs a CUDA GPU; use bf16 or fp32 on CPU"
    )


@pytest.mark.slow
def test_a_gpu_job_without_a_gpu_fails_instead_of_running_on_cpu(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    cmd = [sys.executable, "-m", "scalestudy.workload", *TINY, "--device", "cuda"]
    proc = run_workload(cmd, tmp_path)
    assert proc.returncode == 2
    assert "expects CUDA GPUs but torch sees none" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_help_and_arg_errors_do_not_import_torch_and_imports_stay_guest_safe(tmp_path):
    code = (
        "import sys, scalestudy.workload.__main__ as m\n"
        "print('torch' in sys.modules)\n"
        "import scalestudy.workload.ddp\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    proc = run_workload([sys.executable, "-c", code], tmp_path)
    assert proc.returncode == 0, proc.stderr
    first, modules = proc.stdout.splitlines()
    assert first == "False"
    loaded = set(modules.split())
    forbidden = {"pandas", "matplotlib", "typer", "pydantic", "yaml", "jinja2", "submitit"}
    assert not loaded & forbidden
    ours = {m for m in loaded if m.startswith("scalestudy.")}
    assert all(m.startswith("scalestudy.workload") for m in ours), ours


def test_model_names_match_the_model_registry():
    from scalestudy.workload.models import MODELS

    assert MODEL_NAMES == MODELS


def test_defaults_follow_horovods_benchmark_and_time_as_a_spec_does():
    from scalestudy.core.spec import SyntheticWorkload

    args = parse_args([])
    assert (args.model, args.batch_size) == ("resnet50", 32)
    # one definition of the timing loop's defaults: a spec's and the flags' agree
    spec = SyntheticWorkload()
    assert (args.warmup_iters, args.iters, args.batches_per_iter) == (
        spec.warmup_iters, spec.iters, spec.batches_per_iter) == (2, 10, 5)
    assert (args.precision, args.backend, args.dist_backend, args.num_classes) == (
        "fp32", "ddp", "auto", 1000,
    )  # fmt: skip


def test_append_record_appends_and_repairs_a_torn_line(tmp_path):
    path = tmp_path / "a" / "metrics.jsonl"
    append_record(path, {"n": 1})
    append_record(path, {"n": 2})
    with path.open("a") as fh:
        fh.write('{"n": 3, "tor')  # a writer killed mid-line
    append_record(path, {"n": 4})
    lines = path.read_text().splitlines()
    assert json.loads(lines[0]) == {"n": 1} and json.loads(lines[1]) == {"n": 2}
    assert json.loads(lines[-1]) == {"n": 4}
    assert path.read_text().endswith("\n")


def test_deepspeed_gets_the_rank_variables_torchrun_would_set():
    from scalestudy.workload.deepspeed_backend import export_rank_environment
    from scalestudy.workload.env import discover

    srun = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1",
            "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_NODEID": "1",
            "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_NNODES": "2"}
    environ = dict(srun)
    export_rank_environment(discover(srun), environ)
    assert (environ["RANK"], environ["LOCAL_RANK"], environ["WORLD_SIZE"]) == ("3", "1", "4")
    assert environ["LOCAL_WORLD_SIZE"] == "2" and environ["MASTER_ADDR"] == "n1"
    kept = {**srun, "MASTER_PORT": "12345"}
    export_rank_environment(discover(kept), kept)
    assert kept["MASTER_PORT"] == "12345"
