"""The docs say what the code does: the reference pages are what dev/gen_reference.py
makes of the CLI and the spec's schema today, and every `scalestudy` command and option
that README.md or a page under docs/ names exists."""

from __future__ import annotations

import importlib.util
import re
from functools import cache
from pathlib import Path
from types import ModuleType

import click
import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP = ("validate", "plan", "run", "status", "cancel", "collect", "report", "predict",
       "compare", "probe", "history", "schema", "systems")


@cache
def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference",
                                                  ROOT / "dev" / "gen_reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_reference_pages_are_what_the_code_says() -> None:
    for path, text in generator().pages().items():
        assert path.read_text(encoding="utf-8") == text, (
            f"{path.relative_to(ROOT)} is out of date: run .venv/bin/python "
            "dev/gen_reference.py")


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def mentions(text: str) -> list[str]:
    """Command lines the text writes: `scalestudy ...` in inline code, commands in code
    blocks (a line or a part of one after `&&`, `|`, `;` that starts with the command),
    and inline code that starts with a command name and gives an option (`run --pack`)."""
    spans = re.findall(r"`([^`\n]+)`", text)
    fenced = [line for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)
              for line in block.splitlines()]
    indented = re.findall(r"^(?: {4}|\t)(.*)$", text, flags=re.M)
    found = []
    blocks = [line for line in fenced + indented  # a tree's notes are indented deeper
              if len(line) - len(line.lstrip()) <= 8]
    for code, inline in [(c, True) for c in spans] + [(c, False) for c in blocks]:
        for part in re.split(r"\s*(?:&&|\|\||;|\||#|\$\()\s*", code.replace("\\|", "/")):
            words = part.split()
            if words and words[0] == "$":
                words = words[1:]
            if words and words[0].rsplit("/", 1)[-1] == "scalestudy":
                found.append(" ".join(words[1:]))
            elif inline and "scalestudy" in words:
                found.append(" ".join(words[words.index("scalestudy") + 1:]))
            elif inline and words and words[0] in TOP and any(w.startswith("--") for w in words):
                found.append(" ".join(words))
    return found


@cache
def tree() -> click.Group:
    import typer

    from scalestudy.cli import app

    group = typer.main.get_command(app)
    assert isinstance(group, click.Group)
    return group


def resolve(words: list[str]) -> tuple[click.Command, list[str]]:
    """The command a line names and the words after its path."""
    command: click.Command = tree()
    ctx = click.Context(command)
    while words and isinstance(command, click.Group):
        sub = command.get_command(ctx, words[0])
        if sub is None:
            break
        command, words = sub, words[1:]
    return command, words


def options(command: click.Command) -> set[str]:
    names = {"--help"} | ({"--version"} if command is tree() else set())
    for p in command.params:
        if isinstance(p, click.Option):
            names.update(o for o in (*p.opts, *p.secondary_opts) if o.startswith("--"))
    return names


@pytest.mark.parametrize("document", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_and_option_the_docs_name_exists(document: Path) -> None:
    wrong = []
    for line in mentions(document.read_text(encoding="utf-8")):
        words = [w.strip("[]()`,.") for w in line.split()]
        if not words or not re.fullmatch(r"[a-z][a-z-]*|--[a-z].*", words[0]):
            continue  # `scalestudy` as a word in prose, a module path
        command, rest = resolve(words)
        if command is tree() and not words[0].startswith("--"):
            wrong.append(f"{line!r}: no command {words[0]!r}")
            continue
        for word in rest:
            flag = word.split("=", 1)[0]
            if re.fullmatch(r"--[a-z][a-z-]*", flag) and flag not in options(command):
                wrong.append(f"{line!r}: `{command.name}` has no option {flag}")
    assert not wrong, "\n".join(wrong)


def test_the_check_finds_a_command_or_an_option_that_does_not_exist() -> None:
    text = "Run `scalestudy run study.yaml --fast` or `scalestudy frobnicate`, `plan --nope`."
    lines = mentions(text)
    assert lines == ["run study.yaml --fast", "frobnicate", "plan --nope"]
    command, rest = resolve(["history", "nodes", "--write-exclude", "x"])
    assert rest == ["--write-exclude", "x"] and command.name == "nodes"
    assert "--write-exclude" in options(command)
    assert "--fast" not in options(resolve(["run"])[0])
