"""The metrics record, one typed line of metrics.jsonl: built by the workload's rank 0
from every rank's measurements (`build`) or by scalestudy from a user program's output
(`command_record`), appended fsynced, and read back by the results side through
`parse`. torch-free and pydantic-free at import, so the compute nodes and the analysis
share one definition (docs/results-layout.md says what each key means)."""

from __future__ import annotations

import itertools
import json
import os
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, cast

if TYPE_CHECKING:
    from .session import Session
    from .timing import Stats
    from .train import TrainConfig, TrainResult

#: The record's format. Version 2: `throughput` is work over time (each rank's units
#: over its summed iteration seconds, summed over ranks); version 1 summed each rank's
#: mean rate (version 2 keeps that as `throughput_mean_of_rates`). Both read alike.
SCHEMA = "scalestudy.metrics/2"
#: Every format `parse` reads; a record without `schema` predates the key.
READS = ("scalestudy.metrics/1", SCHEMA)


class MetricsRecord(TypedDict, total=False):
    """One run's record. A `command` record carries the first seven keys only."""

    schema: str
    source: str  # "workload" or "command"
    throughput: float  # units/s over all ranks
    world_size: int
    batch_size: int  # per rank
    global_batch: int
    nodes: int
    throughput_ci: float
    throughput_mean_of_rates: float
    throughput_estimator: str
    throughput_per_rank_min: float
    throughput_per_rank_mean: float
    throughput_per_rank_max: float
    rank_seconds: list[float]
    units_per_rank: float
    iter_time_mean: float
    iter_time_std: float
    throughput_unit: str
    local_world_size: int
    model: str | None
    image_size: int | None
    precision: str | None
    channels_last: bool
    compile: bool
    backend: str
    dist_backend: str
    device: str
    warmup_iters: int
    iters: int
    batches_per_iter: int
    lr: float  # the learning rate used (after lr_rule scaled it)
    base_lr: float
    lr_warmup_iters: int
    optimizer: str  # sgd, adamw, lars, lamb (absent: sgd, records before it was chosen)
    weight_decay: float
    lr_given: float  # the learning rate before lr_rule scaled it
    lr_rule: str  # none, linear, sqrt
    lr_reference_batch: int
    warmup_steps: int  # learning-rate warm-up, optimizer steps
    lr_decay: str  # none, cosine, step
    #: a measured target (workload/totarget.py): absent without one
    target_metric: str
    target_value: float
    target_reached: bool
    steps_to_target: int | None
    samples_to_target: int | None  # steps_to_target x global_batch (sequences for an LM)
    time_to_target_s: float | None  # training seconds to the evaluation that reached it
    best_value: float | None
    eval_every: int
    max_steps: int
    steps_trained: int
    train_s: float  # training seconds of every step (evaluations excluded)
    eval_s: float  # seconds of the evaluations
    eval_curve: list[list[float]]  # [step, samples, value] per evaluation
    num_params: int
    grad_bytes: int
    diagnostics: bool
    step_time_s: float
    compute_time_s: float
    compute_throughput: float
    comm_overhead: float
    compute_iters: int
    allreduce_probe: dict[str, list[float]]
    allreduce_busbw_GBps: float
    allreduce_latency_s: float
    ddp: dict[str, object]
    horovod: dict[str, object]
    deepspeed: dict[str, object]
    fsdp: dict[str, object]
    dp: int
    tp: int
    pp: int
    microbatches: int
    pp_schedule: str | None
    bubble_fraction: float
    activation_checkpointing: bool
    seq_len: int
    samples_per_s: float
    tokens_per_s_per_gpu: float
    flops_per_token: float
    model_tflops_per_gpu: float
    peak_tflops: float
    peak_source: str
    mfu: float
    attention_flops_share: float
    final_loss: float | None
    params_per_rank_max: int | None
    energy_j: float
    energy_gpus: int
    energy_j_per_sample: float | None
    energy_source: str
    #: the fewest NVML counter updates inside one rank's window (under 2: a plain delta)
    energy_counter_updates: int
    energy_unavailable: str
    env: dict[str, str]
    hosts: list[str]
    #: each rank's host, in rank order (what finds a slow node from ordinary runs)
    rank_hosts: list[str]
    #: each rank's seconds per step without gradient sync (diagnostics), in rank order
    rank_compute_s: list[float]
    torch_version: str
    python_version: str
    provenance: dict[str, dict[str, object]]  # versions and hardware (workload.stack)
    elapsed_s: float
    #: seconds from the job script's launch line to the last rank's first step (the
    #: launcher, a container's start, Python and torch, joining the ranks, the model)
    startup_s: float
    #: startup_s split where the last rank passed each point (they add up to startup_s;
    #: the last absorbs rounding): launch line -> Python started, -> torch and the
    #: workload imported, -> process group joined, -> the first step (data, model, load)
    startup_launch_s: float
    startup_imports_s: float
    startup_rendezvous_s: float
    startup_data_s: float
    first_step_s: float  # the slowest rank's first step (not in startup_s)
    #: checkpoints (workload/checkpoint.py): absent without them
    checkpoint_every_steps: int | None
    checkpoint_every_s: float | None
    checkpoint_async: bool
    checkpoint_path: str
    checkpoints: int  # saves in this attempt
    checkpoint_save_s: float  # mean seconds the loop was blocked per save, slowest rank
    checkpoint_complete_s: float  # mean seconds until a save's files were complete
    checkpoint_load_s: float | None  # the load at resume (inside startup_data_s)
    checkpoint_bytes: int  # bytes of one checkpoint on disk
    checkpoint_share: float  # blocked save seconds / seconds of this attempt's steps
    resumed_from_step: int | None
    #: the input (workload.data): "tokens", "images" or "synthetic"; the rest only with data
    data_kind: str
    data_path: str
    data_workers: int
    data_stage: str
    input_wait_s: float  # mean seconds per timed step a rank waited for its batch
    input_wait_max_s: float  # the slowest rank's
    input_wait_fraction: float  # input_wait_s / step time
    decode_s: float  # mean seconds per step decoding, summed over a rank's loader workers
    bytes_read: int  # bytes of dataset files read in the timed loop, all ranks
    read_GBps: float  # bytes_read / timed seconds / nodes (1e9)
    stage_s: float  # the slowest rank's copy to node-local storage (0: none)
    stage_bytes: int  # bytes copied, all ranks
    samples_seen: int  # samples trained on, warm-up and timed, all replicas
    epoch: int  # epochs started
    #: the gradient noise scale B_simple in samples (workload.noise; null: see _unavailable)
    noise_scale: float | None
    noise_scale_low: float | None  # its interval at noise_scale_level (null: unbounded)
    noise_scale_high: float | None
    noise_scale_level: float
    noise_scale_steps: int  # the timed steps averaged
    noise_scale_unavailable: str  # why noise_scale is null
    noise_scale_b_small: float  # samples one rank's gradient is over
    noise_scale_b_big: float  # samples the all-reduced gradient is over
    grad_sq_small: float  # mean over steps of |G_small|² (mean over ranks of local norms²)
    grad_sq_big: float  # mean over steps of |G_big|² (the all-reduced gradient's norm²)
    noise_trace: float  # mean over steps of the unbiased tr Σ (S)
    noise_grad_sq: float  # mean over steps of the unbiased |G|²


def command_record(throughput: float, params: Mapping[str, int]) -> MetricsRecord:
    """A user program's record: the throughput its pattern found, and the run's size
    from its parameters (run.json)."""
    return MetricsRecord(schema=SCHEMA, source="command", throughput=throughput,
                         world_size=params["world_size"], batch_size=params["batch_size"],
                         global_batch=params["global_batch"], nodes=params["nodes"])


def parse(obj: object) -> MetricsRecord | None:
    """A decoded JSON line as a record (None when it is not a JSON object); which
    version it is, and whether its throughput counts, `problem` says."""
    return obj if isinstance(obj, dict) else None  # type: ignore[return-value]


def problem(record: Mapping[str, object]) -> str | None:
    """Why a record of a known shape cannot be read by this release (None when it can):
    a format newer than it reads."""
    schema = record.get("schema")
    if schema is None or schema in READS:
        return None
    return (f"metrics record of format {schema!r}, which this scalestudy does not read "
            f"(it reads {', '.join(READS)}): upgrade scalestudy")


def build(cfg: TrainConfig, session: Session, stats: Stats, results: Sequence[TrainResult],
          hosts: list[str], peak: tuple[float | None, str | None], elapsed_s: float,
          environ: Mapping[str, str], rank_hosts: Sequence[str] = ()) -> MetricsRecord:
    """The record of one run: the throughput statistics (timing.aggregate), what ran
    (model, batch, backend, layout), the diagnostics, MFU and energy where measured, the
    tuning environment and the software."""
    import torch

    from . import checkpoint, diagnostics, energy, mfu, output, stack
    from .names import is_transformer
    from .noise import unavailable

    env, backend = session.env, session.backend
    global_batch = cfg.batch_size * cfg.layout.dp
    described = backend.describe()
    return cast(MetricsRecord, {  # the keys of MetricsRecord, from the parts
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
        **_optimizer(cfg),
        **_target(cfg, results),
        **diagnostics.summarize(list(results), cfg, env.world_size),
        **({} if "noise_scale" in described else unavailable(
            ("not measured with tensor or pipeline parallelism" if
             cfg.layout.model_parallel > 1 else f"not measured with the {backend.name} "
             "backend") + " (a DDP comm hook measures it; docs/noise-scale.md)")),
        **described,
        **(mfu.transformer_fields(cfg, results, stats["throughput"], env.world_size, peak)
           if is_transformer(cfg.model) else {}),
        **energy.combine([r.energy for r in results],
                         global_batch * cfg.batches_per_iter * cfg.iters),
        "env": output.tuning_env(environ),
        "hosts": hosts,
        **({"rank_hosts": list(rank_hosts)} if rank_hosts else {}),
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "provenance": stack.describe(session.device, environ),
        "elapsed_s": round(elapsed_s, 3),
        **_startup(results, environ),
        **checkpoint.fields(cfg.checkpoint, [r.checkpoint for r in results],
                            stats["iter_time_mean"] / cfg.batches_per_iter),
        **_data(cfg, results, stats, max(len(hosts), env.num_nodes)),
    })


def _optimizer(cfg: TrainConfig) -> dict[str, object]:
    """What trained the model: the optimizer and the learning-rate rule and schedule."""
    return {"optimizer": cfg.optimizer, "weight_decay": cfg.weight_decay,
            "lr_given": cfg.lr_given if cfg.lr_given is not None else cfg.lr,
            "lr_rule": cfg.lr_rule, "lr_reference_batch": cfg.lr_reference_batch,
            "warmup_steps": cfg.warmup_steps, "lr_decay": cfg.lr_decay}


def _target(cfg: TrainConfig, results: Sequence[TrainResult]) -> dict[str, object]:
    """The measured target's keys (workload/totarget.py); {} without one."""
    from . import totarget

    outcome = results[0].target if results else None
    if cfg.target is None or outcome is None:
        return {}
    return totarget.fields(cfg.target, outcome, cfg.batch_size * cfg.layout.dp)


def _data(cfg: TrainConfig, results: Sequence[TrainResult], stats: Stats, nodes: int
          ) -> dict[str, object]:
    """The input's keys (workload.data.stats): measured with a dataset, else synthetic."""
    from .data.stats import fields

    step = stats["iter_time_mean"] / cfg.batches_per_iter
    timed = max(stats["rank_seconds"]) if stats["rank_seconds"] else 0.0
    return fields([r.data for r in results], step, timed, nodes, cfg.layout.model_parallel)


def append_record(path: Path, record: Mapping[str, object]) -> None:
    """Append one JSON line (a MetricsRecord, or the batch probe's record), flushed and
    fsynced; a torn last line is ended first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+b") as fh:
        if fh.tell() > 0:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                fh.write(b"\n")
        fh.write(json.dumps(record).encode() + b"\n")
        fh.flush()
        os.fsync(fh.fileno())


#: The job script's wall-clock time at its launch line (`date +%s.%N`).
LAUNCHED_AT = "SCALESTUDY_LAUNCHED_AT"


def _startup(results: Sequence[TrainResult], environ: Mapping[str, str]) -> dict[str, float]:
    """{startup_s}: launch line to the last rank's first step, and its split; {} where
    either is not known (a run started by hand, an older job script)."""
    starts = [r.first_step_at for r in results]
    try:
        launched = float(environ.get(LAUNCHED_AT, ""))
    except ValueError:
        return {}
    if not starts or any(s is None for s in starts):
        return {}
    last = max(s for s in starts if s is not None)
    out = {"startup_s": round(last - launched, 3)}
    firsts = [r.first_step_s for r in results if r.first_step_s is not None]
    if firsts:
        out["first_step_s"] = round(max(firsts), 3)
    points = [[r.phases.get(k) for r in results] for k in ("started", "imported", "joined")]
    if all(p is not None for ps in points for p in ps):
        out.update(split_startup(launched, [max(p for p in ps if p is not None)
                                            for ps in points], last))
    return out


#: The parts of startup_s, in order.
STARTUP_PARTS = ("startup_launch_s", "startup_imports_s", "startup_rendezvous_s",
                 "startup_data_s")


def split_startup(launched: float, passed: Sequence[float], first_step: float
                  ) -> dict[str, float]:
    """startup_s's parts from the times the last rank passed the process start, the
    imports and the rendezvous (`passed`) and began its first step: each part the time
    from one point to the next (a point before the previous one counts as 0), rounded to
    3 decimals, the last absorbing the rounding, so they add up to startup_s exactly."""
    total = round(first_step - launched, 3)
    points, clock = [], launched
    for t in passed:
        clock = min(max(clock, t), first_step)
        points.append(clock)
    edges = [launched, *points, first_step]
    parts = [round(b - a, 3) for a, b in itertools.pairwise(edges)]
    parts[-1] = round(total - sum(parts[:-1]), 3)
    return dict(zip(STARTUP_PARTS, parts, strict=True))


def process_started(fallback: float) -> float:
    """The wall-clock time this process started (Linux: /proc/self/stat's start time,
    which includes the interpreter's own start), else `fallback`."""
    try:
        stat = Path("/proc/self/stat").read_text()
        ticks = int(stat[stat.rindex(")") + 2:].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        import time

        started = time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return fallback
    return min(started, fallback)
