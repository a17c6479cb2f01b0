"""workload/optimizers.py: one step of LARS and LAMB against the papers' formulas worked
by hand; biases and norm weights left out of the adaptation; the learning-rate rules
and schedule; and the optimizer the benchmark builds from its options."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from scalestudy.workload.optimizers import LAMB, LARS, factor, make, scaled_lr, warmup_steps
from scalestudy.workload.totarget import Goal
from scalestudy.workload.train import TrainConfig, lr_factor, make_optimizer

CFG = dict(model="gpt-tiny", image_size=32, num_classes=10, batch_size=4, precision="fp32",
           warmup_iters=1, iters=4, batches_per_iter=5, seed=0)


def weight(values: list[float], grad: list[float]) -> nn.Parameter:
    p = nn.Parameter(torch.tensor([values], dtype=torch.float64))  # 2-D: adapted
    p.grad = torch.tensor([grad], dtype=torch.float64)
    return p


def test_lars_step_is_the_papers_formula() -> None:
    # ||w|| = 5, ||g|| = 1, beta = 0.1, eta = 0.001:
    # local lr = 0.001 x 5 / (1 + 0.1 x 5) = 1/300; v = 1 x (1/300) x (g + 0.1 w)
    # = (1/300) x (0.9, 1.2) = (0.003, 0.004); w <- w - v.
    w = weight([3.0, 4.0], [0.6, 0.8])
    opt = LARS([w], lr=1.0, momentum=0.9, weight_decay=0.1, trust_coefficient=0.001)
    opt.step()
    assert w.detach().tolist()[0] == pytest.approx([2.997, 3.996], abs=1e-12)
    # Second step, same gradient at the new w: momentum keeps 0.9 x the first update.
    norm = math.hypot(2.997, 3.996)
    local = 0.001 * norm / (1.0 + 0.1 * norm)
    update = [0.9 * 0.003 + local * (0.6 + 0.1 * 2.997),
              0.9 * 0.004 + local * (0.8 + 0.1 * 3.996)]
    w.grad = torch.tensor([[0.6, 0.8]], dtype=torch.float64)
    opt.step()
    assert w.detach().tolist()[0] == pytest.approx([2.997 - update[0], 3.996 - update[1]],
                                                   abs=1e-12)


def test_lamb_step_is_the_papers_formula() -> None:
    # Step 1: m_hat = g, v_hat = g^2, so r = g / |g| = (1, -1) (eps 0);
    # u = r + 0.1 w = (1.3, -0.6); trust = ||w|| / ||u|| = 5 / sqrt(2.05).
    w = weight([3.0, 4.0], [0.6, -0.8])
    opt = LAMB([w], lr=0.01, betas=(0.9, 0.999), eps=0.0, weight_decay=0.1)
    opt.step()
    trust = 5.0 / math.sqrt(1.3 ** 2 + 0.6 ** 2)
    assert w.detach().tolist()[0] == pytest.approx(
        [3.0 - 0.01 * trust * 1.3, 4.0 + 0.01 * trust * 0.6], abs=1e-12)


def test_a_zero_weight_or_update_takes_trust_one() -> None:
    w = weight([0.0, 0.0], [0.6, 0.8])
    LAMB([w], lr=0.1, eps=0.0).step()  # ||w|| = 0: the plain Adam step, lr x sign(g)
    assert w.detach().tolist()[0] == pytest.approx([-0.1, -0.1], abs=1e-12)


def test_biases_and_norm_weights_are_not_adapted_nor_decayed() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2))
    opt = make("lars", model.parameters(), lr=0.5, weight_decay=0.1)
    groups = {len(g["params"]): (g["adapt"], g["weight_decay"]) for g in opt.param_groups}
    assert groups == {1: (True, 0.1), 3: (False, 0.0)}
    bias = model[0].bias
    before = bias.detach().clone()
    bias.grad = torch.ones_like(bias)
    for p in (model[0].weight, model[1].weight, model[1].bias):
        p.grad = torch.zeros_like(p)
    opt.step()  # plain SGD with momentum for the bias: b - lr x g
    assert torch.allclose(bias.detach(), before - 0.5)


@pytest.mark.parametrize(("name", "kind"), [("sgd", torch.optim.SGD), ("adamw", torch.optim.AdamW),
                                            ("lars", LARS), ("lamb", LAMB)])
def test_the_benchmark_builds_the_optimizer_its_options_name(name: str, kind: type) -> None:
    cfg = TrainConfig(**CFG, optimizer=name, lr=0.2)  # type: ignore[arg-type]
    opt = make_optimizer(nn.Linear(3, 3).parameters(), cfg)
    assert isinstance(opt, kind) and opt.param_groups[0]["lr"] == 0.2


def test_lr_scaling_rules() -> None:
    assert scaled_lr(0.1, "none", 1024, 256) == 0.1
    assert scaled_lr(0.1, "linear", 1024, 256) == pytest.approx(0.4)
    assert scaled_lr(0.1, "sqrt", 1024, 256) == pytest.approx(0.2)
    assert scaled_lr(0.1, "linear", 64, 256) == pytest.approx(0.025)
    with pytest.raises(ValueError, match="reference batch"):
        scaled_lr(0.1, "linear", 64, 0)


def test_warmup_in_steps_or_as_a_fraction() -> None:
    assert warmup_steps(25, 1000) == 25
    assert warmup_steps(0.1, 1000) == 100
    assert warmup_steps(0.0, 1000) == 0


def test_schedule_warmup_then_cosine_or_step() -> None:
    assert factor(0, 10, 110, "none", start=0.1) == pytest.approx(0.1)
    assert factor(5, 10, 110, "none", start=0.1) == pytest.approx(0.55)
    assert factor(10, 10, 110, "cosine") == pytest.approx(1.0)
    assert factor(60, 10, 110, "cosine") == pytest.approx(0.5)  # half-way: cos(pi/2)
    assert factor(110, 10, 110, "cosine") == pytest.approx(0.0)
    assert [factor(s, 0, 100, "step") for s in (0, 49, 50, 74, 75, 99)] == pytest.approx(
        [1, 1, 0.1, 0.1, 0.01, 0.01])
    assert factor(80, 0, 100, "none") == 1.0


def test_a_fraction_warmup_spans_max_steps_with_a_target() -> None:
    cfg = TrainConfig(**CFG, lr_warmup=0.25, lr_decay="cosine",  # type: ignore[arg-type]
                      target=Goal("val_loss", 2.0, 10, 200))
    assert (cfg.total_steps, cfg.warmup_steps) == (200, 50)
    assert lr_factor(0, cfg) == pytest.approx(1 / 50)
    assert lr_factor(50, cfg) == pytest.approx(1.0)
    assert lr_factor(125, cfg) == pytest.approx(0.5)
    plain = TrainConfig(**CFG, lr_warmup=0.2)  # type: ignore[arg-type]
    assert (plain.total_steps, plain.warmup_steps) == (25, 5)  # (1 + 4) x 5 steps


def test_the_spec_lr_policy_ramp_is_unchanged() -> None:
    cfg = TrainConfig(**CFG, lr=0.4, base_lr=0.1, lr_warmup_iters=4)  # type: ignore[arg-type]
    assert [lr_factor(s, cfg) for s in range(5)] == pytest.approx(
        [0.25, 0.4375, 0.625, 0.8125, 1.0])
