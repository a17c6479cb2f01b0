"""Checkpoints of the bundled benchmark, their pure side: the layout on disk, which
checkpoint counts, when saves fall due, the command-line flags and the record's keys
(checkpointer.py saves and loads with torch.distributed.checkpoint, DCP).

One checkpoint is a directory `<dir>/step-NNNNNNNNN/`: the DCP files of the model and the
optimizer (`get_state_dict`, which reads DDP and FSDP2 alike), each rank's RNG states
(`rng-rankR.pt`), and `complete.json`, which rank 0 writes atomically (tmp + rename) once
the DCP save has completed on every rank: the scheduler's state, the step, the data
position and, for a measured target, the Outcome so far. Only a directory with that file
counts; an older one is deleted only after a newer one is complete, so the last good
checkpoint is never lost. Nothing here imports torch.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:


    from .totarget import Outcome

#: The file that makes a checkpoint directory count, and its format.
MARKER = "complete.json"
#: Written when a run trained to its end: the next start (`run --rerun all`) starts over.
FINISHED = "finished.json"
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
    there is none (a directory without its marker is a save that did not finish) or the
    run that wrote them trained to its end."""
    best: tuple[int, dict[str, Any]] | None = None
    if not directory.is_dir() or (directory / FINISHED).exists():
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


def checkpoint_settings(args: argparse.Namespace) -> Settings | None:
    """The checkpoint settings of the command line (None: no checkpoints)."""
    if args.checkpoint_dir is None:
        return None
    return Settings(args.checkpoint_dir.absolute(), args.checkpoint_every_steps,
                    args.checkpoint_every_seconds, args.checkpoint_async)
