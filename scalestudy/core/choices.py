"""The fixed choices of command-line options and spec keys, as enums (light: the CLI
builds its help from them without importing the analysis stack)."""

from __future__ import annotations

from enum import Enum


class Rerun(str, Enum):
    """`run --rerun`: which ended runs to run again."""

    FAILED = "failed"  # failed and lost runs (interrupted ones run again without it)
    ALL = "all"  # every selected run, completed ones too


class Latency(str, Enum):
    """The communication model's latency term."""

    LOG = "log"  # alpha x log2 P (tree)
    RING = "ring"  # alpha x (P - 1)


class Bandwidth(str, Enum):
    """Where the communication model's bandwidth comes from."""

    FIT = "fit"  # fitted to the measured step times
    PROBE = "probe"  # the allreduce probe's busbw


class BaselineKind(str, Enum):
    """`report --baseline` words (a world size, a positive integer, is accepted too)."""

    SMALLEST = "smallest"
    NODE = "node"


def parse_baseline(text: str) -> str | int:
    """`smallest`, `node` or a world size (a positive integer) -> a baseline choice;
    ValueError that names the forms otherwise."""
    words = [b.value for b in BaselineKind]
    if text in words:
        return text
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise ValueError(f"{text!r}: use {', '.join(words)} or a world size (e.g. 8)")
