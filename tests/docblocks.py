"""The code blocks of a docs page as a reader copies them: each fenced block with its
language, the heading it sits under, and the `<!-- run: here -->` marker that asks
tests/test_docs_commands.py to run it; the commands a shell block holds."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

#: A fenced block, at any indentation (a block inside a list item is indented).
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)"
                   r"^(?P=indent)```[ \t]*$", re.M | re.S)
#: `<!-- run: here -->`, or with files put in place first:
#: `<!-- run: here; with NAME=REPO_PATH NAME=REPO_PATH -->`.
MARKER = re.compile(r"<!--\s*run:\s*here\s*(?:;\s*with\s+(?P<files>[^>]*?))?\s*-->")
HEADING = re.compile(r"^#{1,6} .*$", re.M)
SHELLS = ("sh", "bash", "shell", "console")


@dataclass(frozen=True)
class Command:
    """One command line of a block, and the output the page shows after it."""

    line: int  # in the page, 1-based
    text: str
    shown: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Block:
    """A fenced code block of a page."""

    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    body: str  # without the block's indentation
    heading: str  # the nearest heading above it, '' at the top
    run: bool  # marked `<!-- run: here -->` on the lines just above
    files: dict[str, str]  # NAME (in the run's directory) -> a path in the repository

    def where(self) -> str:
        return f"{self.page.name}:{self.line}"


def blocks(page: Path, text: str | None = None) -> list[Block]:
    """Every fenced block of a page (its text read when not given), in order."""
    text = page.read_text(encoding="utf-8") if text is None else text
    headings = [(m.start(), m.group(0)) for m in HEADING.finditer(text)]
    found = []
    for m in FENCE.finditer(text):
        before = text[:m.start()].rstrip().rsplit("\n", 1)[-1].strip()
        marker = MARKER.fullmatch(before)
        files = dict(pair.split("=", 1) for pair in (marker.group("files") or "").split()
                     ) if marker else {}
        heading = [h for start, h in headings if start < m.start()]
        found.append(Block(page, text.count("\n", 0, m.start()) + 1, m.group("lang"),
                           textwrap.dedent(m.group("body")), heading[-1] if heading else "",
                           marker is not None, files))
    return found


def commands(block: Block) -> list[Command]:
    """A shell block's commands: every line of a `sh` block (a trailing `\\` joins the
    next; blank and `#` lines skipped), or a `console` block's `$ ` lines, each with the
    lines after it that show its output."""
    found: list[Command] = []
    pending, start = "", 0
    for n, raw in enumerate(block.body.splitlines(), start=block.line + 1):
        line = raw.rstrip()
        if block.lang == "console":
            if line.startswith("$ "):
                found.append(Command(n, line[2:]))
            elif found and line.strip():
                found[-1].shown.append(line)
            continue
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        start = start if pending else n
        pending = " ".join(filter(None, (pending, line.removesuffix("\\").strip())))
        if not line.endswith("\\"):
            found.append(Command(start, pending))
            pending = ""
    return found
