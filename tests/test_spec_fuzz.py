"""Generated and mutated specs: every outcome is a Study or a clean SpecError, never a
traceback, and loading never writes a file."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scalestudy.core.errors import SpecError
from scalestudy.core.grid import expand
from scalestudy.core.load import parse_study
from scalestudy.core.spec import Study

EXAMPLE = yaml.safe_load(
    (Path(__file__).resolve().parents[1] / "studies" / "example.yaml").read_text())
KEYS = ["name", "system", "scaling", "workload", "grid", "exclude", "tuning", "repeats", "job",
        "kind", "model", "nodes", "ranks_per_node", "batch_size", "backend", "env", "command",
        "walltime", "modle", "batchsize", "throughput_regex", "setup", "account", "queue"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 10**6), st.floats(),
                    st.text(max_size=12), st.sampled_from(["local", "weak", "strong",
                                                           "synthetic", "command", "ddp",
                                                           "00:10:00", "{batch_size}"]))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), inner, max_size=4)),
    max_leaves=12)


def outcome(text: str) -> None:
    try:
        study = parse_study(text, "fuzz.yaml")
    except SpecError as exc:
        assert str(exc).strip() and "Traceback" not in str(exc)
        return
    assert isinstance(study, Study)
    with contextlib.suppress(SpecError):
        expand(study)


def mutate(spec: dict, path: list, value: object) -> dict:
    node = spec
    for key in path[:-1]:
        if not isinstance(node, dict) or key not in node:
            return spec
        node = node[key]
    if isinstance(node, dict):
        node[path[-1]] = value
    return spec


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values)
def test_any_yaml_value_is_a_study_or_a_clean_error(value: object) -> None:
    before = set(os.listdir("."))
    outcome(yaml.safe_dump(value))
    assert set(os.listdir(".")) == before


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3), values)
def test_mutated_example_is_a_study_or_a_clean_error(path: list, value: object) -> None:
    import copy

    spec = mutate(copy.deepcopy(EXAMPLE), path, value)
    outcome(yaml.safe_dump(spec))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_is_a_study_or_a_clean_error(text: str) -> None:
    outcome(text)
