"""Study specs: valid ones load; every broken one gives `file:line: key: what (fix)`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from scalestudy.core.errors import SpecError
from scalestudy.core.load import load_study, parse_study, study_schema
from scalestudy.core.spec import MODEL_NAMES, CommandWorkload, walltime_seconds
from scalestudy.site.plan import optional_backend_missing
from scalestudy.study import make_plan

ROOT = Path(__file__).resolve().parents[1]
BROKEN = sorted((ROOT / "tests" / "specs" / "broken").glob("*.yaml"))


def expectation(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: ")
    return first.removeprefix("# expect: ").replace("{file}", str(path))


@pytest.mark.parametrize("path", BROKEN, ids=[p.stem for p in BROKEN])
def test_broken_spec_gives_located_message(path: Path, tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        make_plan(path, tmp_path / "results")
    assert expectation(path) in str(info.value)
    assert not (tmp_path / "results").exists()


def need_backends(path: Path) -> None:
    """A shipped study that runs an optional backend here (system local) needs it: skip
    with the reason where it is not installed, fail where CI requires it."""
    study = load_study(path)
    if study.system != "local":
        return
    for backend in study.grid.backend:
        hint = optional_backend_missing(backend)
        if hint is None:
            continue
        if os.environ.get(f"SCALESTUDY_REQUIRE_{backend.upper()}") == "1":
            pytest.fail(f"{path.name} runs {backend}, which is not installed although "
                        f"SCALESTUDY_REQUIRE_{backend.upper()}=1")
        pytest.skip(f"{path.name} runs {backend}, which this Python cannot import: {hint}")


@pytest.mark.parametrize("path", sorted((ROOT / "studies").glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_example_studies_load_and_carry_schema_line(path: Path) -> None:
    need_backends(path)
    plan = make_plan(path)
    assert plan.runs
    first = path.read_text().splitlines()[0]
    assert first == "# yaml-language-server: $schema=../schema/study.schema.json"


def test_committed_schema_is_current() -> None:
    committed = json.loads((ROOT / "schema" / "study.schema.json").read_text())
    assert committed == json.loads(json.dumps(study_schema()))


def test_defaults_fill_a_minimal_spec() -> None:
    study = parse_study("name: tiny\n")
    assert study.system == "local" and study.scaling == "weak"
    assert study.workload.kind == "synthetic" and study.workload.model == "resnet50"
    assert study.grid.nodes == [1] and study.repeats == 1


def test_scalar_axis_is_a_one_value_list() -> None:
    study = parse_study("name: s\ngrid: {nodes: 4, batch_size: 16}\n")
    assert study.grid.nodes == [4] and study.grid.batch_size == [16]


def test_repeated_axis_value_is_rejected() -> None:
    with pytest.raises(SpecError, match=r"grid.nodes: repeated value\(s\) 2"):
        parse_study("name: s\ngrid: {nodes: [1, 2, 2]}\n", "s.yaml")


def test_several_problems_are_all_reported_one_per_line() -> None:
    with pytest.raises(SpecError) as info:
        parse_study("name: s\nrepeats: 0\ngrid: {nodez: [1]}\n", "s.yaml")
    lines = str(info.value).splitlines()
    assert len(lines) == 2
    assert "s.yaml:2: repeats: Input should be greater than or equal to 1, got 0" in lines
    assert "s.yaml:3: grid.nodez: unknown key (did you mean `nodes`?)" in lines


def test_command_string_is_split_like_a_shell() -> None:
    w = CommandWorkload(kind="command", command="python train.py --name 'a b' --bs {batch_size}")
    assert w.command == ["python", "train.py", "--name", "a b", "--bs", "{batch_size}"]


def test_missing_file_is_a_clean_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such file"):
        load_study(tmp_path / "nope.yaml")


@pytest.mark.parametrize(("text", "seconds"), [("00:30:00", 1800), ("1-00:00:01", 86401),
                                                ("100:00:00", 360000)])
def test_walltime_formats(text: str, seconds: int) -> None:
    assert walltime_seconds(text) == seconds


def test_model_names_match_the_workload_registry() -> None:
    from scalestudy.workload.models import MODELS

    assert tuple(MODEL_NAMES) == tuple(MODELS)


def test_each_workload_kind_answers_for_itself() -> None:
    from scalestudy.core.spec import SyntheticWorkload

    bundled = SyntheticWorkload(model="small_cnn")
    command = CommandWorkload(kind="command", command="train --lr {lr} --bs {batch_size}")
    assert bundled.bundled and not command.bundled
    assert bundled.placeholders() == set() and command.placeholders() == {"lr", "batch_size"}
    assert bundled.run_fields()["model"] == "small_cnn" and command.run_fields()["model"] is None
    assert command.option_values() == {} and bundled.option_values()["precision"]
    assert command.data_parallel("ddp", 8, 32, {}) == 8


def test_a_workload_option_no_backend_of_the_grid_reads_is_an_error() -> None:
    """zero_stage without deepspeed would change every run id and mean nothing."""
    with pytest.raises(SpecError, match=r"s.yaml:2: workload.zero_stage: zero_stage applies to "
                       r"the deepspeed backend, which grid.backend \(ddp\) does not run"):
        parse_study("name: s\nworkload: {zero_stage: 2}\n", Path("s.yaml"))
    assert parse_study("name: s\nworkload: {zero_stage: 2}\ngrid: {backend: [deepspeed]}\n",
                       Path("s.yaml")).workload.zero_stage == 2
    assert parse_study("name: s\nworkload: {zero_stage: 0}\n", Path("s.yaml"))  # the default
