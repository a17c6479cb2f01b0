"""The option table: flags, applicability, checks."""

from __future__ import annotations

from scalestudy.workload.__main__ import parse_args
from scalestudy.workload.options import DEFAULTS, OPTIONS, applicable, to_args


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
                      float: 12.5, str: "/datasets/tokens"}.get(option.kind)
                     if option.choices is None else option.choices[-1])
            if option.name == "zero_stage":
                value = 3
            args = parse_args(["--backend", backend,
                               *to_args({**DEFAULTS, option.name: value}, backend)])
            assert getattr(args, option.name) == value, option.name
