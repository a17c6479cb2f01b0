"""The DeepSpeed backend: deepspeed.initialize with a generated config, ZeRO stage 0-3,
micro-batch = the per-GPU batch, over the job's torch.distributed process group.

DeepSpeed is optional (`pip install 'scalestudy[deepspeed]'`). It runs its own mixed
precision: in bf16/fp16 the model's weights are cast and the images follow (token ids
stay integers). Transformer models run data parallel only (ZeRO shards over all ranks).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

from .ddp import allreduce_buffer, gather
from .ddp import shutdown as ddp_shutdown
from .env import DistEnv
from .options import Value
from .train import AMP_DTYPES, Batch, T, TrainConfig, WorkloadError, make_optimizer, make_scheduler

CONFIG_FILE = "deepspeed_config.json"
#: A torch-extensions build lock older than this is left over from a killed build:
#: DeepSpeed's first start compiles a comm op (~25 s), and a rank killed meanwhile leaves
#: a lock that makes every later start wait forever.
STALE_LOCK_S = 600.0


def clear_stale_build_locks(environ: Mapping[str, str], now: float | None = None) -> list[Path]:
    """Remove torch-extension build locks older than STALE_LOCK_S; returns them."""
    root = Path(environ.get("TORCH_EXTENSIONS_DIR")
                or Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                / "torch_extensions")
    now = time.time() if now is None else now
    removed = []
    for lock in root.glob("**/lock"):
        try:
            if now - lock.stat().st_mtime > STALE_LOCK_S:
                lock.unlink()
                removed.append(lock)
        except OSError:
            continue
    return removed


def load() -> ModuleType:
    """`deepspeed`, or a WorkloadError that says how to install it."""
    try:
        import deepspeed
    except ImportError as exc:
        raise WorkloadError(
            f"--backend deepspeed needs DeepSpeed, which this Python cannot import ({exc}); "
            "install it with `DS_BUILD_OPS=0 pip install 'scalestudy[deepspeed]'` (its ops "
            "compile on first use) or load the site's DeepSpeed module in the job's setup"
        ) from None
    return deepspeed


def export_rank_environment(env: DistEnv, environ: MutableMapping[str, str]) -> None:
    """DeepSpeed reads RANK, LOCAL_RANK, WORLD_SIZE... from the environment, which only
    torchrun and its own launcher set: under srun, mpiexec or mpirun, set them from
    where this process sits (values a launcher set are kept)."""
    values = {"RANK": env.rank, "LOCAL_RANK": env.local_rank, "WORLD_SIZE": env.world_size,
              "LOCAL_SIZE": env.local_world_size, "LOCAL_WORLD_SIZE": env.local_world_size,
              "MASTER_ADDR": env.master_addr, "MASTER_PORT": env.master_port}
    for name, value in values.items():
        environ.setdefault(name, str(value))


def config(cfg: TrainConfig, world_size: int, zero_stage: int) -> dict[str, object]:
    """The DeepSpeed config of a run (written next to its metrics for provenance)."""
    return {
        "train_micro_batch_size_per_gpu": cfg.batch_size,
        "gradient_accumulation_steps": 1,
        "train_batch_size": cfg.batch_size * world_size,
        "zero_optimization": {"stage": zero_stage},
        # ZeRO 1-2 refuse a plain torch optimizer unless told it is fine.
        "zero_allow_untested_optimizer": True,
        # DeepSpeed clips at a global norm of 1.0 unless told otherwise (0.19); the other
        # backends do not clip, so neither does this one (same steps, same work).
        "gradient_clipping": 0.0,
        "bf16": {"enabled": cfg.precision == "bf16"},
        "fp16": {"enabled": cfg.precision == "fp16"},
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }


class DeepSpeedBackend:
    """Training through a DeepSpeed engine."""

    name = "deepspeed"
    bare_compute = True  # ZeRO partitions the model: time compute before initialize
    wire = "none"

    def __init__(self, deepspeed: ModuleType, options: Mapping[str, Value],
                 run_dir: Path | None, world_size: int, lead: bool) -> None:
        self.deepspeed = deepspeed
        self.zero_stage = int(options.get("zero_stage") or 0)
        self.run_dir = run_dir
        self.world_size = world_size
        self.lead = lead
        self.config: dict[str, object] = {}

    def wrap(self, model: nn.Module, cfg: TrainConfig, device: torch.device,
             batch: Batch) -> Callable[[], torch.Tensor]:
        """engine(data) -> loss -> engine.backward -> engine.step; returns the loss."""
        self.config = config(cfg, self.world_size, self.zero_stage)
        if self.lead and self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            (self.run_dir / CONFIG_FILE).write_text(json.dumps(self.config, indent=2) + "\n")
        optimizer = make_optimizer(model.parameters(), cfg)
        engine, *_ = self.deepspeed.initialize(
            model=model, optimizer=optimizer, lr_scheduler=make_scheduler(optimizer, cfg),
            config=self.config, dist_init_required=False,
        )
        cast = cfg.precision in AMP_DTYPES and batch.data.is_floating_point()
        data = batch.data.to(AMP_DTYPES[cfg.precision]) if cast else batch.data
        loss_fn = nn.CrossEntropyLoss()

        def step() -> torch.Tensor:
            loss = loss_fn(engine(data).float(), batch.target)
            engine.backward(loss)
            engine.step()
            return loss.detach()

        return step

    def compute_step(self) -> Callable[[], object]:
        """Not used: compute-only steps run on the bare model before `wrap`."""
        raise NotImplementedError("DeepSpeed times compute-only steps before initialize")

    def allreduce(self, size_bytes: int, device: torch.device) -> Callable[[], object]:
        """dist.all_reduce of one fp32 buffer on the process group the engine uses."""
        return allreduce_buffer(size_bytes, device)

    def gather(self, obj: T) -> list[T]:
        """Every rank's `obj`, in rank order."""
        return gather(obj)

    def shutdown(self, device: torch.device) -> None:
        """Barrier, garbage collected, the process group destroyed (as DDP's)."""
        ddp_shutdown(device)

    def describe(self) -> dict[str, object]:
        """DeepSpeed's version and the config it ran with."""
        return {"deepspeed": {"version": self.deepspeed.__version__,
                              "zero_stage": self.zero_stage, "config": self.config}}
