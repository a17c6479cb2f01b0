"""Grid expansion: cross product, batch arithmetic, exclusions, stable ids, --only."""

from __future__ import annotations

import pytest

from scalestudy.core.errors import ScalestudyError, SpecError
from scalestudy.core.grid import expand, node_hours, select
from scalestudy.core.load import parse_study

BASE = """
name: g
grid: {nodes: [1, 2], ranks_per_node: [1, 4], batch_size: [8, 32]}
repeats: 2
"""


def test_cross_product_times_repeats_in_stable_order() -> None:
    runs = expand(parse_study(BASE))
    assert len(runs) == 2 * 2 * 2 * 2
    assert [(r.nodes, r.ranks_per_node, r.batch_size, r.repeat) for r in runs[:3]] == [
        (1, 1, 8, 0), (1, 1, 8, 1), (1, 1, 32, 0)]
    assert len({r.run_id for r in runs}) == len(runs)


def test_weak_scaling_holds_per_gpu_batch() -> None:
    run = next(r for r in expand(parse_study(BASE)) if r.nodes == 2 and r.ranks_per_node == 4)
    assert run.world_size == 8
    assert run.global_batch == run.batch_size * 8


def test_strong_scaling_splits_the_global_batch() -> None:
    study = parse_study("name: s\nscaling: strong\ngrid: {ranks_per_node: [1, 2, 4], "
                        "global_batch: [64]}\n")
    assert [(r.world_size, r.batch_size, r.global_batch) for r in expand(study)] == [
        (1, 64, 64), (2, 32, 64), (4, 16, 64)]


def test_strong_scaling_indivisible_point_can_be_excluded() -> None:
    study = parse_study("name: s\nscaling: strong\ngrid: {ranks_per_node: [1, 3], "
                        "global_batch: [64]}\nexclude: [{world_size: 3}]\n")
    assert [r.world_size for r in expand(study)] == [1]


def test_strong_scaling_indivisible_point_is_an_error() -> None:
    study = parse_study("name: s\nscaling: strong\ngrid: {ranks_per_node: [1, 3], "
                        "global_batch: [64]}\n", "s.yaml")
    with pytest.raises(SpecError, match=r"s.yaml:3: grid.global_batch\[0\]: .*64 over 3 ranks"):
        expand(study)


def test_exclude_rules_match_all_keys_of_a_rule() -> None:
    study = parse_study(BASE + "exclude:\n  - {nodes: 2, batch_size: [8, 32]}\n"
                        "  - {world_size: 4, batch_size: 8}\n")
    points = {(r.nodes, r.ranks_per_node, r.batch_size) for r in expand(study)}
    assert points == {(1, 1, 8), (1, 1, 32), (1, 4, 32)}


def test_run_ids_are_stable_and_depend_on_what_is_measured() -> None:
    ids = [r.run_id for r in expand(parse_study(BASE))]
    assert ids == [r.run_id for r in expand(parse_study(BASE))]
    renamed = [r.run_id for r in expand(parse_study(BASE.replace("name: g", "name: h")))]
    assert renamed == ids  # the study's name does not change what a run measures
    longer = expand(parse_study(BASE + "workload: {iters: 20}\n"))
    assert not set(ids) & {r.run_id for r in longer}


def test_tuning_content_changes_the_run_id_but_its_description_does_not() -> None:
    spec = ("name: t\ngrid: {tuning: [v]}\ntuning:\n  v: {description: %s, env: "
            "{NCCL_ALGO: %s}}\n")
    a = expand(parse_study(spec % ("one", "Ring")))[0].run_id
    b = expand(parse_study(spec % ("two", "Ring")))[0].run_id
    c = expand(parse_study(spec % ("one", "Tree")))[0].run_id
    assert a == b != c


def test_node_hours_is_nodes_times_walltime() -> None:
    study = parse_study(BASE + "job: {walltime: '00:30:00'}\n")
    runs = expand(study)
    assert node_hours(study, runs) == pytest.approx(sum(r.nodes for r in runs) * 0.5)


@pytest.mark.parametrize(("expr", "count"), [
    (None, 16), ("nodes=1", 8), ("nodes<=1,batch_size=8", 4), ("world_size>4", 4),
    ("batch_size=8|32", 16), ("tuning!=default", 0), ("repeat=0,world_size=1", 2),
])
def test_only_selects_runs(expr: str | None, count: int) -> None:
    assert len(select(expand(parse_study(BASE)), expr)) == count


def test_only_matches_run_id_prefix() -> None:
    runs = expand(parse_study(BASE))
    assert select(runs, f"run_id={runs[3].run_id[:6]}") == [runs[3]]


@pytest.mark.parametrize(("expr", "message"), [
    ("gpus=4", "unknown key 'gpus'"), ("nodes=two", "whole numbers"),
    ("tuning<3", "needs one number"), ("nodes", "cannot read"),
])
def test_only_errors_say_how_to_write_it(expr: str, message: str) -> None:
    with pytest.raises(ScalestudyError, match=message):
        select(expand(parse_study(BASE)), expr)


OPTIONS_SPEC = """
name: o
workload: {model: small_cnn, channels_last: true}
grid:
  backend: [ddp, horovod, deepspeed]
  precision: [fp32, bf16]
  zero_stage: [0, 3]
  tuning: [default, fp16-wire]
tuning:
  fp16-wire: {options: {compression: fp16, comm_hook: fp16}}
"""


def test_an_option_axis_multiplies_only_the_backends_that_read_it() -> None:
    from scalestudy.core.grid import run_options

    study = parse_study(OPTIONS_SPEC)
    runs = expand(study)
    by_backend = {b: [r for r in runs if r.backend == b] for b in ("ddp", "horovod", "deepspeed")}
    # precision x tuning for all; zero_stage only multiplies deepspeed
    assert len(by_backend["ddp"]) == len(by_backend["horovod"]) == 2 * 2
    assert len(by_backend["deepspeed"]) == 2 * 2 * 2
    assert {r.params()["zero_stage"] for r in by_backend["ddp"]} == {None}
    assert {r.params()["zero_stage"] for r in by_backend["deepspeed"]} == {0, 3}
    assert len({r.run_id for r in runs}) == len(runs)
    ddp = next(r for r in by_backend["ddp"] if r.tuning == "fp16-wire" and r.precision == "bf16")
    opts = run_options(study, ddp)
    assert opts["comm_hook"] == "fp16" and opts["channels_last"] is True
    assert "compression" not in opts and "zero_stage" not in opts
    hvd = next(r for r in by_backend["horovod"] if r.tuning == "fp16-wire")
    assert run_options(study, hvd)["compression"] == "fp16"


def test_only_selects_on_option_axes() -> None:
    runs = expand(parse_study(OPTIONS_SPEC))
    picked = select(runs, "zero_stage=3,precision=bf16")
    assert picked and all(r.backend == "deepspeed" and r.precision == "bf16" for r in picked)
    assert {r.params()["zero_stage"] for r in picked} == {3}


def test_the_lr_policy_scales_with_the_global_batch() -> None:
    from scalestudy.core.grid import lr_values

    study = parse_study("""
name: lr
grid: {nodes: [1, 4], batch_size: 64}
workload: {lr: {base: 0.1, reference_batch: 256, scaling: sqrt, warmup_iters: 5}}
""")
    small, big = expand(study)
    assert lr_values(study, small) == {"lr": pytest.approx(0.1 * 0.5), "base_lr": 0.1,
                                       "lr_warmup_iters": 5}
    assert lr_values(study, big)["lr"] == pytest.approx(0.1)
