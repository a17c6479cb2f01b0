"""The transformer workload without launching ranks: model sizes, the FLOP formula against
torch's FLOP counter, the parallel layout's checks and their one-line errors, and one
single-process run with its record."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from scalestudy.workload import transformer
from scalestudy.workload.layout import Layout, bubble_fraction, plan
from scalestudy.workload.models import MODELS
from scalestudy.workload.names import MODEL_NAMES, TRANSFORMER_MODELS, TRANSFORMER_SHAPES
from scalestudy.workload.record import MetricsRecord

REPO = Path(__file__).resolve().parents[1]


# -- sizes ---------------------------------------------------------------------------------

def _meta_params(name: str, seq_len: int, vocab: int | None = None) -> int:
    cfg = transformer.config(name)
    if vocab is not None:
        cfg = transformer.GPTConfig(cfg.n_layers, cfg.d_model, cfg.n_heads, vocab)
    with torch.device("meta"):  # no memory, no init: instant even for 1.3 B
        model = transformer.GPT(cfg, seq_len)
    return sum(p.numel() for p in model.parameters())  # the tied head counted once


@pytest.mark.slow
@pytest.mark.parametrize(("name", "params"), [
    ("gpt-tiny", 296_704), ("gpt-mini", 1_448_704), ("gpt-125m", 124_475_904),
    ("gpt-350m", 354_871_296), ("gpt-1.3b", 1_313_722_368),
])
def test_named_sizes_have_their_parameter_counts(name: str, params: int) -> None:
    assert _meta_params(name, 1024) == params
    assert transformer.num_parameters(transformer.config(name), 1024) == params


def test_gpt2_layouts_match_the_published_gpt2_counts() -> None:
    # With GPT-2's own vocabulary (50257) and context (1024), gpt-125m and gpt-350m are
    # GPT-2 small and medium: 124,439,808 and 354,823,168 parameters.
    assert _meta_params("gpt-125m", 1024, vocab=50257) == 124_439_808
    assert _meta_params("gpt-350m", 1024, vocab=50257) == 354_823_168


def test_shapes_are_the_named_ones() -> None:
    assert transformer.SIZES["gpt-125m"] == transformer.GPTConfig(12, 768, 12, 50304)
    assert transformer.SIZES["gpt-350m"] == transformer.GPTConfig(24, 1024, 16, 50304)
    assert transformer.SIZES["gpt-1.3b"] == transformer.GPTConfig(24, 2048, 16, 50304)
    assert transformer.VOCAB % 64 == 0 and transformer.VOCAB - transformer.GPT2_VOCAB < 64
    assert tuple(transformer.SIZES) == TRANSFORMER_MODELS == tuple(TRANSFORMER_SHAPES)
    assert set(TRANSFORMER_MODELS) <= set(MODEL_NAMES) and MODEL_NAMES == MODELS
    with pytest.raises(ValueError, match="unknown transformer 'gpt-9b'"):
        transformer.config("gpt-9b")


def test_head_is_tied_to_the_token_embedding() -> None:
    model = transformer.build("gpt-tiny", 16)
    assert model.head is not None and model.tok_emb is not None
    assert model.head.weight is model.tok_emb.weight


# -- FLOPs ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "seq_len", "batch"), [("gpt-tiny", 32, 2),
                                                        ("gpt-mini", 64, 1)])
def test_flops_per_token_equals_torchs_flop_counter(name: str, seq_len: int,
                                                    batch: int) -> None:
    """Exact, not approximate: FlopCounterMode counts matmuls only (mm, addmm, bmm; a
    bias add, LayerNorm, GELU, softmax, the embedding lookup and the loss are not
    counted), which is what 6N + 12LHQT counts. Attention runs through SDPA's math
    kernel here because torch's counter has no formula for the CPU flash kernel (it
    would count 0); the math kernel's bmm's are the full, non-causal QK^T and AV."""
    torch.manual_seed(0)
    model = transformer.build(name, seq_len)
    tokens, targets = transformer.synthetic_tokens(batch, seq_len,
                                                   model.cfg.vocab_size, torch.device("cpu"))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        F.cross_entropy(model(tokens), targets).backward()
    expected = transformer.flops_per_token(model.cfg, seq_len) * batch * seq_len
    assert counter.get_total_flops() == expected


def test_flops_per_token_by_hand_for_gpt_125m() -> None:
    n = 12 * 12 * 768 ** 2 + 50304 * 768  # block weights + the (tied) head
    assert transformer.matmul_parameters(transformer.SIZES["gpt-125m"]) == n
    assert transformer.flops_per_token(transformer.SIZES["gpt-125m"], 1024) == (
        6 * n + 12 * 12 * 12 * 64 * 1024)


def test_activation_checkpointing_recomputes_but_trains_the_same() -> None:
    torch.manual_seed(0)
    plain = transformer.build("gpt-tiny", 16)
    checked = transformer.build("gpt-tiny", 16, activation_checkpointing=True)
    checked.load_state_dict(plain.state_dict())
    tokens, targets = transformer.synthetic_tokens(2, 16, 2048, torch.device("cpu"))
    grads = []
    for model in (plain, checked):
        with FlopCounterMode(display=False) as counter:
            F.cross_entropy(model(tokens), targets).backward()
        grads.append((counter.get_total_flops(), model.head.weight.grad.clone()))
    assert grads[1][0] > grads[0][0]  # the forward ran twice
    torch.testing.assert_close(grads[0][1], grads[1][1])


# -- layout --------------------------------------------------------------------------------

def test_layout_derives_dp_and_places_ranks_like_torchtitan() -> None:
    layout = plan(model="gpt-125m", backend="fsdp", world_size=16, batch_size=8, tp=2, pp=2)
    assert (layout.dp, layout.tp, layout.pp, layout.microbatches) == (4, 2, 2, 2)
    assert layout.mesh_dims() == [("pp", 2), ("dp", 4), ("tp", 2)]
    assert layout.coordinates(0) == {"pp": 0, "dp": 0, "tp": 0}
    assert layout.coordinates(1) == {"pp": 0, "dp": 0, "tp": 1}  # tp neighbours
    assert layout.coordinates(13) == {"pp": 1, "dp": 2, "tp": 1}
    assert Layout(dp=3).mesh_dims() == [("dp", 3)]
    assert Layout(dp=1, tp=2).mesh_dims() == [("tp", 2)]
    assert plan(model="resnet50", backend="horovod", world_size=6, batch_size=3) == Layout(dp=6)


@pytest.mark.parametrize(("pp", "m", "fraction"), [(1, 1, 0.0), (2, 2, 1 / 3), (4, 4, 3 / 7),
                                                   (4, 12, 0.2)])
def test_bubble_fraction(pp: int, m: int, fraction: float) -> None:
    assert bubble_fraction(pp, m) == pytest.approx(fraction)
    assert Layout(pp=pp, microbatches=m).describe()["bubble_fraction"] == pytest.approx(fraction)


def _workload(args: list[str], tmp_path: Path, world: int = 1,
              timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)}
    if world > 1:  # what torchrun sets: the layout is checked before any rank starts
        env |= {"RANK": "0", "WORLD_SIZE": str(world), "LOCAL_RANK": "0",
                "LOCAL_WORLD_SIZE": str(world)}
    return subprocess.run([sys.executable, "-m", "scalestudy.workload", *args], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)


@pytest.mark.parametrize(("world", "args", "message"), [
    (4, ["--tp", "3"], "4 rank(s) cannot be split into tp 3 x pp 1"),
    (8, ["--tp", "8"], "--tp 8 does not divide gpt-tiny's attention heads (4)"),
    (4, ["--pp", "4"], "--pp 4 does not divide gpt-tiny's layers (2)"),
    (2, ["--pp", "2", "--batch-size", "3"], "--batch-size 3 is not divisible into "
     "--microbatches 2"),
    (2, ["--pp", "2", "--microbatches", "1"], "--pp-schedule 1f1b needs --microbatches >= "
     "--pp (2)"),
    (1, ["--microbatches", "2"], "--microbatches 2 needs --pp > 1"),
    (2, ["--tp", "2", "--backend", "deepspeed"], "--tp/--pp need --backend ddp or fsdp"),
    (2, ["--model", "resnet18", "--tp", "2"], "apply to the transformer models"),
    (1, ["--channels-last"], "--channels-last is an image memory format"),
    (2, ["--tp", "2", "--compile"], "--compile runs data parallel only"),
    (1, ["--peak-tflops", "fast"], "'fast' is not a number or 'measure'"),
    (1, ["--probe-batch"], "--probe-batch probes the CNN models only"),
    (1, ["--model", "gpt-7b"], "unknown model 'gpt-7b'"),
])
def test_a_layout_that_cannot_work_is_one_line_and_exit_2(tmp_path: Path, world: int,
                                                         args: list[str], message: str) -> None:
    if "--model" not in args:
        args = ["--model", "gpt-tiny", *args]
    proc = _workload(args, tmp_path, world, timeout=30)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("scalestudy.workload: error: "), lines
    assert message in lines[0]


# -- one real run --------------------------------------------------------------------------

TINY_LM = ["--model", "gpt-tiny", "--seq-len", "32", "--batch-size", "4", "--warmup-iters",
           "1", "--iters", "2", "--batches-per-iter", "2"]


@pytest.mark.slow  # trains for real
def test_single_process_transformer_record(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    proc = _workload([*TINY_LM, "--peak-tflops", "measure", "--metrics", str(metrics)],
                     tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(metrics.read_text())
    assert record["throughput_unit"] == "tokens/s" and record["model"] == "gpt-tiny"
    assert set(record) <= set(MetricsRecord.__annotations__)  # the typed record's keys
    assert (record["dp"], record["tp"], record["pp"], record["microbatches"]) == (1, 1, 1, 1)
    assert record["bubble_fraction"] == 0 and record["pp_schedule"] is None
    assert record["activation_checkpointing"] is False
    assert record["seq_len"] == 32 and record["global_batch"] == 4
    cfg = transformer.SIZES["gpt-tiny"]
    assert record["num_params"] == transformer.num_parameters(cfg, 32)
    assert record["flops_per_token"] == transformer.flops_per_token(cfg, 32)
    tokens = record["throughput"]
    assert tokens > 0 and record["tokens_per_s_per_gpu"] == tokens
    assert record["samples_per_s"] == pytest.approx(tokens / 32)
    assert record["model_tflops_per_gpu"] == pytest.approx(
        record["flops_per_token"] * tokens / 1e12)
    assert record["peak_source"] == "measured matmul" and record["peak_tflops"] > 0
    assert record["mfu"] == pytest.approx(record["model_tflops_per_gpu"]
                                          / record["peak_tflops"])
    assert 0 < record["mfu"] < 1
    assert math.isfinite(record["final_loss"]) and record["final_loss"] < math.log(2048) + 1
    if record["device"] == "cpu":
        assert record["energy_unavailable"].startswith("no NVIDIA GPU")
        assert "energy_j" not in record
    # the Horovod-style summary, in tokens
    total = re.search(r"^Total tokens/sec on 1 GPU\(s\): (\d+\.\d) \+-\d+\.\d$", proc.stdout,
                      re.MULTILINE)
    assert total and float(total[1]) == pytest.approx(tokens, abs=0.051)
    assert re.search(r"; MFU: \d+\.\d\d % of [\d.]+ TFLOP/s per GPU \(measured matmul\)$",
                     proc.stdout, re.MULTILINE)
    assert "img/sec" not in proc.stdout


@pytest.mark.slow  # trains for real
def test_cnn_record_says_img_per_s_and_why_there_is_no_energy(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    proc = _workload(["--model", "small_cnn", "--image-size", "16", "--num-classes", "10",
                      "--batch-size", "2", "--warmup-iters", "0", "--iters", "1",
                      "--batches-per-iter", "1", "--no-diagnostics", "--metrics",
                      str(metrics)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(metrics.read_text())
    assert record["throughput_unit"] == "img/s"
    assert not {"seq_len", "mfu", "tp", "final_loss"} & set(record)
    if record["device"] == "cpu":
        assert record["energy_unavailable"] == "no NVIDIA GPU (the run is on cpu)"


def test_ddp_options_that_replicate_does_not_have_are_named_not_dropped() -> None:
    from scalestudy.workload.parallel import ParallelBackend

    both = Layout(dp=2, tp=2)
    backend = ParallelBackend("ddp", {"bucket_cap_mb": 50.0, "static_graph": False}, both, 0)
    assert backend.dp_wrapper == "replicate"
    assert backend.ignored() == ("--bucket-cap-mb ignored: with tp or pp the data-parallel "
                                 "wrapper is replicate, not torch DDP")
    assert ParallelBackend("ddp", {"bucket_cap_mb": 25.0}, both, 0).ignored() == ""
    assert ParallelBackend("fsdp", {}, Layout(dp=4), 0).dp_wrapper == "fully_shard"
    assert ParallelBackend("fsdp", {}, Layout(dp=1, pp=2), 0).dp_wrapper == "none"


def test_the_measured_peak_warms_up_for_its_time_then_times_batches(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A handful of single products timed a burst that varied with the GPU's state
    (743-793 TFLOP/s on one H200; sustained: 671-680, dev/gpu.md): the warm-up is a time,
    not a count, and each timing is a batch of products."""
    import time

    from scalestudy.workload import mfu

    monkeypatch.setitem(mfu.MATMUL_N, "cpu", 64)
    monkeypatch.setitem(mfu.MATMUL_WARMUP_S, "cpu", 0.05)
    monkeypatch.setitem(mfu.MATMUL_TIMINGS, "cpu", (2, 3))
    start = time.perf_counter()
    tflops = mfu.measure_matmul_tflops(torch.device("cpu"), "fp32")
    assert time.perf_counter() - start >= 0.05
    assert math.isfinite(tflops) and tflops > 0


@pytest.mark.slow
def test_compile_wraps_the_whole_model_or_each_unit_fsdp_shards() -> None:
    from torch._dynamo.eval_frame import OptimizedModule

    from scalestudy.workload.models import build_model, shard_units
    from scalestudy.workload.train import compile_model

    model = transformer.build("gpt-tiny", 16)
    assert isinstance(compile_model(model, per_unit=False), OptimizedModule)
    same = compile_model(model, per_unit=True)  # FSDP2: blocks compiled in place
    assert same is model and not isinstance(model, OptimizedModule)
    units = shard_units(model)
    assert [name for _, name in units] == ["0", "1"]
    assert all(isinstance(getattr(parent, name), OptimizedModule) for parent, name in units)
    resnet = build_model("resnet18", 10)
    assert [name for _, name in shard_units(resnet)] == ["layer1", "layer2", "layer3",
                                                         "layer4"]
