"""Model FLOP utilisation of a transformer run: the record's tokens/s, model TFLOP/s and
MFU fields, and the measured-matmul peak for devices without a datasheet figure.

MFU = achieved model FLOP/s per GPU / peak FLOP/s per GPU (a fraction, not percent),
with model FLOPs = flops_per_token (6N + 12LHQT, see transformer.flops_per_token) x
tokens. As torchtitan, the record states the peak it divided by and where it came from:
``--peak-tflops X`` (a datasheet figure: "given") or ``--peak-tflops measure`` (each
rank times a large dense matmul in the run's precision on its own device and threads:
"measured matmul"; the record keeps the mean over ranks). A measured peak is what this
hardware reaches on the most favourable kernel, so MFU against it is higher than MFU
against a datasheet peak would be.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from .train import TrainConfig, TrainResult

#: Matmul edge for the measured peak: large enough to reach the BLAS's/GPU's top speed
#: (CPU: ~0.1-0.2 s per product on one core), small enough to take about a second.
MATMUL_N = {"cuda": 8192, "cpu": 2048}
#: Seconds of untimed products first, so a GPU is timed in its sustained state (an idle
#: H200 sits at 345 MHz and reaches its power limit under load). A CPU gets one product.
MATMUL_WARMUP_S = {"cuda": 0.25, "cpu": 0.0}
#: (timings, products per timing): the best timing counts.
MATMUL_TIMINGS = {"cuda": (5, 20), "cpu": (3, 1)}


def lm_fields(*, throughput: float, world_size: int, seq_len: int, flops_per_token: int,
              peak_tflops: float | None, peak_source: str | None) -> dict[str, object]:
    """The record's language-model fields from the measured tokens/s over all ranks."""
    per_gpu = throughput / world_size
    achieved = flops_per_token * per_gpu / 1e12
    out: dict[str, object] = {
        "samples_per_s": throughput / seq_len,
        "tokens_per_s_per_gpu": per_gpu,
        "seq_len": seq_len,
        "flops_per_token": flops_per_token,
        "model_tflops_per_gpu": achieved,
    }
    if peak_tflops:
        out.update(peak_tflops=peak_tflops, peak_source=peak_source,
                   mfu=achieved / peak_tflops)
    return out


def transformer_fields(cfg: TrainConfig, results: Sequence[TrainResult], throughput: float,
                       world_size: int, peak: tuple[float | None, str | None]
                       ) -> dict[str, object]:
    """All the record's transformer keys: layout, tokens/s, TFLOP/s, MFU, the loss.

    `results`: every rank's TrainResult. `final_loss` is the mean over the ranks that
    compute the loss (a pipeline's last stage) of the last timed step's loss; with
    diagnostics, backends that time compute-only steps on the bare model first (fsdp,
    deepspeed, horovod) have trained it those steps more. `params_per_rank_max`: the
    most parameter elements one rank holds (its shards or its pipeline stage).
    """
    from .transformer import config, flops_per_token

    shape = config(cfg.model)
    per_token = flops_per_token(shape, cfg.seq_len)
    attention = 12 * shape.n_layers * shape.n_heads * shape.head_dim * cfg.seq_len
    losses = [r.final_loss for r in results if r.final_loss is not None]
    local = [r.local_params for r in results if r.local_params is not None]
    return {
        **cfg.layout.describe(),
        "activation_checkpointing": cfg.activation_checkpointing,
        **lm_fields(throughput=throughput, world_size=world_size, seq_len=cfg.seq_len,
                    flops_per_token=per_token, peak_tflops=peak[0], peak_source=peak[1]),
        # Attention counted in full (PaLM, torchtitan); a causal kernel does about half.
        "attention_flops_share": attention / per_token,
        "final_loss": sum(losses) / len(losses) if losses else None,
        "params_per_rank_max": max(local) if local else None,
    }


def resolve_peak(value: float | str, precision: str, device: torch.device,
                 gather: Callable[[float], list[float]]) -> tuple[float | None, str | None]:
    """(peak TFLOP/s per GPU, where it came from) for `--peak-tflops` (0: none). Every
    rank must call this: "measure" times each rank's matmul and takes the mean."""
    if value == "measure":
        peaks = gather(measure_matmul_tflops(device, precision))
        return sum(peaks) / len(peaks), "measured matmul"
    return (float(value), "given") if float(value) > 0 else (None, None)


def measure_matmul_tflops(device: torch.device, precision: str) -> float:
    """TFLOP/s of n x n x n matmuls in the run's precision on `device`, with this
    process's threads (a CPU rank: its share of the cores): the best of a few timings.

    On a GPU this is the *sustained* rate: products run for MATMUL_WARMUP_S seconds
    first, then each timing covers a batch of products (MATMUL_TIMINGS) between two
    synchronisations. A few single products time a burst instead, which varies with the
    GPU's state: on one H200 (dev/gpu.md), 743-777 TFLOP/s as bursts after 2.5 s idle,
    671-679 sustained, where a training step runs under the same 700 W power limit."""
    import torch

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    kind = "cpu" if device.type == "cpu" else "cuda"  # a GPU's sizes: cuda or xpu
    n = MATMUL_N[kind]
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    from . import accel

    def sync() -> None:
        accel.synchronize(device)

    reps, batch = MATMUL_TIMINGS[kind]
    start = time.perf_counter()
    while True:  # at least one product, then until the warm-up time has passed
        a @ b
        sync()
        if time.perf_counter() - start >= MATMUL_WARMUP_S[kind]:
            break
    best = float("inf")
    for _ in range(reps):
        sync()
        start = time.perf_counter()
        for _ in range(batch):
            a @ b
        sync()
        best = min(best, (time.perf_counter() - start) / batch)
    return 2 * n ** 3 / best / 1e12
