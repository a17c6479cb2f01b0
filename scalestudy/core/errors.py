"""The exception family, and how a Pydantic validation error becomes one line per problem.

Every error a user can cause is a `ScalestudyError`: the CLI prints its message on
stderr and exits non-zero, without a traceback. Messages say what is wrong, where
(file, key path, line) and how to fix it.
"""

from __future__ import annotations

import difflib
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

Loc = tuple[str | int, ...]

# Friendly words for the patterns names must follow (see core.spec).
PATTERN_HELP = {
    r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$":
        "names use letters, digits, `.`, `_` and `-`, start with a letter or digit, "
        "and have at most 64 characters",
    r"^[A-Za-z_][A-Za-z0-9_]*$":
        "environment variable names use letters, digits and `_` and do not start with a digit",
}


class ScalestudyError(Exception):
    """An error the user can fix; its message is shown as is (`exit_code`: 2 unless said
    otherwise, for this error or its class)."""

    exit_code: int = 2

    def __init__(self, *args: object, exit_code: int | None = None) -> None:
        super().__init__(*args)
        if exit_code is not None:
            self.exit_code = exit_code


class SpecError(ScalestudyError):
    """A study spec (or a file it names) is invalid."""


class RunFailed(ScalestudyError):
    """One or more runs of a study failed; the others went on."""

    exit_code = 1


class SubmitError(ScalestudyError):
    """A scheduler command failed or printed something we cannot read."""

    exit_code = 1


class ReferenceFailed(ScalestudyError):
    """`report --check`: a reference check failed (exit code 1, for CI)."""

    exit_code = 1


class RegressionFound(ScalestudyError):
    """`history check`: a point's throughput regressed significantly (exit code 1)."""

    exit_code = 1


class Interrupted(ScalestudyError):
    """The user pressed Ctrl-C (SIGINT) or the process got SIGTERM; the message says
    what was kept. Exit code 130, as a shell reports a SIGINT."""

    exit_code = 130


def format_loc(loc: Sequence[str | int]) -> str:
    """`("grid", "nodes", 2)` -> `grid.nodes[2]`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def where(source: str | Path, loc: Sequence[str | int], lines: Mapping[Loc, int]) -> str:
    """`file:line: key.path` (the line only when it is known)."""
    line = lines.get(tuple(loc))
    if line is None:
        # An error on a missing key points at its parent mapping, when that is known.
        for cut in range(len(loc) - 1, 0, -1):
            if tuple(loc[:cut]) in lines:
                line = lines[tuple(loc[:cut])]
                break
    prefix = f"{source}:{line}" if line is not None else str(source)
    # a problem of the whole file (a model's own check) says its keys itself
    return f"{prefix}: {format_loc(loc)}" if loc else prefix


def _models_in(annotation: object) -> list[type[BaseModel]]:
    """The Pydantic models an annotation can hold (through Optional, Union, list, dict)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models_in(typing.get_args(annotation)[0])
    found: list[type[BaseModel]] = []
    if origin in (typing.Union, types.UnionType, list, tuple, dict):
        for arg in typing.get_args(annotation):
            found.extend(_models_in(arg))
    return found


def _model_at(root: type[BaseModel], loc: Sequence[str | int]) -> type[BaseModel] | None:
    """Walk an error location down the model tree; None when it leaves the models."""
    candidates: list[type[BaseModel]] = [root]
    for part in loc:
        if isinstance(part, int):
            continue
        nxt: list[type[BaseModel]] = []
        for model in candidates:
            field = model.model_fields.get(part)
            if field is not None:
                nxt.extend(_models_in(field.annotation))
        if not nxt:
            # A discriminated union's tag appears in the location: keep the matching model.
            tagged = [m for m in candidates if _tag_of(m) == part]
            if tagged:
                candidates = tagged
                continue
            # dict values: the key is user data (a tuning name); keep walking the same models.
            if any(typing.get_origin(f.annotation) is dict for m in candidates
                   for f in m.model_fields.values()):
                continue
            return None
        candidates = nxt
    return candidates[0] if len(candidates) == 1 else None


def _tag_of(model: type[BaseModel]) -> str | None:
    field = model.model_fields.get("kind")
    if field is None:
        return None
    args = typing.get_args(field.annotation)
    return str(args[0]) if args else None


def suggest(word: str, choices: Sequence[str]) -> str:
    """` (did you mean `x`?)` for a near miss, else the list of valid choices."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    if close:
        return f"did you mean `{close[0]}`?"
    return "valid keys: " + ", ".join(sorted(choices))


def _strip_union_tag(root: type[BaseModel], loc: Loc) -> Loc:
    """Drop a discriminated union's tag (`workload.synthetic.model` -> `workload.model`)."""
    out: list[str | int] = []
    for i, part in enumerate(loc):
        model = _model_at(root, loc[:i]) if i else root
        if isinstance(part, str) and model is None and i > 0:
            parent = _model_at(root, loc[: i - 1]) if i > 1 else root
            field = parent.model_fields.get(str(loc[i - 1])) if parent else None
            if field is not None and any(_tag_of(m) == part for m in _models_in(field.annotation)):
                continue
        out.append(part)
    return tuple(out)


def validation_messages(
    err: ValidationError | Sequence[ErrorDetails], root: type[BaseModel], source: str | Path,
    lines: Mapping[Loc, int]
) -> list[str]:
    """One line per problem: `file:line: key.path: what is wrong (how to fix)` (`err`: a
    ValidationError, or its errors with their locations moved under `root`)."""
    messages = []
    errors = err.errors(include_url=False) if isinstance(err, ValidationError) else err
    for e in errors:
        loc: Loc = tuple(e["loc"])
        shown = _strip_union_tag(root, loc)
        msg = e["msg"]
        if shown and shown[-1] == "[key]":
            shown = shown[:-1]
        if e["type"] == "string_pattern_mismatch":
            pattern = (e.get("ctx") or {}).get("pattern", "")
            msg = PATTERN_HELP.get(pattern, msg) + f", got {e.get('input')!r}"
        elif e["type"] == "extra_forbidden":
            model = _model_at(root, loc[:-1])
            names = list(model.model_fields) if model is not None else []
            hint = f" ({suggest(str(loc[-1]), names)})" if names else ""
            msg = f"unknown key{hint}"
        elif e["type"] == "missing":
            msg = "required key is missing"
        elif e["type"] == "union_tag_invalid":
            ctx = e.get("ctx") or {}
            msg = (f"unknown kind {ctx.get('tag')!r}; valid kinds: "
                   f"{ctx.get('expected_tags')}")
            shown = (*shown, "kind")
        elif e["type"] == "union_tag_not_found":
            msg = "needs a `kind` key (synthetic or command)"
        elif msg.startswith("Value error, "):
            msg = msg.removeprefix("Value error, ")
        elif isinstance(e.get("input"), (str, int, float, bool)) and "got" not in msg:
            msg = f"{msg}, got {e.get('input')!r}"  # wrong type, range or choice
        messages.append(f"{where(source, shown, lines)}: {msg}")
    return messages


_NOTED: set[str] = set()


def note_once(line: str) -> None:
    """Print a note (an old form still read, a key left unused) on stderr, once in this
    process however often the file that earns it is read."""
    if line not in _NOTED:
        _NOTED.add(line)
        print(line, file=sys.stderr)
