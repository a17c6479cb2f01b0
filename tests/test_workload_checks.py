"""workload/checks.py: the benchmark's flags that span several options answer one line
and exit status 2 before torch loads (the checkpoint flags here; the target's in
test_workload_main.py)."""

from __future__ import annotations

import pytest

from scalestudy.workload.__main__ import parse_args


@pytest.mark.parametrize(("argv", "expected"), [
    (["--checkpoint-every-steps", "5"], "--checkpoint-every-steps needs --checkpoint-dir"),
    (["--checkpoint-dir", "ck"], "needs one of --checkpoint-every-steps, "
                                 "--checkpoint-every-seconds"),
    (["--checkpoint-dir", "ck", "--checkpoint-every-steps", "5",
      "--checkpoint-every-seconds", "9"], "not both"),
    (["--checkpoint-dir", "ck", "--checkpoint-every-steps", "5", "--backend", "horovod"],
     "checkpoints are saved with the ddp and fsdp backends, not horovod"),
    (["--checkpoint-dir", "ck", "--checkpoint-every-steps", "5", "--model", "gpt-tiny",
      "--tp", "2"], "data-parallel runs only (--tp 1 --pp 1)"),
    (["--checkpoint-dir", "ck", "--checkpoint-every-steps", "0"], "must be >= 1, got 0"),
])
def test_a_wrong_checkpoint_flag_is_one_line_and_exit_2(
        argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse_args(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and expected in err and err.count("\n") == 1


def test_checkpoint_flags_become_the_settings() -> None:
    from scalestudy.workload.checkpoint import checkpoint_settings

    args = parse_args(["--checkpoint-dir", "ck", "--checkpoint-every-seconds", "30",
                       "--checkpoint-async"])
    settings = checkpoint_settings(args)
    assert settings is not None and settings.directory.is_absolute()
    assert (settings.every_steps, settings.every_seconds, settings.asynchronous) == (
        None, 30.0, True)
    assert checkpoint_settings(parse_args([])) is None
