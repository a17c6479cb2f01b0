"""How a transformer run splits its ranks: world = dp x tp x pp, checked before torch loads.

Pure (no torch), so a layout that cannot work is an exit-2 line at once. `plan` derives
dp = world / (tp x pp) and checks that the model, the batch and the backend allow the
split; `bubble_fraction` is the idle share of a synchronous pipeline schedule.

Rank order is torchtitan's: the mesh is ("pp", "dp", "tp") with tp innermost, so the
ranks of one tensor-parallel group are neighbours (on one node when tp <= GPUs/node):
rank = pp_index * dp * tp + dp_index * tp + tp_index.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .names import TRANSFORMER_SHAPES
from .options import MODEL_PARALLEL


@dataclass(frozen=True)
class Layout:
    """The parallel layout of one run."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    microbatches: int = 1  # per optimizer step; 1 without pipelining
    pp_schedule: str = "1f1b"

    @property
    def world_size(self) -> int:
        """dp x tp x pp."""
        return self.dp * self.tp * self.pp

    @property
    def model_parallel(self) -> int:
        """Ranks that share one data-parallel replica's samples: tp x pp."""
        return self.tp * self.pp

    def mesh_dims(self) -> list[tuple[str, int]]:
        """The DeviceMesh dimensions (name, size) that are > 1, outermost first; a
        run without any split gets a 1-D "dp" mesh."""
        dims = [(n, s) for n, s in (("pp", self.pp), ("dp", self.dp), ("tp", self.tp)) if s > 1]
        return dims or [("dp", self.dp)]

    def coordinates(self, rank: int) -> dict[str, int]:
        """This rank's index along pp, dp and tp."""
        return {"pp": rank // (self.dp * self.tp), "dp": rank // self.tp % self.dp,
                "tp": rank % self.tp}

    def describe(self) -> dict[str, object]:
        """The record's layout keys."""
        return {"dp": self.dp, "tp": self.tp, "pp": self.pp,
                "microbatches": self.microbatches,
                "pp_schedule": self.pp_schedule if self.pp > 1 else None,
                "bubble_fraction": bubble_fraction(self.pp, self.microbatches)}


def bubble_fraction(pp: int, microbatches: int) -> float:
    """Idle share of GPipe and 1F1B: (p - 1) / (m + p - 1); 0 without pipelining."""
    if pp <= 1:
        return 0.0
    return (pp - 1) / (microbatches + pp - 1)


def _divides(what: str, n: int, flag: str, degree: int) -> None:
    if n % degree:
        raise ValueError(f"{flag} {degree} does not divide {what} ({n})")


def plan(*, model: str, backend: str, world_size: int, batch_size: int, tp: int = 1,
         pp: int = 1, microbatches: int = 0, pp_schedule: str = "1f1b",
         precision: str = "fp32", activation_checkpointing: bool = False,
         compile: bool = False, channels_last: bool = False) -> Layout:
    """The layout of a run, or ValueError with one line that says what to change.

    `microbatches` 0 means one per pipeline stage (pp); without pipelining it must be
    0 or 1 (gradient accumulation is not part of this workload).
    """
    if precision == "fp16" and (tp > 1 or pp > 1 or backend == "fsdp"):
        raise ValueError("--precision fp16 (GradScaler) runs with data-parallel ddp, "
                         "deepspeed or horovod only; use bf16")
    if compile and (tp > 1 or pp > 1):
        raise ValueError("--compile runs data parallel only (ddp, fsdp, deepspeed or "
                         "horovod without --tp or --pp)")
    if model not in TRANSFORMER_SHAPES:
        if tp > 1 or pp > 1 or microbatches > 1 or activation_checkpointing:
            raise ValueError("--tp, --pp, --microbatches and --activation-checkpointing "
                             f"apply to the transformer models ({', '.join(TRANSFORMER_SHAPES)}); "
                             f"{model} runs data parallel")
        return Layout(dp=world_size)
    if channels_last:
        raise ValueError("--channels-last is an image memory format; transformer models "
                         "have no images")
    if (tp > 1 or pp > 1) and backend not in MODEL_PARALLEL:
        raise ValueError(f"--tp/--pp need --backend ddp or fsdp; {backend} runs data "
                         "parallel only")
    if world_size % (tp * pp):
        raise ValueError(f"{world_size} rank(s) cannot be split into tp {tp} x pp {pp}: "
                         f"the world size must be a multiple of {tp * pp}")
    layers, _, heads, vocab = TRANSFORMER_SHAPES[model]
    _divides(f"{model}'s attention heads", heads, "--tp", tp)
    _divides(f"{model}'s vocabulary", vocab, "--tp", tp)
    _divides(f"{model}'s layers", layers, "--pp", pp)
    if pp == 1:
        if microbatches > 1:
            raise ValueError(f"--microbatches {microbatches} needs --pp > 1 (micro-batches "
                             "split the batch between pipeline stages)")
        microbatches = 1
    else:
        microbatches = microbatches or pp
        if batch_size % microbatches:
            raise ValueError(f"--batch-size {batch_size} is not divisible into "
                             f"--microbatches {microbatches}")
        if pp_schedule == "1f1b" and microbatches < pp:
            raise ValueError(f"--pp-schedule 1f1b needs --microbatches >= --pp ({pp}), got "
                             f"{microbatches}")
    return Layout(dp=world_size // (tp * pp), tp=tp, pp=pp, microbatches=microbatches,
                  pp_schedule=pp_schedule)


def from_options(values: Mapping[str, Any], world_size: int) -> Layout:
    """`plan` from the workload's parsed arguments (their option names)."""
    return plan(model=values["model"], backend=values["backend"], world_size=world_size,
                batch_size=values["batch_size"], tp=values["tp"], pp=values["pp"],
                microbatches=values["microbatches"], pp_schedule=values["pp_schedule"],
                precision=values["precision"],
                activation_checkpointing=values["activation_checkpointing"],
                compile=values["compile"], channels_last=values["channels_last"])
