"""The gradient noise scale B_simple of McCandlish et al. 2018 ("An Empirical Model of
Large-Batch Training", arXiv:1812.06162, appendix A), measured in a data-parallel run
from each rank's local gradient and the all-reduced one: a DDP communication hook that
wraps the hook in use (`NoiseMeter.wrap`), and the estimate with its interval
(`estimate`).

Per optimizer step, with B_small the samples one rank's gradient is over and B_big the
global batch: |G_small|² is the mean over ranks of each rank's local gradient norm
squared (before the allreduce) and |G_big|² the norm squared of the averaged gradient.
Their unbiased combinations

    |G|² = (B_big |G_big|² − B_small |G_small|²) / (B_big − B_small)
    S    = (|G_small|² − |G_big|²) / (1/B_small − 1/B_big)

are averaged over the timed steps first, then B_simple = S / |G|² (the ratio of the
averages, as the paper advises: each step's ratio is too noisy to average).

The interval is Fieller's for a ratio of two means (the steps' S and |G|² as paired
samples, their covariance included; Student's t quantile for the number of steps): it
is asymmetric as a ratio's should be, and it says honestly when |G|² is not resolved
(its bounds are then null: unbounded). Each step's S and |G|² come from a fresh batch,
so their sampling noise is independent between steps; a drift of |G|² along training
only widens the interval.

The cost: two norms per gradient bucket (before the hook in use, and of its result),
one scalar allreduce per step, no second backward and no copy of the gradients.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from statistics import NormalDist

import torch
import torch.distributed as dist

#: The interval's level (the forecasts' too).
LEVEL = 0.90
#: SCALESTUDY_NOISE_SCALE=off runs without the hook (benchmarks/noise_cost.py compares).
SWITCH_ENV = "SCALESTUDY_NOISE_SCALE"
#: Steps kept per device tensor (a long run keeps a few tensors, not two per step).
CHUNK = 1024

Hook = Callable[[dist.ProcessGroup, dist.GradBucket], "torch.futures.Future[torch.Tensor]"]


def unavailable(reason: str) -> dict[str, object]:
    """The record's keys where the noise scale is not measured: null, and why."""
    return {"noise_scale": None, "noise_scale_unavailable": reason}


def switched_off(environ: Mapping[str, str]) -> bool:
    """SCALESTUDY_NOISE_SCALE=off (or 0, no, false): run without the estimator's hook."""
    return environ.get(SWITCH_ENV, "").strip().lower() in ("off", "0", "no", "false")


def per_step(small: float, big: float, b_small: float, b_big: float) -> tuple[float, float]:
    """One step's unbiased (|G|², S) from |G_small|² and |G_big|² (appendix A.1)."""
    g2 = (b_big * big - b_small * small) / (b_big - b_small)
    s = (small - big) / (1.0 / b_small - 1.0 / b_big)
    return g2, s


def t_quantile(p: float, dof: int) -> float:
    """Student's t quantile (Cornish-Fisher expansion about the normal's: within 1 % of
    the exact value from 3 degrees of freedom up, the normal's beyond 1000)."""
    z = NormalDist().inv_cdf(p)
    if dof >= 1000:
        return z
    v = float(max(dof, 1))
    return (z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3))


def fieller(a: float, b: float, vaa: float, vbb: float, vab: float, q: float
            ) -> tuple[float | None, float | None]:
    """Fieller's interval for a / b from the means a, b, their variances and covariance,
    at quantile q; (None, None) when b is not resolved at that level (unbounded)."""
    qa = b * b - q * q * vbb
    if qa <= 0:
        return None, None
    qb = a * b - q * q * vab
    qc = a * a - q * q * vaa
    root = math.sqrt(max(0.0, qb * qb - qa * qc))
    return (qb - root) / qa, (qb + root) / qa


def estimate(steps: Sequence[tuple[float, float]], b_small: float, b_big: float,
             level: float = LEVEL) -> dict[str, object]:
    """The record's noise-scale keys from each timed step's (|G_small|², |G_big|²):
    `noise_scale` (B_simple, samples), its interval `noise_scale_low`/`_high` at
    `noise_scale_level`, `noise_scale_steps`, the raw means `grad_sq_small` and
    `grad_sq_big` (so that others can recompute), and the means of S and |G|²; null with
    `noise_scale_unavailable` when it cannot be said."""
    if b_big <= b_small:
        return unavailable("one data-parallel replica: no second gradient to compare "
                           "with (the noise scale needs 2 or more ranks)")
    steps = [(s, b) for s, b in steps if math.isfinite(s) and math.isfinite(b)]
    n = len(steps)
    if n < 2:
        return unavailable(f"{n} step(s) with finite gradient norms: 2 or more needed")
    small = math.fsum(s for s, _ in steps) / n
    big = math.fsum(b for _, b in steps) / n
    pairs = [per_step(s, b, b_small, b_big) for s, b in steps]
    g2 = math.fsum(g for g, _ in pairs) / n
    tr = math.fsum(s for _, s in pairs) / n
    raw: dict[str, object] = {"noise_scale_steps": n, "grad_sq_small": small,
                              "grad_sq_big": big, "noise_trace": tr, "noise_grad_sq": g2,
                              "noise_scale_b_small": b_small, "noise_scale_b_big": b_big}
    if g2 <= 0:
        return {**unavailable(
            f"|G|² not resolved ({g2:.3g} over {n} steps): the gradient noise swamps the "
            f"gradient at global batch {b_big:g}, so the noise scale is far above it; "
            "measure more steps"), **raw}
    if tr <= 0:
        return {**unavailable(f"tr Σ not resolved ({tr:.3g} over {n} steps): no gradient "
                              "noise measurable between the ranks' batches"), **raw}
    vaa = math.fsum((s - tr) ** 2 for _, s in pairs) / (n - 1) / n
    vbb = math.fsum((g - g2) ** 2 for g, _ in pairs) / (n - 1) / n
    vab = math.fsum((s - tr) * (g - g2) for g, s in pairs) / (n - 1) / n
    low, high = fieller(tr, g2, vaa, vbb, vab, t_quantile(0.5 + level / 2, n - 1))
    return {"noise_scale": tr / g2,
            "noise_scale_low": None if low is None else max(0.0, low),
            "noise_scale_high": high, "noise_scale_level": level, **raw}


def _norm_sq(tensor: torch.Tensor) -> torch.Tensor:
    """‖tensor‖², a float64 scalar on the tensor's device (no copy of the tensor)."""
    return torch.linalg.vector_norm(tensor).double().square()


class NoiseMeter:
    """Per-step |G_small|² and |G_big|² of a DDP model, measured inside its comm hook.

    `wrap(inner)` is the hook to register: it takes the bucket's local norm before
    `inner` (the plain allreduce, a compression hook or a simulated network) and the
    averaged bucket's norm from `inner`'s result. `end_step()`, after each optimizer
    step, sums the buckets and allreduces the one scalar of local norms (asynchronously:
    it is waited for at the next step). Nothing leaves the device until `steps()`."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self._local: list[torch.Tensor] = []
        self._big: list[torch.Tensor] = []
        self._steps: list[tuple[torch.Tensor, torch.Tensor]] = []  # since the last chunk
        self._chunks: list[torch.Tensor] = []  # CHUNK steps each, (local, big) per row
        self._pending: dist.Work | None = None

    def wrap(self, inner: Hook) -> Hook:
        """A comm hook measuring both norms around `inner`."""
        def hook(state: dist.ProcessGroup, bucket: dist.GradBucket
                 ) -> torch.futures.Future[torch.Tensor]:
            self._local.append(_norm_sq(bucket.buffer()))  # before inner averages in place

            def reduced(fut: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
                value = fut.value()
                self._big.append(_norm_sq(value[0] if isinstance(value, list) else value))
                return value

            return inner(state, bucket).then(reduced)

        # DDP checks the annotations as objects; this module's are strings
        hook.__annotations__ = {"state": dist.ProcessGroup, "bucket": dist.GradBucket,
                                "return": torch.futures.Future[torch.Tensor]}
        return hook

    def end_step(self) -> None:
        """Close one synchronised step: its local norms summed and allreduced (nothing
        when no bucket was reduced, e.g. under no_sync)."""
        if not self._local or not self._big:
            self._local, self._big = [], []
            return
        local = torch.stack(self._local).sum()
        big = torch.stack(self._big).sum()
        self._local, self._big = [], []
        if self._pending is not None:
            self._pending.wait()  # the previous step's: every kept step is reduced now
        if len(self._steps) >= CHUNK:  # one tensor per CHUNK steps, not two per step
            self._chunks.append(torch.stack([torch.stack(pair) for pair in self._steps]))
            self._steps = []
        self._pending = dist.all_reduce(local, async_op=True)
        self._steps.append((local, big))

    def steps(self, skip: int = 0) -> list[tuple[float, float]]:
        """Each step's (|G_small|², |G_big|²) after the first `skip` (the warm-up; all
        of them when there are no more), moved to the host once."""
        if self._pending is not None:
            self._pending.wait()
            self._pending = None
        parts = [*self._chunks, *([torch.stack([torch.stack(p) for p in self._steps])]
                                  if self._steps else [])]
        if not parts:
            return []
        values = torch.cat(parts).cpu().tolist()
        kept = values[skip:] if len(values) > skip else values
        return [(local / self.world_size, big) for local, big in kept]


def fields(meter: NoiseMeter | None, reason: str, b_small: float, b_big: float,
           skip: int) -> dict[str, object]:
    """The record's noise-scale keys from a meter (None: `reason` says why none ran)."""
    if meter is None:
        return unavailable(reason)
    return estimate(meter.steps(skip), b_small, b_big)


def reason_not_measured(world_size: int, synthetic: bool, environ: Mapping[str, str]
                        = os.environ) -> str:
    """Why a DDP run does not measure the noise scale ("" when it does)."""
    if world_size < 2:
        return ("world size 1: one gradient per step, nothing to compare it with (the "
                "noise scale needs 2 or more data-parallel ranks)")
    if synthetic:
        return ("synthetic data: every rank trains on the same batch, so the ranks' "
                "gradients do not differ; train on a dataset (`data:`) to measure it")
    if switched_off(environ):
        return f"switched off ({SWITCH_ENV}={environ.get(SWITCH_ENV)})"
    return ""
