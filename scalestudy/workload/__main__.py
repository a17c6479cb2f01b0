"""``python -m scalestudy.workload``: synthetic-data training benchmark, Horovod-style output.

CNNs on random images (img/s) or decoder-only transformers on random tokens (tokens/s,
model TFLOP/s, MFU; tensor and pipeline parallel with --tp/--pp, FSDP2 with
--backend fsdp). torch is imported only after the arguments and the parallel layout are
checked, so ``--help`` and bad arguments answer at once. Exit status: 0 done, 2 bad
arguments or a setting this machine cannot run.
"""

from __future__ import annotations

import time

_STARTED = time.perf_counter()
_STARTED_AT = time.time()  # the wall clock at this module's start (/proc says earlier)

import argparse  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING, NoReturn  # noqa: E402

from scalestudy.workload.checkpoint import checkpoint_arguments, checkpoint_settings  # noqa: E402
from scalestudy.workload.checks import flag_problem  # noqa: E402
from scalestudy.workload.names import MODEL_NAMES, is_transformer  # noqa: E402
from scalestudy.workload.options import BACKENDS, OPTIONS, TIMING, Option  # noqa: E402
from scalestudy.workload.record import SCHEMA, append_record  # noqa: E402, F401

if TYPE_CHECKING:
    from scalestudy.workload.layout import Layout
    from scalestudy.workload.session import Session
    from scalestudy.workload.train import TrainConfig, TrainResult

PROG = "scalestudy.workload"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line on stderr, exit status 2 (argparse would also print the usage)."""
        self.exit(2, f"{self.prog}: error: {message}\n")


def _count(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def _number(minimum: float, kind: type[float] = float, keyword: str | None = None
            ) -> Callable[[str], float | str]:
    def parse(text: str) -> float | str:
        if keyword is not None and text == keyword:
            return text
        try:
            value = kind(text)
        except ValueError:
            alternative = f" or {keyword!r}" if keyword else ""
            raise argparse.ArgumentTypeError(f"{text!r} is not a number{alternative}") from None
        if not value >= minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum:g}, got {text}")
        return value

    return parse


def _add_option(p: argparse.ArgumentParser, option: Option) -> None:
    """One training option from the shared table as a command-line flag."""
    helptext = f"{option.help} (default: {option.default}; backends: "
    helptext += ", ".join(option.backends) + ")"
    if option.kind is bool:
        p.add_argument(option.flag, action=argparse.BooleanOptionalAction,
                       default=option.default, help=helptext)
    elif option.kind is str and option.choices is None:
        p.add_argument(option.flag, default=option.default, help=helptext)
    elif option.choices is not None:
        p.add_argument(option.flag, choices=option.choices, default=option.default,
                       help=helptext)
    else:
        p.add_argument(option.flag, type=_number(option.minimum or 0, option.kind,
                                                 option.keyword),
                       default=option.default, help=helptext)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse and check the command line (exit 2 with one line on stderr when wrong)."""
    p = _Parser(prog=PROG, description="Synthetic-data training benchmark (DDP, FSDP2, "
                "Horovod, DeepSpeed; tensor and pipeline parallel for transformers); prints "
                "img/sec or tokens/sec over all ranks.")
    p.add_argument("--model", default="resnet50", help=f"one of {', '.join(MODEL_NAMES)}")
    p.add_argument("--image-size", type=_count(1), default=224, help="height = width (pixels)")
    p.add_argument("--num-classes", type=_count(1), default=1000)
    p.add_argument("--batch-size", type=_count(1), default=32,
                   help="per data-parallel replica and optimizer step (per rank without "
                   "tp/pp); transformers: sequences")
    p.add_argument(
        "--warmup-iters", type=_count(0), default=TIMING["warmup_iters"],
        help="untimed iterations before timing"
    )
    p.add_argument("--iters", type=_count(1), default=TIMING["iters"], help="timed iterations")
    p.add_argument("--batches-per-iter", type=_count(1), default=TIMING["batches_per_iter"],
                   help="batches per iteration")
    p.add_argument("--backend", default="ddp", help=f"one of {', '.join(BACKENDS)}")
    p.add_argument("--dist-backend", choices=("auto", "gloo", "nccl", "xccl"), default="auto",
                   help="torch.distributed backend (ddp, fsdp, deepspeed); auto: nccl on "
                   "CUDA, xccl on Intel XPU, gloo on CPU")
    p.add_argument("--device", choices=("auto", "cuda", "xpu", "cpu"), default="auto",
                   help="auto: CUDA when present, else Intel XPU (torch.xpu), else CPU; "
                   "cuda or xpu: fail rather than fall back")
    p.add_argument("--base-lr", type=_number(1e-12), default=None,
                   help="learning rate the warm-up starts from (default: --lr)")
    p.add_argument("--lr-warmup-iters", type=_count(0), default=0,
                   help="optimizer steps of linear warm-up")
    for option in OPTIONS:
        _add_option(p, option)
    t = p.add_argument_group("measured target (train to a held-out metric; needs --data)")
    t.add_argument("--target-metric", choices=("val_loss", "val_accuracy"), default=None,
                   help="train until this held-out metric reaches --target-value")
    t.add_argument("--target-value", type=float, default=None,
                   help="val_loss <= value or val_accuracy >= value")
    t.add_argument("--eval-every", type=_count(1), default=None,
                   help="evaluate the held-out split every this many optimizer steps")
    t.add_argument("--max-steps", type=_count(1), default=None,
                   help="stop here when the value is not reached (exit 0, not reached)")
    checkpoint_arguments(p.add_argument_group(
        "checkpoints (ddp, fsdp; resumed from when present)"), _count(1), _number(0.001))
    g = p.add_argument_group("batch-size probe (one rank)")
    g.add_argument("--probe-batch", action="store_true",
                   help="find the largest per-GPU batch that fits and the throughput up to it")
    g.add_argument("--min-batch", type=_count(1), default=1, help="first batch tried")
    g.add_argument("--max-batch", type=_count(1), default=4096, help="last batch tried")
    g.add_argument("--memory-limit-gb", type=_number(0.001), default=None,
                   help="CPU: memory this process may add (GiB); an allocation beyond it is "
                   "'out of memory'")
    p.add_argument("--metrics", type=Path, help="rank 0 appends one JSON record to this file")
    p.add_argument("--seed", type=int, default=42)
    args = p.parse_args(argv)
    if args.model not in MODEL_NAMES:
        p.error(f"unknown model {args.model!r}; valid models: {', '.join(MODEL_NAMES)}")
    if args.backend not in BACKENDS:
        p.error(f"unknown --backend {args.backend!r}; valid: {', '.join(BACKENDS)}")
    if args.min_batch > args.max_batch:
        p.error(f"--min-batch {args.min_batch} is larger than --max-batch {args.max_batch}")
    problem = flag_problem(args)
    if problem:
        p.error(problem)
    return args


def _log(line: str) -> None:
    print(line, flush=True)


def _distinct(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _layout(args: argparse.Namespace, world_size: int) -> Layout:
    """The run's parallel layout (pure); ValueError says what to change."""
    from .layout import from_options

    if args.probe_batch and is_transformer(args.model):
        raise ValueError("--probe-batch probes the CNN models only")
    return from_options(vars(args), world_size)


_GENERAL = ("precision", "channels_last", "compile", "diagnostics", "mllog", "seq_len", "tp",
            "pp", "microbatches", "pp_schedule", "activation_checkpointing", "peak_tflops",
            "data", "data_workers", "data_prefetch", "data_stage", "data_seed", "lr", "optimizer",
            "weight_decay", "lr_rule", "lr_reference_batch", "lr_warmup", "lr_decay")


def _config(args: argparse.Namespace, layout: Layout | None = None) -> TrainConfig:
    from .options import applicable
    from .totarget import Goal
    from .train import TrainConfig

    options = applicable(vars(args), args.backend)
    goal = (Goal(args.target_metric, args.target_value, args.eval_every, args.max_steps)
            if args.target_metric else None)
    return TrainConfig(
        model=args.model, image_size=args.image_size, num_classes=args.num_classes,
        batch_size=args.batch_size, precision=args.precision, warmup_iters=args.warmup_iters,
        iters=args.iters, batches_per_iter=args.batches_per_iter, seed=args.seed,
        channels_last=args.channels_last, compile=args.compile, diagnostics=args.diagnostics,
        lr=args.lr, base_lr=args.base_lr, lr_warmup_iters=args.lr_warmup_iters,
        options={k: v for k, v in options.items() if k not in _GENERAL},
        seq_len=args.seq_len, activation_checkpointing=args.activation_checkpointing,
        data=args.data, data_workers=args.data_workers, data_prefetch=args.data_prefetch,
        data_stage=args.data_stage, data_seed=args.data_seed, optimizer=args.optimizer,
        weight_decay=args.weight_decay, lr_rule=args.lr_rule,
        lr_reference_batch=args.lr_reference_batch, lr_warmup=args.lr_warmup,
        lr_decay=args.lr_decay, lr_given=args.lr, target=goal, checkpoint=checkpoint_settings(args),
        **({"layout": layout} if layout is not None else {}),
    )


def probe_main(args: argparse.Namespace) -> int:
    """`--probe-batch`: the batch-size probe on one rank; returns the exit status."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from . import batchprobe, ddp, train
    from .env import discover

    try:
        env = discover(os.environ)
        if env.world_size != 1:
            raise train.WorkloadError(
                f"--probe-batch runs on one rank (one GPU); this job has {env.world_size}")
        device = ddp.select_device(env, args.device)
        ddp.check_precision(args.precision, device)
    except (train.WorkloadError, ValueError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    if device.type == "cpu":
        ddp.set_cpu_threads(env, os.environ)
    cfg = replace(_config(args), batch_size=args.min_batch)
    try:
        dist_backend = ddp.resolve_dist_backend("auto", device)
    except train.WorkloadError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    ddp.init_process_group(env, dist_backend, ddp.dist_timeout(os.environ), device)
    model, _ = train.build(cfg, device)

    def wrap() -> torch.nn.Module:
        return DistributedDataParallel(
            model, device_ids=[device.index] if device.type != "cpu" else None)

    _log(f"Model: {cfg.model}, image size {cfg.image_size}, precision {cfg.precision}, "
         f"device {device.type}: batch sizes {args.min_batch}..{args.max_batch}")
    points, best = batchprobe.probe(wrap, cfg, device, args.min_batch, args.max_batch,
                                    log=_log, memory_limit_gb=args.memory_limit_gb)
    _log(f"Largest batch that fits: {best if best is not None else 'none'}")
    status = 0
    if args.metrics is not None:
        try:
            append_record(args.metrics, batchprobe.record(points, best, cfg, args.max_batch,
                                                          device))
        except OSError as exc:
            print(f"{PROG}: error: cannot write {args.metrics}: {exc}", file=sys.stderr)
            status = 1
    ddp.shutdown(device)
    return status if best is not None else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; returns the exit status. The steps: check the arguments and the
    layout (before torch loads), join the ranks, train and time, report on rank 0, leave."""
    args = parse_args(argv)
    layout = _checked_layout(args)
    if layout is None:
        return 2
    if args.lr_rule != "none" and args.lr_reference_batch < 1:
        print(f"{PROG}: error: --lr-rule {args.lr_rule} needs --lr-reference-batch (the "
              "global batch at which --lr holds)", file=sys.stderr)
        return 2
    if args.target_metric and layout.model_parallel > 1:
        print(f"{PROG}: error: a measured target evaluates data-parallel runs only "
              "(tp = pp = 1)", file=sys.stderr)
        return 2
    if args.probe_batch:
        return probe_main(args)
    from . import train
    from .session import start

    phases = {"imported": time.time()}
    cfg = _config(args, layout)
    try:
        session = start(args, cfg.options, layout, _run_dir(args))
        phases["joined"] = time.time()
        cfg = replace(cfg, layout=_layout(args, session.env.world_size))  # Horovod's, now
    except (train.WorkloadError, ValueError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    cfg = _settle(args, cfg, session)
    peak = _peak(args, cfg, session)
    _announce(cfg, session)
    backend, lead = session.backend, session.env.rank == 0
    from .data import DataError

    try:
        mine = train.run(backend, cfg, session.device, _on_iter(cfg, lead), session.env.rank)
    except (DataError, train.WorkloadError) as exc:  # the launcher ends the other ranks
        where = "error: data" if isinstance(exc, DataError) else f"{PROG}: error"
        print(f"{where}: {exc}", file=sys.stderr)
        return 2
    from .record import process_started

    mine.phases = {"started": process_started(_STARTED_AT), **phases}
    results = backend.gather(mine)
    if cfg.target is not None:  # the timed iterations the loop ran, not --iters
        cfg = replace(cfg, iters=min(len(r.iter_times) for r in results))
    rank_hosts = backend.gather(socket.gethostname())
    status = _report(args, cfg, session, results, rank_hosts, peak) if lead else 0
    backend.shutdown(session.device)
    return status


def _checked_layout(args: argparse.Namespace) -> Layout | None:
    """The parallel layout with the launcher's world size, checked before torch loads;
    None (said on stderr) when it cannot work."""
    from .env import discover

    try:
        world = 1 if args.backend == "horovod" else discover(os.environ).world_size
        return _layout(args, world)
    except ValueError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return None


def _run_dir(args: argparse.Namespace) -> Path:
    return args.metrics.parent if args.metrics is not None else Path.cwd()


def _settle(args: argparse.Namespace, cfg: TrainConfig, session: Session) -> TrainConfig:
    """What the joined job changes in the config: CPU threads, no diagnostics under
    tp/pp (they are for data parallelism), a --peak-tflops a CNN cannot use."""
    from . import ddp
    from .optimizers import scaled_lr

    lead = session.env.rank == 0
    if session.device.type == "cpu":
        ddp.set_cpu_threads(session.env, os.environ)
    if cfg.lr_rule != "none":  # the global batch is known now (Horovod's layout too)
        cfg = replace(cfg, lr=scaled_lr(args.lr, cfg.lr_rule, cfg.batch_size * cfg.layout.dp,
                                        cfg.lr_reference_batch))
    if cfg.layout.model_parallel > 1 and cfg.diagnostics:
        cfg = replace(cfg, diagnostics=False)
        if lead:
            _log("Diagnostics (compute-only timing, allreduce probe) are for data "
                 "parallelism only: skipped with tp or pp > 1")
    if lead and args.peak_tflops not in (0, "0") and not is_transformer(cfg.model):
        print(f"{PROG}: note: --peak-tflops ignored: MFU needs a transformer's FLOPs per "
              "token", file=sys.stderr)
    return cfg


def _peak(args: argparse.Namespace, cfg: TrainConfig, session: Session
          ) -> tuple[float | None, str | None]:
    """MFU's denominator (every rank takes part when it is measured)."""
    from . import mfu

    if not is_transformer(cfg.model):
        return None, None
    return mfu.resolve_peak(args.peak_tflops, cfg.precision, session.device,
                            session.backend.gather)


def _announce(cfg: TrainConfig, session: Session) -> None:
    """Rank 0's opening lines, as Horovod's synthetic benchmark prints them."""
    if session.env.rank != 0:
        return
    _log(f"Model: {cfg.model}")
    _log(f"Batch size: {cfg.batch_size}")
    _log(f"Number of GPUs: {session.env.world_size}")
    _log(f"Backend: {session.backend.name}, device: {session.device.type}, dist backend: "
         f"{session.dist_backend}, precision: {cfg.precision}")
    if is_transformer(cfg.model):
        _log(f"Sequence length: {cfg.seq_len}; dp {cfg.layout.dp} x tp {cfg.layout.tp} "
             f"x pp {cfg.layout.pp}, micro-batches {cfg.layout.microbatches}"
             + (f" ({cfg.layout.pp_schedule})" if cfg.layout.pp > 1 else ""))
    _log("Running warmup...")


def _on_iter(cfg: TrainConfig, lead: bool) -> Callable[[int, float], None]:
    def on_iter(i: int, seconds: float) -> None:
        if i == 0 and lead:
            _log("Running benchmark...")
        if lead:
            _log(f"Iter #{i}: {cfg.units_per_iter / seconds:.1f} {cfg.unit}/sec per GPU")
    return on_iter


def _report(args: argparse.Namespace, cfg: TrainConfig, session: Session,
            results: list[TrainResult], rank_hosts: list[str],
            peak: tuple[float | None, str | None]) -> int:
    """Rank 0: the statistics, the lines other harnesses read, the record; 1 when the
    record cannot be written."""
    from . import output
    from .record import build
    from .timing import aggregate

    stats = aggregate([r.iter_times for r in results], cfg.units_per_step,
                      cfg.batches_per_iter)
    total = stats["throughput"]
    for line in output.horovod_lines(total, stats["throughput_ci"], session.env.world_size,
                                     cfg.unit):
        _log(line)
    if not is_transformer(cfg.model):
        _log(output.tf_cnn_line(total))
    record = build(cfg, session, stats, results, _distinct(rank_hosts), peak,
                   time.perf_counter() - _STARTED, os.environ, rank_hosts)
    from .checkpoint import line as resume_line
    from .data.stats import line as input_line
    from .totarget import line as target_line

    lines: list[str | None] = [*output.diagnostics_lines(record), *output.lm_lines(record),
                               output.energy_line(record), input_line(record),
                               target_line(dict(record)), resume_line(dict(record))]
    for text in lines:
        if text is not None:
            _log(text)
    if args.mllog:
        for line in output.mllog_summary(record):
            _log(line)
    if args.metrics is None:
        return 0
    try:
        append_record(args.metrics, record)
    except OSError as exc:  # still shut down with the others, then fail
        print(f"{PROG}: error: cannot write {args.metrics}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    code = main()
    # Everything is written and the process group destroyed. gloo's threads can still
    # abort the interpreter's own teardown ("terminate called without an active
    # exception", SIGABRT: about 1 two-rank run in 7 without the barrier of
    # ddp.shutdown, and still seen with it, in CI, after a run had printed and recorded
    # all its results): leave without that teardown, the streams flushed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
