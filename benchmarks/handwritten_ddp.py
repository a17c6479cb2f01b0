"""A minimal hand-written DDP training loop: the yardstick of workload_speed.py.

Random tensors, forward, backward, optimizer step, nothing else; the same model code,
batch and timing definition as the bundled workload (each rank's images / seconds over
the timed iterations, summed over ranks). Run under torchrun:

    torchrun --standalone --nproc-per-node=2 benchmarks/handwritten_ddp.py \
        --model small_cnn --image-size 32 --batch-size 16 --warmup 2 --iters 5 --steps 5
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from scalestudy.workload.models import build_model


def main() -> None:
    """Train, time, print `handwritten img/sec: X` on rank 0."""
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="small_cnn")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--warmup", type=int, default=2, help="untimed iterations")
    p.add_argument("--iters", type=int, default=5, help="timed iterations")
    p.add_argument("--steps", type=int, default=5, help="steps per iteration")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--channels-last", action="store_true")
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
    dist.init_process_group("nccl" if cuda else "gloo")
    torch.manual_seed(42)
    model = build_model(args.model, 1000).to(device)
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
        data = data.contiguous(memory_format=torch.channels_last)
    target = torch.randint(0, 1000, (args.batch_size,), device=device)
    model = DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    amp = torch.bfloat16 if args.precision == "bf16" else None

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
            loss = loss_fn(model(data), target)
        loss.backward()
        optimizer.step()

    for _ in range(args.warmup * args.steps):
        step()
    rates = []
    for _ in range(args.iters):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        if cuda:
            torch.cuda.synchronize()
        rates.append(args.batch_size * args.steps / (time.perf_counter() - start))
    total = torch.tensor([sum(rates) / len(rates)], dtype=torch.float64, device=device)
    dist.all_reduce(total)
    if dist.get_rank() == 0:
        print(f"handwritten img/sec: {total.item():.3f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
