"""The optimizers and learning-rate rules of the bundled benchmark: SGD and AdamW from
torch, LARS and LAMB written here (torch has neither), the scaled learning rate and the
schedule (warm-up, then cosine or step decay).

LARS: You, Gitman and Ginsburg 2017, "Large Batch Training of Convolutional Networks"
(arXiv:1708.03888), Algorithm 1: a layer's local rate is
eta x ||w|| / (||g|| + beta ||w||), applied to g + beta w inside SGD with momentum.
LAMB: You et al. 2019, "Large Batch Optimization for Deep Learning: Training BERT in 76
minutes" (arXiv:1904.00962), Algorithm 2: Adam's bias-corrected step r plus the weight
decay, scaled per layer by ||w|| / ||r + lambda w||.
As in both papers, biases and normalisation weights (tensors of one dimension) are left
out of the layer-wise adaptation and of weight decay (`adapt: False` in their group).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
from torch import nn

from .options import OPTIMIZERS

#: Step decay: the learning rate is multiplied by STEP_GAMMA at these fractions of the run.
STEP_MILESTONES: tuple[float, ...] = (0.5, 0.75)
STEP_GAMMA = 0.1


def _trust(w_norm: torch.Tensor, u_norm: torch.Tensor) -> torch.Tensor:
    """||w|| / ||u||, or 1 where either norm is zero (both papers' convention)."""
    ok = (w_norm > 0) & (u_norm > 0)
    return torch.where(ok, w_norm / torch.where(ok, u_norm, torch.ones_like(u_norm)),
                       torch.ones_like(w_norm))


class LARS(torch.optim.Optimizer):
    """Layer-wise adaptive rate scaling over SGD with momentum (You et al. 2017)."""

    def __init__(self, params: Iterable[nn.Parameter] | Iterable[dict[str, object]],
                 lr: float, momentum: float = 0.9, weight_decay: float = 0.0,
                 trust_coefficient: float = 0.001, adapt: bool = True) -> None:
        defaults = {"lr": lr, "momentum": momentum, "weight_decay": weight_decay,
                    "trust_coefficient": trust_coefficient, "adapt": adapt}
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            wd, eta = group["weight_decay"], group["trust_coefficient"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                if group["adapt"]:
                    w_norm, g_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(g)
                    local = eta * _trust(w_norm, g_norm + wd * w_norm)
                    g = (g + wd * p) * local
                buf = self.state[p].get("momentum_buffer")
                if buf is None:
                    buf = self.state[p]["momentum_buffer"] = torch.zeros_like(p)
                buf.mul_(group["momentum"]).add_(g, alpha=group["lr"])
                p.sub_(buf)
        return loss


class LAMB(torch.optim.Optimizer):
    """Layer-wise adaptive moments (You et al. 2019), phi the identity."""

    def __init__(self, params: Iterable[nn.Parameter] | Iterable[dict[str, object]],
                 lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.0, adapt: bool = True) -> None:
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                    "adapt": adapt}
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            (b1, b2), wd = group["betas"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["m"], state["v"] = torch.zeros_like(p), torch.zeros_like(p)
                state["step"] += 1
                t, m, v = state["step"], state["m"], state["v"]
                m.mul_(b1).add_(p.grad, alpha=1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                r = (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + group["eps"])
                u = r + wd * p if wd else r
                if group["adapt"]:
                    u = u * _trust(torch.linalg.vector_norm(p), torch.linalg.vector_norm(u))
                p.sub_(u, alpha=group["lr"])
        return loss


def param_groups(params: Iterable[nn.Parameter], weight_decay: float
                 ) -> list[dict[str, object]]:
    """Matrices and convolution kernels (adapted, decayed) apart from biases and norm
    weights (one dimension: neither)."""
    params = [p for p in params if p.requires_grad]
    full = [p for p in params if p.ndim > 1]
    flat = [p for p in params if p.ndim <= 1]
    groups: list[dict[str, object]] = []
    if full:
        groups.append({"params": full, "weight_decay": weight_decay, "adapt": True})
    if flat:
        groups.append({"params": flat, "weight_decay": 0.0, "adapt": False})
    return groups


def make(name: str, params: Iterable[nn.Parameter], lr: float, weight_decay: float = 0.0
         ) -> torch.optim.Optimizer:
    """The optimizer `name` (one of OPTIMIZERS) over `params` at `lr`."""
    groups = param_groups(params, weight_decay)
    if name == "sgd":
        return torch.optim.SGD(_plain(groups), lr=lr, momentum=0.9)
    if name == "adamw":
        return torch.optim.AdamW(_plain(groups), lr=lr)
    if name == "lars":
        return LARS(groups, lr=lr)
    if name == "lamb":
        return LAMB(groups, lr=lr)
    raise ValueError(f"unknown optimizer {name!r}; valid: {', '.join(OPTIMIZERS)}")


def _plain(groups: list[dict[str, object]]) -> list[dict[str, object]]:
    """The groups for torch's own optimizers: without LARS/LAMB's `adapt` key."""
    return [{k: v for k, v in g.items() if k != "adapt"} for g in groups]


def scaled_lr(lr: float, rule: str, global_batch: int, reference_batch: int) -> float:
    """The learning rate at `global_batch`: lr x (B / B_ref) (linear, Goyal et al. 2017),
    lr x sqrt(B / B_ref) (sqrt, Krizhevsky 2014; Hoffer et al. 2017), or lr (none)."""
    if rule == "none":
        return lr
    if reference_batch <= 0:
        raise ValueError(f"lr scaling {rule!r} needs a reference batch >= 1")
    ratio = global_batch / reference_batch
    return lr * (ratio if rule == "linear" else math.sqrt(ratio))


def warmup_steps(warmup: float, total_steps: int) -> int:
    """Warm-up steps: `warmup` itself from 1 on, a fraction of `total_steps` below 1."""
    if warmup >= 1:
        return int(warmup)
    return round(warmup * total_steps)


def factor(step: int, warmup: int, total_steps: int, decay: str, start: float = 0.0) -> float:
    """Multiplier of the learning rate at optimizer step `step` (0-based): a linear ramp
    from `start` to 1 over `warmup` steps (Goyal et al. 2017), then `decay` over the rest
    of `total_steps`: cosine to 0 (Loshchilov and Hutter 2017), step (x0.1 at half and
    three quarters of the run), or none."""
    if warmup > 0 and step < warmup:
        return start + (1.0 - start) * step / warmup
    if decay == "none" or total_steps <= warmup:
        return 1.0
    done = min(1.0, (step - warmup) / (total_steps - warmup))
    if decay == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * done))
    return STEP_GAMMA ** sum(done >= m for m in STEP_MILESTONES)
