"""What a checkpoint of the bundled GPT costs under FSDP2: torch.distributed.checkpoint's
save (sync), async_save (the time the training loop is blocked, and the time until the
files are complete) and load, with the bytes written, one JSON line per measurement.

    torchrun --standalone --nproc-per-node=N benchmarks/gpu_checkpoint.py \
        [--model gpt-1.3b] [--seq-len 1024] [--dir /local/ckpt] [--repeats 3] [--cpu]

The model is the workload's own (scalestudy.workload.transformer), sharded per block and
at the root with `fully_shard` (as `--backend fsdp` does), after one AdamW step so the
optimizer's state (two fp32 moments per parameter) is saved with the parameters: the state
a training run's checkpoint holds. Every time is wall clock after a device synchronise and
a barrier, the slowest rank's (a checkpoint is done when every rank is); `GB/s` is the
bytes on disk over that time. The directory is emptied between repeats; the page cache is
not dropped, so load times are from memory where the files fit (said in each line).
`--cpu` runs the same steps with gloo on CPU at tiny sizes (a check that the script runs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scalestudy.workload import transformer  # noqa: E402
from scalestudy.workload.parallel import apply_fsdp  # noqa: E402


def main() -> None:
    args = _args()
    device = _start(args.cpu)
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = torch.distributed.device_mesh.init_device_mesh(device.type, (world,))
    torch.manual_seed(0)
    model = transformer.build(args.model, args.seq_len).to(device)
    apply_fsdp(model, mesh, reshard_after_forward=True,
               param_dtype=None if args.cpu else torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=not args.cpu)
    inputs, targets = transformer.synthetic_tokens(
        args.batch_size, args.seq_len, transformer.config(args.model).vocab_size, device)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=not args.cpu):
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    base = Path(args.dir) / f"ckpt-{os.environ.get('TORCHELASTIC_RUN_ID', 'run')}"
    for repeat in range(args.repeats):
        for mode in ("sync", "async"):
            where = base / f"{mode}-{repeat}"
            blocked, done = _save(model, optimizer, where, mode, device)
            size = _bytes(where) if rank == 0 else 0
            loaded = _load(model, optimizer, where, device)
            if rank == 0:
                print(json.dumps({
                    "what": "checkpoint", "model": args.model, "ranks": world,
                    "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                    "mode": mode, "repeat": repeat, "bytes": size,
                    "save_blocked_s": round(blocked, 4), "save_done_s": round(done, 4),
                    "load_s": round(loaded, 4), "save_GBps": round(size / done / 1e9, 3),
                    "load_GBps": round(size / loaded / 1e9, 3), "dir": str(args.dir),
                    "note": "load after save: page cache not dropped"}), flush=True)
            dist.barrier()
            if rank == 0:
                shutil.rmtree(where, ignore_errors=True)
    dist.barrier()
    del model, optimizer
    dist.destroy_process_group()


def _save(model: torch.nn.Module, optimizer: torch.optim.Optimizer, where: Path, mode: str,
          device: torch.device) -> tuple[float, float]:
    """(seconds the caller was blocked, seconds until the checkpoint was complete)."""
    _sync(device)
    start = time.perf_counter()
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    if mode == "sync":
        dcp.save(state, checkpoint_id=str(where))
        _sync(device)
        blocked = done = time.perf_counter() - start
    else:
        future = dcp.async_save(state, checkpoint_id=str(where))
        _sync(device)
        blocked = time.perf_counter() - start
        future.result()
        _sync(device)
        done = time.perf_counter() - start
    return _slowest(blocked, device), _slowest(done, device)


def _load(model: torch.nn.Module, optimizer: torch.optim.Optimizer, where: Path,
          device: torch.device) -> float:
    _sync(device)
    start = time.perf_counter()
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=str(where))
    set_state_dict(model, optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    _sync(device)
    return _slowest(time.perf_counter() - start, device)


def _slowest(seconds: float, device: torch.device) -> float:
    value = torch.tensor([seconds], device=device, dtype=torch.float64)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return float(value.item())


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()
    dist.barrier()


def _bytes(where: Path) -> int:
    return sum(p.stat().st_size for p in where.rglob("*") if p.is_file())


def _start(cpu: bool) -> torch.device:
    if cpu:
        dist.init_process_group("gloo")
        return torch.device("cpu")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("cpu:gloo,cuda:nccl", device_id=torch.device("cuda", local))
    return torch.device("cuda", local)


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt-1.3b")
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--dir", default=os.environ.get("TMPDIR", "/tmp"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cpu", action="store_true")
    return parser.parse_args()


if __name__ == "__main__":
    main()
