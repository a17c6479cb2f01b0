"""core/target.py and the spec's measured target: each mistake is one located line; a
valid target reaches the job as the benchmark's arguments and into the run's id."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalestudy.core.errors import SpecError
from scalestudy.core.grid import expand
from scalestudy.core.load import parse_study
from scalestudy.core.target import Target
from scalestudy.site.profiles import load_system
from scalestudy.site.program import program

WORKLOAD = """name: t
workload: {model: gpt-tiny, seq_len: 16, data: /datasets/tokens, warmup_iters: 1,
           batches_per_iter: 2}
"""
MEASURED = "target: {metric: val_loss, value: 2.5, eval_every: 20, max_steps: 500}\n"


def error(text: str) -> str:
    with pytest.raises(SpecError) as info:
        parse_study(text)
    message = str(info.value)
    assert "\n" not in message.strip()
    return message


@pytest.mark.parametrize(("target", "expected"), [
    ("{metric: val_loss, eval_every: 20, max_steps: 500}",
     "target: metric val_loss needs value, e.g."),
    ("{metric: val_loss, value: 2.5}", "needs eval_every, max_steps"),
    ("{metric: val_loss, value: 2.5, eval_every: 0, max_steps: 500}",
     "target.eval_every: Input should be greater than or equal to 1"),
    ("{metric: val_loss, value: 2.5, eval_every: 20, max_steps: 99.5}",
     "target.max_steps: Input should be a valid integer"),
    ("{metric: loss, value: 2.5, eval_every: 20, max_steps: 500}",
     "target.metric: Input should be 'val_loss' or 'val_accuracy'"),
    ("{value: 2.5, eval_every: 20}", "value, eval_every belong(s) to a measured target"),
    ("{metric: val_loss, value: -1, eval_every: 20, max_steps: 500}", "must be > 0"),
    ("{metric: val_loss, value: 2.5, eval_every: 20, max_steps: 3}",
     "target.max_steps: 3 leaves no timed iteration after the warm-up: give at least"),
    ("{metric: val_loss, value: 2.5, eval_every: 20, max_steps: 500, critical_batch: 64}",
     "critical_batch, epochs, epochs_per_batch and reference_batch need samples_per_epoch"),
    ("{}", "or a measured target (metric, value, eval_every, max_steps)"),
])
def test_a_wrong_target_is_one_line(target: str, expected: str) -> None:
    message = error(WORKLOAD + f"target: {target}\n")
    assert expected in message and message.startswith("<study>:")


def test_val_accuracy_is_a_fraction_and_for_classifiers_only() -> None:
    cnn = ("name: t\nworkload: {model: small_cnn, data: /datasets/images}\n"
           "target: {metric: val_accuracy, value: %s, eval_every: 20, max_steps: 500}\n")
    assert parse_study(cnn % "0.9").target == Target(metric="val_accuracy", value=0.9,
                                                     eval_every=20, max_steps=500)
    assert "(0, 1]" in error(cnn % "90")
    assert "val_accuracy is for classifiers; gpt-tiny" in error(
        WORKLOAD + "target: {metric: val_accuracy, value: 0.5, eval_every: 20, max_steps: 50}")


def test_a_measured_target_needs_data_and_the_bundled_benchmark() -> None:
    assert "target.metric: a measured target needs workload.data" in error(
        "name: t\nworkload: {model: gpt-tiny}\n" + MEASURED)
    assert "target.metric: a measured target is trained by the bundled benchmark" in error(
        "name: t\nworkload: {kind: command, command: train}\n" + MEASURED)
    axis = parse_study("name: t\nworkload: {model: gpt-tiny}\ngrid: {data: [/a, /b]}\n"
                       + MEASURED)
    assert axis.target is not None and axis.target.measured


def test_measured_alone_is_not_priced_and_both_may_be_given() -> None:
    study = parse_study(WORKLOAD + MEASURED)
    assert study.target is not None and not study.target.priced
    assert study.cost_target is None  # the cost section prices only given samples
    assert study.target.samples(64, 8) is None
    assert "val_loss <= 2.5, evaluated every 20 optimizer steps" in study.target.describe()
    both = parse_study(WORKLOAD + "target: {metric: val_loss, value: 2.5, eval_every: 20, "
                       "max_steps: 500, total_samples: 1000}\n")
    assert both.cost_target is both.target and both.target.samples(64, 8) == 1000


def test_the_target_reaches_the_job_and_the_run_id(tmp_path: Path) -> None:
    plain = expand(parse_study(WORKLOAD))[0]
    study = parse_study(WORKLOAD + MEASURED)
    run = expand(study)[0]
    assert run.run_id != plain.run_id  # what the run trains to is part of what it measures
    args = list(program(study, load_system("local"), run, tmp_path, "python").args)
    i = args.index("--target-metric")
    assert args[i:i + 8] == ["--target-metric", "val_loss", "--target-value", "2.5",
                             "--eval-every", "20", "--max-steps", "500"]
    priced = parse_study(WORKLOAD + "target: {total_samples: 1000}\n")
    assert expand(priced)[0].run_id == plain.run_id  # a priced target changes no run
    assert "--target-metric" not in program(priced, load_system("local"),
                                            expand(priced)[0], tmp_path, "python").args


def test_lr_scaling_mapping_and_optimizer_axes() -> None:
    study = parse_study("name: t\nworkload: {model: gpt-tiny, optimizer: lamb, "
                        "lr_scaling: {rule: sqrt, reference_batch: 64}, lr_warmup: 0.1, "
                        "lr_decay: cosine}\ngrid: {optimizer: [sgd, adamw, lars, lamb]}\n")
    values = study.workload.option_values()
    assert (values["lr_rule"], values["lr_reference_batch"], values["lr_warmup"],
            values["lr_decay"]) == ("sqrt", 64, 0.1, "cosine")
    assert [dict(r.axes)["optimizer"] for r in expand(study)] == ["sgd", "adamw", "lars",
                                                                  "lamb"]
    assert "lr_scaling: rule linear needs reference_batch" in error(
        "name: t\nworkload: {model: gpt-tiny, lr_scaling: {rule: linear}}\n")
    assert "lr_scaling: unknown key(s) rate" in error(
        "name: t\nworkload: {model: gpt-tiny, lr_scaling: {rate: 1}}\n")
    assert "lr.scaling and lr_scaling both scale" in error(
        "name: t\nworkload: {model: gpt-tiny, lr: {base: 0.1}, "
        "lr_scaling: {rule: linear, reference_batch: 64}}\n")
    assert "grid.optimizer[0]: Input should be 'sgd', 'adamw', 'lars' or 'lamb'" in error(
        "name: t\ngrid: {optimizer: [adam]}\n")


def test_lr_is_a_number_an_axis_or_a_policy_not_two_of_them(tmp_path: Path) -> None:
    study = parse_study("name: t\nworkload: {model: gpt-tiny}\ngrid: {lr: [0.001, 0.003]}\n")
    lrs = []
    for run in expand(study):
        args = list(program(study, load_system("local"), run, tmp_path, "python").args)
        lrs.append(args[args.index("--lr") + 1])
    assert lrs == ["0.001", "0.003"]
    number = parse_study("name: t\nworkload: {model: gpt-tiny, lr: 0.02}\n")
    assert number.workload.option_values()["lr"] == 0.02
    assert "grid.lr: workload.lr's policy sets the learning rate too" in error(
        "name: t\nworkload: {model: gpt-tiny, lr: {base: 0.1}}\ngrid: {lr: [0.001]}\n")
    assert "workload.lr: a learning rate is > 0, got 0" in error(
        "name: t\nworkload: {model: gpt-tiny, lr: 0}\n")
