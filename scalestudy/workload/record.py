"""The benchmark's metrics record: built once, by rank 0, from every rank's measurements,
and appended to metrics.jsonl (one JSON line, fsynced). torch-free at import: the
results side reads the same keys (docs/results-layout.md lists them)."""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: The record's format (its keys: docs/results-layout.md).
SCHEMA = "scalestudy.metrics/1"


def build(cfg: Any, session: Any, stats: Mapping[str, Any], results: Sequence[Any],
          hosts: list[str], peak: tuple[float | None, str | None], elapsed_s: float,
          environ: Mapping[str, str]) -> dict[str, Any]:
    """The record of one run: the throughput statistics (timing.aggregate), what ran
    (model, batch, backend, layout), the diagnostics, MFU and energy where measured, the
    tuning environment and the software."""
    import torch

    from . import energy, mfu, output, train
    from .names import is_transformer

    env, backend = session.env, session.backend
    global_batch = cfg.batch_size * cfg.layout.dp
    return {
        "schema": SCHEMA,
        "source": "workload",
        **stats,
        "throughput_unit": f"{cfg.unit}/s",
        "world_size": env.world_size,
        "local_world_size": env.local_world_size,
        "nodes": max(len(hosts), env.num_nodes),
        "batch_size": cfg.batch_size,
        "global_batch": global_batch,
        "model": cfg.model,
        "image_size": cfg.image_size,
        "precision": cfg.precision,
        "channels_last": cfg.channels_last,
        "compile": cfg.compile,
        "backend": backend.name,
        "dist_backend": session.dist_backend,
        "device": session.device.type,
        "warmup_iters": cfg.warmup_iters,
        "iters": cfg.iters,
        "batches_per_iter": cfg.batches_per_iter,
        "lr": cfg.lr,
        "base_lr": cfg.base_lr if cfg.base_lr is not None else cfg.lr,
        "lr_warmup_iters": cfg.lr_warmup_iters,
        **train.summarize(list(results), cfg, env.world_size),
        **backend.describe(),
        **(mfu.transformer_fields(cfg, results, stats["throughput"], env.world_size, peak)
           if is_transformer(cfg.model) else {}),
        **energy.combine([r.energy for r in results],
                         global_batch * cfg.batches_per_iter * cfg.iters),
        "env": output.tuning_env(environ),
        "hosts": hosts,
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "elapsed_s": round(elapsed_s, 3),
    }


def append_record(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line, flushed and fsynced; a torn last line is ended first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+b") as fh:
        if fh.tell() > 0:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                fh.write(b"\n")
        fh.write(json.dumps(record).encode() + b"\n")
        fh.flush()
        os.fsync(fh.fileno())
