"""core/workloads.py and core/load.py: `workload.data` as a path or a mapping, grid axes
over the data options, relative paths made absolute, old specs unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalestudy.core.errors import SpecError
from scalestudy.core.grid import expand, run_options
from scalestudy.core.load import load_study, parse_study, study_schema

DATA = ("data", "data_workers", "data_prefetch", "data_stage", "data_seed")


def _data(text: str, source: str | Path = "<study>") -> dict[str, object]:
    values = parse_study(text, source).workload.option_values()
    return {k: values[k] for k in DATA}


def test_a_path(tmp_path: Path) -> None:
    got = _data("name: x\nworkload:\n  data: /lus/proj/tokens\n")
    assert got == {"data": "/lus/proj/tokens", "data_workers": 2, "data_prefetch": 2,
                   "data_stage": "none", "data_seed": 0}


def test_a_mapping_is_the_options() -> None:
    got = _data("name: x\nworkload:\n  data: {path: /d, workers: 8, prefetch: 4, stage: shm, "
                "seed: 7}\n")
    assert got == {"data": "/d", "data_workers": 8, "data_prefetch": 4, "data_stage": "shm",
                   "data_seed": 7}


def test_a_relative_path_is_relative_to_the_spec(tmp_path: Path) -> None:
    spec = tmp_path / "studies" / "s.yaml"
    spec.parent.mkdir()
    spec.write_text("name: x\nworkload:\n  data: {path: ../data/tok}\ngrid:\n"
                    "  data: [a, /abs/b]\n")
    study = load_study(spec)
    assert study.workload.option_values()["data"] == str(tmp_path / "data" / "tok")
    assert study.grid.option_axes()["data"] == [str(tmp_path / "studies" / "a"), "/abs/b"]


def test_grid_axes_over_data_options() -> None:
    study = parse_study("name: x\nworkload:\n  data: /d\ngrid:\n  data_workers: [0, 2]\n"
                        "  data_stage: [none, local]\n")
    runs = expand(study)
    assert len(runs) == 4
    got = sorted((run_options(study, r)["data_workers"], run_options(study, r)["data_stage"])
                 for r in runs)
    assert got == [(0, "local"), (0, "none"), (2, "local"), (2, "none")]


@pytest.mark.parametrize(("data", "words"), [
    ("{path: /d, wrkers: 2}", "unknown key(s) wrkers; valid: path, workers"),
    ("{workers: 2}", "needs `path`"),
    ("{path: /d, stage: disk}", "data_stage"),
    ("{path: /d, workers: 99}", "data_workers"),
])
def test_bad_mappings_are_spec_errors(data: str, words: str) -> None:
    with pytest.raises(SpecError) as got:
        parse_study(f"name: x\nworkload:\n  data: {data}\n", "s.yaml")
    message = str(got.value)
    assert message.startswith(("s.yaml:2: workload", "s.yaml:3: workload")), message
    assert words in message and "\n" not in message


def test_one_option_set_twice_is_an_error() -> None:
    with pytest.raises(SpecError, match=r"data\.workers and data_workers set the same option"):
        parse_study("name: x\nworkload:\n  data: {path: /d, workers: 1}\n  data_workers: 2\n")


def test_old_specs_keep_their_run_ids() -> None:
    old = parse_study("name: x\nworkload:\n  model: small_cnn\n")
    assert _data("name: x\nworkload:\n  model: small_cnn\n")["data"] == ""
    # the defaults stay out of a run's identity: a study without data keeps its ids
    assert "data" not in old.workload.model_dump(exclude_defaults=True)


def test_the_schema_takes_the_mapping() -> None:
    data = study_schema()["$defs"]["SyntheticWorkload"]["properties"]["data"]
    forms = data["anyOf"]
    assert forms[0]["type"] == "string"
    assert set(forms[1]["properties"]) == {"path", "workers", "prefetch", "stage", "seed"}


CKPT = "name: x\nworkload:\n  model: small_cnn\n  checkpoint: {checkpoint}\n{rest}"


def _ckpt_args(checkpoint: str, tmp_path: Path, rest: str = "") -> list[str]:
    from scalestudy.site.profiles import load_system
    from scalestudy.site.program import program

    spec = tmp_path / "s.yaml"
    spec.write_text(CKPT.format(checkpoint=checkpoint, rest=rest))
    study = load_study(spec)
    run = expand(study)[0]
    args = list(program(study, load_system("local"), run, tmp_path / "runs" / run.run_id,
                        "python").args)
    return args[args.index("--checkpoint-dir"):] if "--checkpoint-dir" in args else []


def test_checkpoint_settings_reach_the_benchmark_one_directory_per_run(tmp_path: Path
                                                                       ) -> None:
    default = _ckpt_args("{every_steps: 100}", tmp_path)
    assert default[0] == "--checkpoint-dir" and default[2:] == ["--checkpoint-every-steps",
                                                                 "100"]
    assert default[1].endswith("/checkpoint") and "/runs/" in default[1]
    given = _ckpt_args("{every_seconds: 600, path: ck, async: true}", tmp_path)
    assert given[1] == str(tmp_path / "ck" / Path(given[1]).name)  # <path>/<run_id>
    assert Path(given[1]).name != Path(default[1]).parent.name  # settings are in the id
    assert given[2:] == ["--checkpoint-every-seconds", "600.0", "--checkpoint-async"]


@pytest.mark.parametrize(("checkpoint", "rest", "expected"), [
    ("{path: /ck}", "", "workload.checkpoint: give one of every_steps, every_seconds"),
    ("{every_steps: 5, every_seconds: 9}", "", "every_steps and every_seconds both set"),
    ("{every_steps: 0}", "", "workload.checkpoint.every_steps: Input should be greater"),
    ("{every_steps: 5, asynch: true}", "", "workload.checkpoint.asynch"),
    ("{every_steps: 5}", "grid: {backend: [ddp, horovod]}\n",
     "workload.checkpoint: checkpoints are saved with the ddp and fsdp backends, not horovod"),
])
def test_a_wrong_checkpoint_is_one_line_with_its_key(checkpoint: str, rest: str,
                                                     expected: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_study(CKPT.format(checkpoint=checkpoint, rest=rest))
    assert expected in str(info.value) and "\n" not in str(info.value).strip()
