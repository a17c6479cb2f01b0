"""workload/checkpointer.py: a real torch.distributed.checkpoint save and load in one
process restores the model, the optimizer's state, the scheduler and a target's progress,
and the record's keys say so."""

from __future__ import annotations

from pathlib import Path

import torch

from scalestudy.workload import checkpoint
from scalestudy.workload.checkpoint import Settings, latest
from scalestudy.workload.checkpointer import Checkpointer
from scalestudy.workload.totarget import Outcome


def trained(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer, object]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1 / (s + 1))


def step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: object) -> None:
    optimizer.zero_grad()
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    scheduler.step()  # type: ignore[attr-defined]


def test_a_dcp_checkpoint_restores_model_optimizer_scheduler_and_target(tmp_path: Path
                                                                         ) -> None:
    settings = Settings(tmp_path / "ck", every_steps=2)
    model, optimizer, scheduler = trained(0)
    saver = Checkpointer(settings, model, optimizer, scheduler, 0, 1, bool)
    assert saver.resume(latest(settings.directory)) is None  # nothing to resume from
    outcome = Outcome(steps=2, train_s=1.5, curve=[(2, 3.0)], best=3.0)
    for n in (1, 2):
        step(model, optimizer, scheduler)
        saver.after_step(n, outcome)
    assert saver.stats.blocked_s and saver.stats.nbytes > 0 and saver.blocked() > 0
    expected = [p.detach().clone() for p in model.parameters()]
    step(model, optimizer, scheduler)  # trained on past the checkpoint, then lost

    fresh, fresh_opt, fresh_sched = trained(1)
    loader = Checkpointer(settings, fresh, fresh_opt, fresh_sched, 0, 1, bool)
    restored = loader.resume(latest(settings.directory))
    assert restored == outcome and loader.stats.resumed_from_step == 2
    assert all(torch.equal(a, b) for a, b in zip(fresh.parameters(), expected, strict=True))
    assert fresh_sched.last_epoch == 2  # type: ignore[attr-defined]
    momentum = [fresh_opt.state[p]["momentum_buffer"] for p in fresh.parameters()]
    assert all(m is not None and m.abs().sum() > 0 for m in momentum)
    record = checkpoint.fields(settings, [loader.stats], step_s=0.1)
    assert record["resumed_from_step"] == 2 and record["checkpoint_load_s"] is not None
    assert "Resumed from step 2 (checkpoint" in (checkpoint.line(record) or "")
