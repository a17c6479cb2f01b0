"""The option table: flags, applicability, checks."""

from __future__ import annotations

import pytest

from scalestudy.workload.__main__ import parse_args
from scalestudy.workload.options import BY_NAME, DEFAULTS, OPTIONS, applicable, to_args


def test_only_non_defaults_become_arguments_and_only_for_their_backend() -> None:
    values = {**DEFAULTS, "bucket_cap_mb": 50.0, "compression": "fp16", "channels_last": True,
              "diagnostics": False}
    assert to_args(values, "ddp") == ["--channels-last", "--bucket-cap-mb", "50.0",
                                      "--no-diagnostics"]
    assert to_args(values, "horovod") == ["--channels-last", "--compression", "fp16",
                                          "--no-diagnostics"]
    assert "zero_stage" in applicable(values, "deepspeed")
    assert "zero_stage" not in applicable(values, "ddp")


def test_every_option_round_trips_through_the_workload_command_line() -> None:
    for option in OPTIONS:
        for backend in option.backends:
            value = ({bool: not option.default, int: 1 if option.default != 1 else 2,
                      float: 12.5}.get(option.kind)
                     if option.choices is None else option.choices[-1])
            if option.name == "zero_stage":
                value = 3
            args = parse_args(["--backend", backend,
                               *to_args({**DEFAULTS, option.name: value}, backend)])
            assert getattr(args, option.name) == value, option.name


@pytest.mark.parametrize(("name", "value", "message"), [
    ("zero_stage", 4, "above the maximum"),
    ("bucket_cap_mb", 0, "below the minimum"),
    ("comm_hook", "int8", "not one of"),
    ("channels_last", 1, "not a bool"),
    ("bucket_cap_mb", float("nan"), "not a finite number"),
])
def test_check_says_what_is_wrong(name: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BY_NAME[name].check(value)
