"""Bare PyTorch training loops: the yardsticks that gpu_figures.py runs beside the bundled
workload, with the same model, batch, precision and timing definition.

    python benchmarks/gpu_bare.py cnn --model resnet50 --batch-size 256 --precision bf16 \
        --channels-last --variants torchvision bundled bundled_ddp torchvision_fp16
    python benchmarks/gpu_bare.py gpt --model gpt-1.3b --seq-len 1024 --batch-size 16

A variant is one loop: random tensors, forward under autocast, backward (GradScaler in
fp16), SGD with momentum 0.9 (the workload's optimizer), nothing else; `warmup` untimed
then `iters` timed iterations of `steps` steps, the device synchronised at each iteration's
ends, throughput = units of the timed iterations / their summed seconds (the workload's
"work over time"). The NVML energy counter is read around the timed iterations with the
workload's own meter (scalestudy.workload.energy), and the wall-clock window of the timed
iterations is reported so the caller can hold nvidia-smi's power samples against it.
Prints one line `BARE-RESULT {json}` per variant and `BARE-ENV {json}` first.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from scalestudy.workload import energy, mfu, transformer
from scalestudy.workload.models import build_model

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}


def environment(device: torch.device) -> dict[str, Any]:
    """Versions and the device, as this process sees them."""
    out: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                           "device": str(device)}
    try:
        import torchvision

        out["torchvision"] = torchvision.__version__
    except ImportError:
        out["torchvision"] = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        out.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1),
                   sms=props.multi_processor_count, capability=f"{props.major}.{props.minor}",
                   cudnn=torch.backends.cudnn.version(),
                   nccl=".".join(str(v) for v in torch.cuda.nccl.version()))
    return out


def time_loop(step: Callable[[], object], device: torch.device, warmup: int, iters: int,
              steps: int, units_per_step: float) -> dict[str, Any]:
    """Warm up, time, meter the energy; the loop's figures."""
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    for _ in range(warmup * steps):
        step()
    meter = energy.open_meter(device)
    times: list[float] = []
    sync()
    meter.start()
    window_start = time.time()
    for _ in range(iters):
        sync()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        times.append(time.perf_counter() - start)
    window_end = time.time()
    reading = meter.stop()
    seconds = math.fsum(times)
    units = units_per_step * steps * iters
    out: dict[str, Any] = {"throughput": units / seconds, "seconds": seconds, "units": units,
                           "iter_times": [round(t, 6) for t in times],
                           "window": [window_start, window_end],
                           "warmup_steps": warmup * steps, "timed_steps": iters * steps}
    if "mj" in reading:
        out["energy_j"] = reading["mj"] / 1000
        out["energy_j_per_unit"] = out["energy_j"] / units
    else:
        out["energy_unavailable"] = reading.get("unavailable")
    if device.type == "cuda":
        out["max_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    return out


def make_step(model: nn.Module, data: torch.Tensor, target: torch.Tensor,
              precision: str, device: torch.device) -> tuple[Callable[[], object], Any]:
    """One training step (and its GradScaler, or None)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    dtype = DTYPES[precision]
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
    last: list[torch.Tensor] = []

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = loss_fn(model(data), target)
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        last[:] = [loss.detach()]

    step.last = last  # type: ignore[attr-defined]
    return step, scaler


def cnn_model(variant: str, model_name: str) -> tuple[nn.Module, str]:
    """The variant's model and where it came from."""
    if variant.startswith("torchvision"):
        import torchvision

        return getattr(torchvision.models, model_name)(weights=None, num_classes=1000), \
            f"torchvision {torchvision.__version__}"
    return build_model(model_name, 1000), "scalestudy.workload.models"


def run_cnn(args: argparse.Namespace, device: torch.device) -> None:
    """Each CNN variant in turn; one BARE-RESULT line each."""
    for variant in args.variants:
        precision = "fp16" if variant.endswith("_fp16") else args.precision
        if precision == "fp16" and device.type != "cuda":
            _emit({"variant": variant, "skipped": "fp16 autocast + GradScaler needs CUDA"})
            continue
        try:
            model, source = cnn_model(variant, args.model)
        except ImportError as exc:
            _emit({"variant": variant, "skipped": f"not installed: {exc}"})
            continue
        torch.manual_seed(42)
        model = model.to(device)
        data = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
        if args.channels_last:
            model = model.to(memory_format=torch.channels_last)
            data = data.contiguous(memory_format=torch.channels_last)
        target = torch.randint(0, 1000, (args.batch_size,), device=device)
        if args.compile:
            model = torch.compile(model)
        if variant.endswith("_ddp"):
            _join(device)
            model = nn.parallel.DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None)
        step, scaler = make_step(model, data, target, precision, device)
        out = time_loop(step, device, args.warmup, args.iters, args.steps, args.batch_size)
        out.update(variant=variant, model_source=source, model=args.model,
                   precision=precision, batch_size=args.batch_size,
                   image_size=args.image_size, channels_last=args.channels_last,
                   ddp=variant.endswith("_ddp"), compile=args.compile,
                   final_loss=float(step.last[0]))
        if scaler is not None:
            out["grad_scale_final"] = float(scaler.get_scale())
        _emit(out)
        del model, data, target, step, scaler
        _free(device)


def run_gpt(args: argparse.Namespace, device: torch.device) -> None:
    """The bundled GPT in a plain loop (no wrapper); tokens/s, TFLOP/s, MFU."""
    torch.manual_seed(42)
    with torch.device(device):
        model = transformer.build(args.model, args.seq_len)
    data, target = transformer.synthetic_tokens(args.batch_size, args.seq_len,
                                                model.cfg.vocab_size, device)
    cfg = model.cfg
    if args.compile:
        model = torch.compile(model)  # type: ignore[assignment]
    step, _ = make_step(model, data, target, args.precision, device)
    out = time_loop(step, device, args.warmup, args.iters, args.steps,
                    args.batch_size * args.seq_len)
    per_token = transformer.flops_per_token(cfg, args.seq_len)
    out.update(variant="bare_gpt_compiled" if args.compile else "bare_gpt", model=args.model,
               compile=args.compile, precision=args.precision,
               batch_size=args.batch_size, seq_len=args.seq_len, flops_per_token=per_token,
               model_tflops=per_token * out["throughput"] / 1e12,
               final_loss=float(step.last[0]))
    if args.measure_peak:
        out["measured_matmul_tflops"] = mfu.measure_matmul_tflops(device, args.precision)
    _emit(out)


def _join(device: torch.device) -> None:
    """A one-rank process group (NCCL on CUDA, gloo on CPU), as the workload's."""
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                store=dist.HashStore(), rank=0, world_size=1)


def _free(device: torch.device) -> None:
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def _emit(record: dict[str, Any]) -> None:
    print("BARE-RESULT " + json.dumps(record), flush=True)


def main() -> None:
    """Parse, pick the device, run the loops."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("kind", choices=("cnn", "gpt"))
    p.add_argument("--model", default="resnet50")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--precision", choices=tuple(DTYPES), default="bf16")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--variants", nargs="+", default=["torchvision", "bundled"])
    p.add_argument("--warmup", type=int, default=4, help="untimed iterations")
    p.add_argument("--iters", type=int, default=10, help="timed iterations")
    p.add_argument("--steps", type=int, default=5, help="steps per iteration")
    p.add_argument("--measure-peak", action="store_true", help="gpt: time the matmul peak")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the model (before DDP, as the workload does)")
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True  # as the workload's train.run
    else:
        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    print("BARE-ENV " + json.dumps(environment(device)), flush=True)
    (run_cnn if args.kind == "cnn" else run_gpt)(args, device)
    with contextlib.suppress(Exception):
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
