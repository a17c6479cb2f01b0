"""The Horovod backend: hvd.init, DistributedOptimizer (compression, local gradient
accumulation, Adasum), parameters and optimizer state broadcast from rank 0.

Horovod is optional: `load` says how to get it when it is missing. Its knobs that are
environment variables (HOROVOD_FUSION_THRESHOLD, HOROVOD_CYCLE_TIME,
HOROVOD_HIERARCHICAL_ALLREDUCE, HOROVOD_AUTOTUNE, HOROVOD_TIMELINE) come from the
job's environment (a tuning variant's `env:`); `prepare_environment` keeps the files
they name in the run directory.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

from .env import DistEnv
from .options import Value
from .train import (
    Batch,
    T,
    TrainConfig,
    WorkloadError,
    autocast,
    make_optimizer,
    make_scheduler,
)

INSTALL_HINT = (
    "build it for this Python with `scripts/build-horovod` from the scalestudy source "
    "tree (Horovod 0.28.1 needs a C++17 patch to build against torch 2.13; see "
    "docs/benchmark.md, 'Optional backends'), or load the site's Horovod module in the job's setup"
)
_TRUE = {"1", "true", "yes", "on"}


def load() -> ModuleType:
    """`horovod.torch`, or a WorkloadError that says how to install it."""
    try:
        import horovod.torch as hvd
    except ImportError as exc:
        raise WorkloadError(
            f"--backend horovod needs Horovod, which this Python cannot import ({exc}); "
            + INSTALL_HINT
        ) from None
    return hvd


def prepare_environment(environ: MutableMapping[str, str], run_dir: Path) -> None:
    """Keep Horovod's timeline and autotune log in the run directory: a relative
    HOROVOD_TIMELINE / HOROVOD_AUTOTUNE_LOG is taken relative to it, and autotuning
    without a log gets `horovod-autotune.csv` there. Must run before hvd.init()."""
    timeline = environ.get("HOROVOD_TIMELINE", "")
    if timeline and not os.path.isabs(timeline):
        environ["HOROVOD_TIMELINE"] = str(run_dir / timeline)
    if environ.get("HOROVOD_AUTOTUNE", "").strip().lower() in _TRUE:
        log = environ.get("HOROVOD_AUTOTUNE_LOG", "") or "horovod-autotune.csv"
        environ["HOROVOD_AUTOTUNE_LOG"] = log if os.path.isabs(log) else str(run_dir / log)


def dist_env(hvd: ModuleType) -> DistEnv:
    """Where this process sits, as Horovod (MPI or gloo) sees it after hvd.init()."""
    return DistEnv(rank=hvd.rank(), world_size=hvd.size(), local_rank=hvd.local_rank(),
                   local_world_size=hvd.local_size(), node_rank=hvd.cross_rank(),
                   num_nodes=hvd.cross_size(), source="horovod")


class HorovodBackend:
    """Training through hvd.DistributedOptimizer."""

    name = "horovod"
    bare_compute = True  # its hooks sit on the parameters: time compute before wrapping

    def __init__(self, hvd: ModuleType, options: Mapping[str, Value]) -> None:
        self.hvd = hvd
        self.options = dict(options)
        self.wire = "fp16" if self.options.get("compression") == "fp16" else "none"

    def wrap(self, model: nn.Module, cfg: TrainConfig, device: torch.device,
             batch: Batch) -> Callable[[], torch.Tensor]:
        """The Horovod training step; one optimizer step per backward_passes_per_step;
        returns the loss. Transformer models run data parallel only."""
        hvd = self.hvd
        passes = int(self.options.get("backward_passes_per_step") or 1)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        optimizer = hvd.DistributedOptimizer(
            make_optimizer(model.parameters(), cfg),
            named_parameters=model.named_parameters(),
            compression=hvd.Compression.fp16 if self.wire == "fp16" else hvd.Compression.none,
            backward_passes_per_step=passes,
            op=hvd.Adasum if self.options.get("adasum") else hvd.Average,
        )
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        scheduler = make_scheduler(optimizer, cfg)
        scaler = torch.amp.GradScaler(device.type) if cfg.precision == "fp16" else None
        loss_fn = nn.CrossEntropyLoss()
        passes_done = 0

        def step() -> torch.Tensor:
            nonlocal passes_done
            with autocast(cfg, device):
                loss = loss_fn(model(batch.data), batch.target)
            (scaler.scale(loss) if scaler is not None else loss).backward()
            passes_done += 1
            if passes_done % passes:
                return loss.detach()  # gradients accumulate locally until the allreduce
            if scaler is None:
                optimizer.step()
            else:  # unscale the averaged gradients, then step without a second sync
                optimizer.synchronize()
                scaler.unscale_(optimizer)
                with optimizer.skip_synchronize():
                    scaler.step(optimizer)
                scaler.update()
            optimizer.zero_grad()  # Horovod's takes no set_to_none (torch's default: True)
            scheduler.step()
            return loss.detach()

        return step

    def compute_step(self) -> Callable[[], object]:
        """Not used: compute-only steps run on the bare model before `wrap`."""
        raise NotImplementedError("Horovod times compute-only steps before wrapping")

    def allreduce(self, size_bytes: int, device: torch.device) -> Callable[[], object]:
        """hvd.allreduce_ (sum, in place) of one fp32 buffer, through Horovod's own
        controller and fusion buffer, as the gradients go."""
        buf = torch.ones(max(1, size_bytes // 4), dtype=torch.float32, device=device)
        name = f"scalestudy.probe.{size_bytes}"
        return lambda: self.hvd.allreduce_(buf, op=self.hvd.Sum, name=name)

    def gather(self, obj: T) -> list[T]:
        """Every rank's `obj`, in rank order."""
        return list(self.hvd.allgather_object(obj))

    def describe(self) -> dict[str, object]:
        """Horovod's version, controller and the optimizer settings in effect."""
        import horovod

        hvd = self.hvd
        return {"horovod": {
            "version": horovod.__version__,
            "controller": "mpi" if hvd.mpi_enabled() else "gloo",
            "nccl_built": bool(hvd.nccl_built()),
            "compression": self.options.get("compression", "none"),
            "backward_passes_per_step": int(self.options.get("backward_passes_per_step") or 1),
            "adasum": bool(self.options.get("adasum", False)),
        }}

    def shutdown(self, device: torch.device | None = None) -> None:
        """Wait for every rank, then shut Horovod down (before interpreter exit)."""
        self.hvd.join()
        gc.collect()
        self.hvd.shutdown()
