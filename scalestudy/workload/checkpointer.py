"""The torch side of checkpoints: a Checkpointer saves one rank's training state (model
and optimizer through torch.distributed.checkpoint's `get_state_dict`, the same call
under DDP and FSDP2, sharded under FSDP2; the scheduler, RNG states and the loop's
progress) every N steps or S seconds, sync or with `dcp.async_save`, and loads the
newest complete checkpoint when a run starts again. The layout on disk, the complete
marker and the record's keys are checkpoint.py's.
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from .checkpoint import (
    FINISHED,
    FORMAT,
    MARKER,
    Settings,
    Stats,
    dir_bytes,
    due,
    outcome_of,
    progress,
    seconds_to_steps,
    stale,
    step_dir,
    write_marker,
)

if TYPE_CHECKING:
    from concurrent.futures import Future

    import torch
    from torch import nn

    from .totarget import Outcome


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
                 sync: Callable[[], None] = lambda: None, last_step: int | None = None
                 ) -> None:
        self.settings, self.model, self.optimizer = settings, model, optimizer
        self.scheduler, self.rank, self.world_size = scheduler, rank, world_size
        self.agree, self.group = agree, group  # group: the async saves' CPU process group
        self.sync, self.last_step = sync, last_step  # no save from here on (the last iteration)
        self.stats = Stats()
        self.every_steps = settings.every_steps
        self._clock: tuple[float, int] | None = None  # every_seconds: (started, at step)
        self._offset = 0  # every_seconds: the first save's step
        self._start_step = 0
        self._pending: Any = None  # (future, step, started) of an async save
        self._done_at: list[float] = []

    def resume(self, found: tuple[int, dict[str, Any]] | None) -> Outcome | None:
        """Load checkpoint `found` (latest()'s answer, the same on every rank) into the
        model, optimizer, scheduler and RNG; returns the target's Outcome it holds."""
        import torch
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        if found is None:  # start over: nothing complete, or a finished run's
            self._remove_unfinished(finished=True)
            return None
        step, saved = found
        began = time.perf_counter()
        path = step_dir(self.settings.directory, step)
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        state: dict[str, Any] = {"model": model_sd, "optim": optim_sd}
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

    def _remove_unfinished(self, keep: int | None = None, finished: bool = False) -> None:
        """Rank 0: remove the directories of saves that never completed (a killed
        attempt's), never the one resumed from; `finished`: a finished run's too."""
        if self.rank != 0:
            return
        for path in stale(self.settings.directory, keep if keep is not None else -1):
            if finished or not (path / MARKER).is_file():
                shutil.rmtree(path, ignore_errors=True)
        (self.settings.directory / FINISHED).unlink(missing_ok=True)

    def finish(self) -> None:
        """The run trained to its end: the save in flight completed, and (rank 0) the
        directory marked, so that the next start trains from step 0."""
        self.wait()
        if self.rank == 0 and self.settings.directory.is_dir():
            write_marker(self.settings.directory / FINISHED, {"format": FORMAT,
                                                              "finished_at": time.time()})

    def after_step(self, step: int, outcome: Outcome | None = None) -> None:
        """At a step boundary (outside the timed steps): save when one is due."""
        self.stats.steps = step - self._start_step
        self._poll()
        if self.last_step is not None and step >= self.last_step:
            return
        if self.every_steps is None:  # every_seconds, until the first save sets a count
            if self._clock is None:  # counted from the end of the attempt's first step
                self._clock = (time.perf_counter(), step)
            elapsed = time.perf_counter() - self._clock[0]
            assert self.settings.every_seconds is not None
            if not self.agree(elapsed >= self.settings.every_seconds):
                return
            self.every_steps = seconds_to_steps(step - self._clock[1])
            self._offset = step  # then every that many steps from this save
        elif not due(step - self._offset, self.every_steps):
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
            future = cast("Future[Any]", dcp.async_save(state, checkpoint_id=str(path),
                                                        process_group=self.group))
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
