"""Every argument and option of every command says what it is in --help, and the words
reach the rendered help (a Click release that drops them fails here, not in a user's
terminal)."""

from __future__ import annotations

import click
import typer
from typer.testing import CliRunner

from scalestudy.cli.app import app


def every_parameter() -> list[tuple[str, click.Parameter]]:
    """(command path, parameter) for every parameter of every command but --help."""
    found: list[tuple[str, click.Parameter]] = []

    def walk(command: click.Command, path: tuple[str, ...]) -> None:
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                walk(sub, (*path, name))
            return
        found.extend((" ".join(path), p) for p in command.params if p.name != "help")

    walk(typer.main.get_command(app), ())
    return found


def test_every_argument_and_option_has_help() -> None:
    params = every_parameter()
    assert len(params) > 100  # the walk reached the commands
    missing = [f"{path} {p.name}" for path, p in params if not (getattr(p, "help", "") or "")]
    assert not missing, f"no help text: {missing}"


def test_an_arguments_help_is_printed() -> None:
    done = CliRunner().invoke(app, ["predict", "--help"], env={"COLUMNS": "200"})
    assert done.exit_code == 0
    assert "measured points: a CSV table" in done.output
    done = CliRunner().invoke(app, ["validate", "--help"], env={"COLUMNS": "200"})
    assert "the study spec (YAML)" in done.output
