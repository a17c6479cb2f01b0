"""What one training run is: for its cost, samples per epoch, epochs, and how the epochs
grow with the global batch (a critical batch size, or the user's own table); measured, a
held-out metric the bundled benchmark trains to (metric, value, eval_every, max_steps).

McCandlish et al. 2018, "An Empirical Model of Large-Batch Training" (arXiv:1812.06162):
the samples needed to reach a loss grow as E(B) = E_min (1 + B / B_crit), so with
`epochs` measured at the reference global batch B0,

    epochs(B) = epochs0 * (1 + B / B_crit) / (1 + B0 / B_crit).

Without `critical_batch` (and without a table) the epochs do not depend on the batch.

A measured target (`metric: val_loss | val_accuracy`, `value`) makes every run of the
bundled benchmark train until the held-out metric reaches the value, evaluated every
`eval_every` optimizer steps, or stop at `max_steps` ("not reached", not a failure);
docs/target.md says what the record then holds.
"""

from __future__ import annotations

import itertools
import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Steps = Annotated[int, Field(ge=1, strict=True)]
#: The held-out metrics a measured target may name; val_accuracy for classifiers only.
METRICS: tuple[str, ...] = ("val_loss", "val_accuracy")


class Target(BaseModel):
    """One training run to the target accuracy: what the cost section prices."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    samples_per_epoch: Positive | None = Field(
        None, description="images (or sequences) in one epoch, e.g. 1281167 for ImageNet-1k")
    epochs: Positive | None = Field(
        None, description="epochs to the target at `reference_batch` (with samples_per_epoch)")
    total_samples: Positive | None = Field(
        None, description="samples to the target at `reference_batch`, instead of "
        "samples_per_epoch x epochs")
    reference_batch: Positive | None = Field(
        None, description="global batch at which `epochs` (or total_samples) holds; "
        "default: the smallest global batch of the study")
    critical_batch: Positive | None = Field(
        None, description="B_crit of McCandlish et al. (2018): epochs(B) = epochs x "
        "(1 + B/B_crit) / (1 + B0/B_crit)")
    epochs_per_batch: dict[int, Positive] | None = Field(
        None, description="your own epochs to the target per global batch, e.g. "
        "{256: 90, 8192: 95, 32768: 120}; between entries log-linear, outside them none")
    metric: Literal["val_loss", "val_accuracy"] | None = Field(
        None, description="measured target: the held-out metric the bundled benchmark "
        "trains to (val_loss: mean cross-entropy, nats; val_accuracy: classifiers only)")
    value: Annotated[float, Field(allow_inf_nan=False)] | None = Field(
        None, description="measured target: reached when val_loss <= value or "
        "val_accuracy >= value")
    eval_every: Steps | None = Field(
        None, description="measured target: evaluate the held-out split every this many "
        "optimizer steps")
    max_steps: Steps | None = Field(
        None, description="measured target: stop here if the value is not reached (the "
        "run completes, its record says target_reached false)")

    @property
    def measured(self) -> bool:
        """Whether the runs train to a held-out metric (metric and value given)."""
        return self.metric is not None

    @property
    def priced(self) -> bool:
        """Whether the samples of one training run are given (what the cost prices)."""
        return self.total_samples is not None or self.samples_per_epoch is not None

    def workload_args(self) -> list[str]:
        """The bundled benchmark's arguments for a measured target ([] without one)."""
        if not self.measured:
            return []
        return ["--target-metric", str(self.metric), "--target-value", repr(self.value),
                "--eval-every", str(self.eval_every), "--max-steps", str(self.max_steps)]

    @model_validator(mode="after")
    def _measured(self) -> Target:
        given = [k for k in ("value", "eval_every", "max_steps") if getattr(self, k) is not None]
        if self.metric is None and given:
            raise ValueError(f"{', '.join(given)} belong(s) to a measured target: add "
                             "`metric: val_loss` (or val_accuracy)")
        if self.metric is None:
            return self
        missing = [k for k in ("value", "eval_every", "max_steps") if getattr(self, k) is None]
        if missing:
            raise ValueError(f"metric {self.metric} needs {', '.join(missing)}, e.g. "
                             f"`{{metric: {self.metric}, value: 2.5, eval_every: 20, "
                             "max_steps: 2000}`")
        if self.metric == "val_accuracy" and not 0 < float(self.value or 0) <= 1:
            raise ValueError(f"val_accuracy is a fraction: value {self.value} must be in "
                             "(0, 1]")
        if self.metric == "val_loss" and float(self.value or 0) <= 0:
            raise ValueError(f"val_loss is a cross-entropy: value {self.value} must be > 0")
        return self

    @model_validator(mode="after")
    def _one_way(self) -> Target:
        if not self.priced and self.measured:
            if self.critical_batch or self.epochs or self.epochs_per_batch \
                    or self.reference_batch:
                raise ValueError("critical_batch, epochs, epochs_per_batch and "
                                 "reference_batch need samples_per_epoch or total_samples")
            return self
        if self.total_samples is None and self.samples_per_epoch is None:
            raise ValueError("give samples_per_epoch (with epochs or epochs_per_batch) or "
                             "total_samples, or a measured target (metric, value, "
                             "eval_every, max_steps)")
        if self.total_samples is not None and (self.samples_per_epoch or self.epochs):
            raise ValueError("give total_samples or samples_per_epoch with epochs, not both")
        if self.samples_per_epoch is not None and self.epochs is None \
                and self.epochs_per_batch is None:
            raise ValueError("samples_per_epoch needs epochs (or epochs_per_batch)")
        if self.epochs_per_batch is not None and (self.critical_batch or self.epochs):
            raise ValueError("epochs_per_batch is the whole rule: leave out epochs and "
                             "critical_batch")
        if self.epochs_per_batch is not None and self.samples_per_epoch is None:
            raise ValueError("epochs_per_batch needs samples_per_epoch")
        if self.epochs_per_batch is not None and any(b <= 0 for b in self.epochs_per_batch):
            raise ValueError("epochs_per_batch: global batches are positive integers")
        return self

    def samples(self, global_batch: float, smallest_batch: float) -> float | None:
        """Samples one training run at `global_batch` needs (None: the table does not
        reach that batch, or the target is measured only)."""
        if not self.priced:
            return None
        if self.epochs_per_batch is not None:
            epochs = _table(self.epochs_per_batch, global_batch)
            return None if epochs is None else epochs * float(self.samples_per_epoch or 0)
        base = self.total_samples or float(self.samples_per_epoch or 0) * float(self.epochs
                                                                                or 0)
        if self.critical_batch is None:
            return base
        b0 = self.reference_batch or smallest_batch
        return base * (1 + global_batch / self.critical_batch) / (1 + b0 / self.critical_batch)

    def describe(self) -> str:
        """The rule in words, for the report."""
        if not self.priced:
            return self.describe_measured()
        if self.epochs_per_batch is not None:
            table = ", ".join(f"{e:g} at {b}" for b, e in sorted(self.epochs_per_batch.items()))
            return (f"{self.samples_per_epoch:,.0f} samples per epoch; epochs per global batch "
                    f"from the study's table ({table}), log-linear between entries")
        what = (f"{self.total_samples:,.0f} samples" if self.total_samples else
                f"{self.epochs:g} epochs of {self.samples_per_epoch:,.0f} samples")
        at = (f" at global batch {self.reference_batch:g}" if self.reference_batch
              else " at the smallest global batch measured")
        if self.critical_batch is None:
            return f"{what}, whatever the global batch"
        return (f"{what}{at}, growing as (1 + B/B_crit) with B_crit = "
                f"{self.critical_batch:g} (McCandlish et al. 2018)")


    def describe_measured(self) -> str:
        """The measured target in words ("" without one)."""
        if not self.measured:
            return ""
        sign = "<=" if self.metric == "val_loss" else ">="
        return (f"{self.metric} {sign} {self.value:g}, evaluated every {self.eval_every} "
                f"optimizer steps, at most {self.max_steps} steps")


def _table(table: dict[int, float], batch: float) -> float | None:
    """Epochs at `batch` from a table: exact, log-linear between entries, None outside."""
    points = sorted(table.items())
    if batch < points[0][0] or batch > points[-1][0]:
        return None
    for (b1, e1), (b2, e2) in itertools.pairwise(points):
        if b1 <= batch <= b2:
            if b1 == b2:
                return e1
            t = (math.log(batch) - math.log(b1)) / (math.log(b2) - math.log(b1))
            return e1 + t * (e2 - e1)
    return points[-1][1]
