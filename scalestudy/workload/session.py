"""Joining the job's ranks: one registry of backend starters (DDP, FSDP2 and the tensor
and pipeline layouts, Horovod, DeepSpeed), each returning a `Session`: the backend, the
ranks it found, the device and the process group's backend. Every backend shuts down
through the same protocol (train.Backend.shutdown)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import ddp
from .env import DistEnv, discover
from .layout import Layout
from .options import Value

if TYPE_CHECKING:
    import torch

    from .train import Backend

PROG = "scalestudy.workload"


@dataclass(frozen=True)
class Session:
    """A joined job: its backend, ranks, device and process group's backend."""

    backend: Backend
    env: DistEnv
    device: torch.device
    dist_backend: str


Starter = Callable[[argparse.Namespace, Mapping[str, Value], Layout, Path], Session]
_STARTERS: dict[str, Starter] = {}


def starter(name: str) -> Callable[[Starter], Starter]:
    """Register a backend's starter under `name` (once)."""
    def add(fn: Starter) -> Starter:
        if name in _STARTERS:
            raise ValueError(f"backend {name!r} is registered twice")
        _STARTERS[name] = fn
        return fn
    return add


def start(args: argparse.Namespace, options: Mapping[str, Value], layout: Layout,
          run_dir: Path) -> Session:
    """Join the job's ranks with the chosen backend (FSDP2, or tp/pp with DDP, go through
    the parallel one). WorkloadError/ValueError for settings this machine cannot run."""
    name = "parallel" if args.backend == "fsdp" or layout.model_parallel > 1 else args.backend
    return _STARTERS[name](args, options, layout, run_dir)


def _joined(args: argparse.Namespace) -> tuple[DistEnv, torch.device, str]:
    """The ranks from the launcher's variables, the device, the process group's backend."""
    env = discover(os.environ)
    device = ddp.select_device(env, args.device)
    dist_backend = ddp.resolve_dist_backend(args.dist_backend, device)
    ddp.check_precision(args.precision, device)
    return env, device, dist_backend


@starter("ddp")
def _ddp(args: argparse.Namespace, options: Mapping[str, Value], layout: Layout,
         run_dir: Path) -> Session:
    env, device, dist_backend = _joined(args)
    ddp.check_comm_hook(args.comm_hook, device)
    ddp.init_process_group(env, dist_backend, ddp.dist_timeout(os.environ), device)
    return Session(ddp.DDPBackend(options), env, device, dist_backend)


@starter("parallel")
def _parallel(args: argparse.Namespace, options: Mapping[str, Value], layout: Layout,
              run_dir: Path) -> Session:
    from .parallel import ParallelBackend

    env, device, dist_backend = _joined(args)
    ddp.init_process_group(env, dist_backend, ddp.dist_timeout(os.environ), device)
    backend = ParallelBackend(args.backend, options, layout, env.rank)
    if backend.ignored() and env.rank == 0:
        print(f"{PROG}: note: {backend.ignored()}", file=sys.stderr)
    return Session(backend, env, device, dist_backend)


@starter("deepspeed")
def _deepspeed(args: argparse.Namespace, options: Mapping[str, Value], layout: Layout,
               run_dir: Path) -> Session:
    from . import deepspeed_backend as ds

    env, device, dist_backend = _joined(args)
    deepspeed = ds.load()
    ds.export_rank_environment(env, os.environ)
    if env.local_rank == 0:
        for lock in ds.clear_stale_build_locks(os.environ):
            print(f"{PROG}: removed a stale build lock left by a killed DeepSpeed start: "
                  f"{lock}", file=sys.stderr)
    ddp.init_process_group(env, dist_backend, ddp.dist_timeout(os.environ), device)
    return Session(ds.DeepSpeedBackend(deepspeed, options, run_dir, env.world_size,
                                       env.rank == 0), env, device, dist_backend)


@starter("horovod")
def _horovod(args: argparse.Namespace, options: Mapping[str, Value], layout: Layout,
             run_dir: Path) -> Session:
    from . import horovod_backend as hvd_backend

    hvd = hvd_backend.load()
    hvd_backend.prepare_environment(os.environ, run_dir)
    hvd.init()
    env = hvd_backend.dist_env(hvd)
    device = ddp.select_device(env, args.device)
    ddp.check_precision(args.precision, device)
    if device.type == "cuda":
        import torch

        torch.cuda.set_device(device)
    return Session(hvd_backend.HorovodBackend(hvd, options), env, device,
                   "mpi" if hvd.mpi_enabled() else "gloo")
