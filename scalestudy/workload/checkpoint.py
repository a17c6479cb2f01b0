"""Checkpoints of the bundled benchmark: saved every N steps or S seconds with
torch.distributed.checkpoint (DCP; sharded under FSDP2, async where asked), found and
loaded when the benchmark starts again, so a run continues where its last checkpoint was.

One checkpoint is a directory `<dir>/step-NNNNNNNNN/`: the DCP files of the model and the
optimizer (`get_state_dict`, which reads DDP and FSDP2 alike), each rank's RNG states
(`rng-rankR.pt`), and `complete.json`, which rank 0 writes atomically (tmp + rename) once
the DCP save has completed on every rank: the scheduler's state, the step, the data
position and, for a measured target, the Outcome so far. Only a directory with that file
counts; an older one is deleted only after a newer one is complete, so the last good
checkpoint is never lost. The pure parts (`due`, `latest`, `stale`, `progress`) need no
torch.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn

    from .totarget import Outcome

#: The file that makes a checkpoint directory count, and its format.
MARKER = "complete.json"
FORMAT = "scalestudy.checkpoint/1"
_STEP_DIR = re.compile(r"^step-(\d{9})$")


@dataclass(frozen=True)
class Settings:
    """Where and how often to save (`--checkpoint-*`)."""

    directory: Path
    every_steps: int | None = None
    every_seconds: float | None = None
    asynchronous: bool = False


@dataclass
class Stats:
    """One rank's checkpoint measurements in this attempt."""

    blocked_s: list[float] = field(default_factory=list)  # per save: the loop waited
    complete_s: list[float] = field(default_factory=list)  # per save: files complete (rank 0)
    load_s: float | None = None
    resumed_from_step: int | None = None
    steps: int = 0  # steps trained in this attempt
    nbytes: int = 0  # bytes of the last complete checkpoint (rank 0)


def step_dir(directory: Path, step: int) -> Path:
    """The directory of the checkpoint taken after `step` optimizer steps."""
    return directory / f"step-{step:09d}"


def latest(directory: Path) -> tuple[int, dict[str, Any]] | None:
    """(step, progress) of the newest complete checkpoint under `directory`, None when
    there is none (a directory without its marker is a save that did not finish)."""
    best: tuple[int, dict[str, Any]] | None = None
    if not directory.is_dir():
        return None
    for child in directory.iterdir():
        match = _STEP_DIR.match(child.name)
        if match is None or not (child / MARKER).is_file():
            continue
        step = int(match.group(1))
        if best is None or step > best[0]:
            try:
                best = (step, json.loads((child / MARKER).read_text()))
            except (OSError, ValueError):
                continue  # unreadable: not complete
    return best


def stale(directory: Path, keep: int) -> list[Path]:
    """The step directories to delete once checkpoint `keep` is complete: every other
    one (older complete ones, and unfinished saves of a killed attempt)."""
    if not directory.is_dir():
        return []
    return sorted(c for c in directory.iterdir()
                  if _STEP_DIR.match(c.name) and c.name != step_dir(directory, keep).name)


def due(step: int, every_steps: int | None) -> bool:
    """Whether a save is due after `step` optimizer steps, every `every_steps`."""
    return every_steps is not None and step > 0 and step % every_steps == 0


def seconds_to_steps(steps_taken: int) -> int:
    """With every_seconds: the step interval the first save sets (the steps it took to
    reach S seconds), so that every rank agrees without talking again."""
    return max(1, steps_taken)


def write_marker(path: Path, progress: dict[str, Any]) -> None:
    """Write the complete marker atomically: a reader sees all of it or none."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as fh:
        json.dump(progress, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def progress(step: int, scheduler: dict[str, Any], outcome: Outcome | None,
             world_size: int) -> dict[str, Any]:
    """What the marker holds besides the DCP files: the step (also each rank's data
    position: one batch per step), the scheduler's state, the target's Outcome so far."""
    return {"format": FORMAT, "step": step, "world_size": world_size,
            "scheduler": scheduler, "saved_at": time.time(),
            "outcome": None if outcome is None else asdict(outcome)}


def outcome_of(saved: dict[str, Any]) -> Outcome | None:
    """The target's Outcome a checkpoint holds (None: a run without a target)."""
    from .totarget import Outcome

    data = saved.get("outcome")
    if not data:
        return None
    data = {**data, "curve": [tuple(c) for c in data.get("curve", [])]}
    return Outcome(**data)


def dir_bytes(path: Path) -> int:
    """Bytes of the files under `path`."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def agreed_latest(settings: Settings | None, gather: Callable[[int], list[int]]
                  ) -> tuple[int, dict[str, Any]] | None:
    """The checkpoint every rank resumes from (None: none, or no checkpoints); a rank
    that sees another one (a path not shared by every node) is an error."""
    if settings is None:
        return None
    found = latest(settings.directory)
    steps = set(gather(found[0] if found else -1))
    if len(steps) > 1:
        raise ValueError(f"checkpoint {settings.directory}: the ranks see different "
                         f"checkpoints (steps {sorted(steps)}); give a path every node "
                         "shares")
    return found


def remaining(start_step: int, warmup_iters: int, iters: int, batches_per_iter: int
              ) -> tuple[int, int]:
    """The timed loop resumed after `start_step` steps: (warm-up, timed) iterations
    left; the iterations done count against the warm-up first, and at least one timed
    iteration is left (so a resumed run still measures its throughput)."""
    done = start_step // batches_per_iter
    return max(0, warmup_iters - done), max(1, iters - max(0, done - warmup_iters))


def for_backend(settings: Settings | None, backend: object, device: torch.device,
                sync: Callable[[], None], rank: int, last_step: int) -> Checkpointer | None:
    """The rank's Checkpointer of the wrapped (model, optimizer, scheduler) the backend
    trains (its `trained`; None without checkpoints); with async saves, a gloo group
    of their own for DCP's background save (every rank creates it). ValueError: a
    backend that cannot checkpoint."""
    import torch
    import torch.distributed as dist

    if settings is None:
        return None
    trained = getattr(backend, "trained", None)
    if trained is None:
        raise ValueError(f"checkpoints are not supported with the "
                         f"{getattr(backend, 'name', '?')} backend (or with tp or pp): use "
                         "ddp or fsdp")

    world = dist.get_world_size() if dist.is_initialized() else 1
    # Async saves talk in a background thread: on a group of their own (gloo, a CPU
    # backend, as DCP needs), never on the one the training's collectives use.
    group = dist.new_group(backend="gloo") if settings.asynchronous and \
        dist.is_initialized() else None

    def agree(flag: bool) -> bool:  # rank 0 decides, every rank follows
        if not dist.is_initialized():
            return flag
        vote = torch.tensor([1 if flag else 0], device=device)
        dist.broadcast(vote, 0)
        return bool(vote.item())

    model, optimizer, scheduler = trained
    return Checkpointer(settings, model, optimizer, scheduler, rank, world, agree, group,
                        sync, last_step)


class Checkpointer:
    """Saves and loads one rank's training state (model, optimizer, scheduler, RNG,
    progress) in DCP checkpoints under settings.directory."""

    def __init__(self, settings: Settings, model: nn.Module, optimizer: torch.optim.Optimizer,
                 scheduler: Any, rank: int, world_size: int,
                 agree: Callable[[bool], bool], group: Any = None,
                 sync: Callable[[], None] = lambda: None, last_step: int = 0) -> None:
        self.settings, self.model, self.optimizer = settings, model, optimizer
        self.scheduler, self.rank, self.world_size = scheduler, rank, world_size
        self.agree, self.group = agree, group  # group: the async saves' CPU process group
        self.sync, self.last_step = sync, last_step  # no save after the run's last step
        self.stats = Stats()
        self.every_steps = settings.every_steps
        self._began = time.perf_counter()
        self._start_step = 0
        self._pending: Any = None  # (future, step, started) of an async save
        self._done_at: list[float] = []

    def resume(self, found: tuple[int, dict[str, Any]] | None) -> Outcome | None:
        """Load checkpoint `found` (latest()'s answer, the same on every rank) into the
        model, optimizer, scheduler and RNG; returns the target's Outcome it holds."""
        import torch
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        if found is None:
            self._remove_unfinished()
            return None
        step, saved = found
        began = time.perf_counter()
        path = step_dir(self.settings.directory, step)
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        state = {"model": model_sd, "optim": optim_sd}
        dcp.load(state, checkpoint_id=str(path), no_dist=not _distributed())
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
        self.scheduler.load_state_dict(dict(saved["scheduler"]))
        rng = path / f"rng-rank{self.rank}.pt"
        if rng.is_file():
            states = torch.load(rng, weights_only=False)
            torch.set_rng_state(states["cpu"])
            if states.get("cuda") is not None and torch.cuda.is_available():
                torch.cuda.set_rng_state(states["cuda"])
        self.stats.load_s = time.perf_counter() - began
        self.stats.resumed_from_step = step
        self.stats.nbytes = dir_bytes(path) if self.rank == 0 else 0
        self._start_step = step
        self._remove_unfinished(keep=step)
        return outcome_of(saved)

    def _remove_unfinished(self, keep: int | None = None) -> None:
        """Rank 0: remove the directories of saves that never completed (a killed
        attempt's), never the one resumed from."""
        if self.rank != 0:
            return
        for path in stale(self.settings.directory, keep if keep is not None else -1):
            if not (path / MARKER).is_file():
                shutil.rmtree(path, ignore_errors=True)

    def after_step(self, step: int, outcome: Outcome | None = None) -> None:
        """At a step boundary (outside the timed steps): save when one is due."""
        self.stats.steps = step - self._start_step
        self._poll()
        if self.last_step and step >= self.last_step:
            return
        if self.every_steps is None:  # every_seconds, until the first save sets a count
            elapsed = time.perf_counter() - self._began
            assert self.settings.every_seconds is not None
            if not self.agree(elapsed >= self.settings.every_seconds):
                return
            self.every_steps = seconds_to_steps(step - self._start_step)
        elif not due(step, self.every_steps):
            return
        self.save(step, outcome)

    def save(self, step: int, outcome: Outcome | None) -> None:
        """Save the state after `step` steps; the time the loop waits is recorded."""
        import torch
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        self.sync()  # the step's device work is the step's, not the save's
        began = time.perf_counter()
        self.wait()
        path = step_dir(self.settings.directory, step)
        path.mkdir(parents=True, exist_ok=True)
        torch.save({"cpu": torch.get_rng_state(),
                    "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() else None},
                   path / f"rng-rank{self.rank}.pt")
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        state = {"model": model_sd, "optim": optim_sd}
        meta = progress(step, self.scheduler.state_dict(), outcome, self.world_size)
        if self.settings.asynchronous:
            future = dcp.async_save(state, checkpoint_id=str(path), process_group=self.group)
            self._pending = (future, step, began, meta)
            future.add_done_callback(lambda _f: self._done_at.append(time.perf_counter()))
        else:
            dcp.save(state, checkpoint_id=str(path), no_dist=not _distributed())
            self._complete(step, began, meta)
        self.stats.blocked_s.append(time.perf_counter() - began)

    def blocked(self) -> float:
        """Seconds the loop has waited for saves so far (what the timers leave out)."""
        return math.fsum(self.stats.blocked_s)

    def _poll(self) -> None:
        """An async save that has finished: its marker written (rank 0)."""
        if self._pending is not None and self._pending[0].done():
            self.wait()

    def wait(self) -> None:
        """Wait for the async save in flight, then mark it complete (before the next
        save and at the end of the run)."""
        if self._pending is None:
            return
        future, step, began, meta = self._pending
        self._pending = None
        future.result()
        self._complete(step, began, meta, self._done_at.pop() if self._done_at else None)

    def _complete(self, step: int, began: float, meta: dict[str, Any],
                  done_at: float | None = None) -> None:
        """Rank 0: the marker, then the older checkpoints removed."""
        self.stats.complete_s.append((done_at or time.perf_counter()) - began)
        if self.rank != 0:
            return
        path = step_dir(self.settings.directory, step)
        write_marker(path / MARKER, meta)
        for old in stale(self.settings.directory, step):
            if old.name < path.name:
                shutil.rmtree(old, ignore_errors=True)
        self.stats.nbytes = dir_bytes(path)


def _distributed() -> bool:
    """Whether a process group is joined (else DCP saves and loads in one process)."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def fields(settings: Settings | None, ranks: list[Stats | None], step_s: float
           ) -> dict[str, object]:
    """The record's checkpoint keys ({} without checkpoints): `step_s` the mean seconds
    of a step (the share's denominator: the steps of this attempt at that time)."""
    if settings is None or not ranks or ranks[0] is None:
        return {}
    stats = [s for s in ranks if s is not None]
    lead = stats[0]
    saves = len(lead.blocked_s)

    def mean(xs: list[float]) -> float:
        return math.fsum(xs) / len(xs) if xs else 0.0

    blocked = max(mean(s.blocked_s) for s in stats)
    total_blocked = max(math.fsum(s.blocked_s) for s in stats)
    trained = step_s * max(s.steps for s in stats)
    loads = [s.load_s for s in stats if s.load_s is not None]
    return {
        "checkpoint_every_steps": settings.every_steps,
        "checkpoint_every_s": settings.every_seconds,
        "checkpoint_async": settings.asynchronous,
        "checkpoint_path": str(settings.directory),
        "checkpoints": saves,
        "checkpoint_save_s": round(blocked, 6),
        "checkpoint_complete_s": round(max(mean(s.complete_s) for s in stats)
                                       if settings.asynchronous else blocked, 6),
        "checkpoint_load_s": round(max(loads), 6) if loads else None,
        "checkpoint_bytes": lead.nbytes,
        "checkpoint_share": round(total_blocked / trained, 6) if trained > 0 else 0.0,
        "resumed_from_step": lead.resumed_from_step,
    }


def line(record: dict[str, object]) -> str | None:
    """The resume line of the benchmark's output (None: not resumed)."""
    if record.get("resumed_from_step") is None:
        return None
    return (f"Resumed from step {record['resumed_from_step']} (checkpoint "
            f"{record['checkpoint_path']}, loaded in {record['checkpoint_load_s']:.3f} s)")


def checkpoint_arguments(group: Any, count: Callable[[str], int],
                         number: Callable[[str], object]) -> None:
    """The benchmark's `--checkpoint-*` flags (`count`, `number`: its argument types)."""
    group.add_argument("--checkpoint-dir", type=Path, default=None,
                       help="save checkpoints here (torch.distributed.checkpoint); a complete one "
                       "found here at start is resumed from")
    group.add_argument("--checkpoint-every-steps", type=count, default=None,
                       help="save every this many optimizer steps")
    group.add_argument("--checkpoint-every-seconds", type=number, default=None,
                       help="save every this many seconds (rank 0's clock; then every the "
                       "steps the first save took)")
    group.add_argument("--checkpoint-async", action="store_true",
                       help="save in the background (dcp.async_save); the loop waits only for "
                       "the copy to host memory")


def checkpoint_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the checkpoint flags (None: nothing, or no checkpoints)."""
    every = [f for f in ("--checkpoint-every-steps", "--checkpoint-every-seconds")
             if getattr(args, f[2:].replace("-", "_")) is not None]
    if args.checkpoint_dir is None:
        return f"{every[0]} needs --checkpoint-dir" if every else (
            "--checkpoint-async needs --checkpoint-dir" if args.checkpoint_async else None)
    if len(every) != 1:
        return ("--checkpoint-dir needs one of --checkpoint-every-steps, "
                "--checkpoint-every-seconds" if not every else f"give {' or '.join(every)}, "
                "not both")
    if args.backend not in ("ddp", "fsdp") or args.probe_batch:
        return (f"checkpoints are saved with the ddp and fsdp backends, not "
                f"{'--probe-batch' if args.probe_batch else args.backend}")
    return None


def checkpoint_settings(args: argparse.Namespace) -> Settings | None:
    """The checkpoint settings of the command line (None: no checkpoints)."""
    if args.checkpoint_dir is None:
        return None
    return Settings(args.checkpoint_dir.absolute(), args.checkpoint_every_steps,
                    args.checkpoint_every_seconds, args.checkpoint_async)
