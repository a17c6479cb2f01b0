"""The report as a list of blocks (headings, paragraphs, lists, tables, images), written
the same way as Markdown and as one self-contained HTML page (a Jinja template,
autoescaped, images inlined as data URIs)."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import jinja2

from scalestudy.report.tables import markdown_table


@dataclass(frozen=True)
class Link:
    """A list item that links a file: `label` to `target`, then `text`."""

    label: str
    target: str
    text: str = ""


@dataclass(frozen=True)
class Heading:
    """A section heading, level 1 (the title) to 3."""

    text: str
    level: int = 2


@dataclass(frozen=True)
class Note:
    """A paragraph of small print (definitions, methods, what a table means)."""

    text: str


@dataclass(frozen=True)
class Para:
    """A paragraph."""

    text: str


@dataclass(frozen=True)
class Headline:
    """The findings' first lines, set apart."""

    lines: list[str]


@dataclass(frozen=True)
class Items:
    """A bulleted list of sentences or links."""

    items: Sequence[str | Link]


@dataclass(frozen=True)
class Table:
    """A table: its headers and its rows of cells (text)."""

    headers: list[str]
    rows: list[list[str]]

    @classmethod
    def of(cls, cells: tuple[list[str], list[list[str]]]) -> Table:
        """From the (headers, rows) pair the table builders return."""
        return cls(*cells)


@dataclass(frozen=True)
class Image:
    """A plot: its PNG file next to the page, and its title."""

    file: str
    title: str


Block = Heading | Note | Para | Headline | Items | Table | Image
_KINDS = (Link, Heading, Note, Para, Headline, Items, Table, Image)


def markdown(blocks: list[Block]) -> str:
    """The blocks as Markdown (images as links to the PNG files next to it)."""
    out = []
    for block in blocks:
        if isinstance(block, Heading):
            out.append("#" * block.level + " " + block.text)
        elif isinstance(block, Note):
            out.append(f"_{block.text}_" if block.text.startswith("Generated") else block.text)
        elif isinstance(block, Para):
            out.append(block.text)
        elif isinstance(block, Headline):
            # a hard line break (two spaces) keeps the headline's three lines apart
            out.append("  \n".join(f"> **{line}**" if i == 0 else f"> {line}"
                                   for i, line in enumerate(block.lines)))
        elif isinstance(block, Items):
            out.append("\n".join(f"- [{i.label}]({i.target}){i.text}" if isinstance(i, Link)
                                 else f"- {i}" for i in block.items))
        elif isinstance(block, Table):
            out.append(markdown_table(block.headers, block.rows))
        else:
            out.append(f"![{block.title}]({block.file})")
        out.append("")
    return "\n".join(out)


@lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("scalestudy.report", "templates"),
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
        lstrip_blocks=True)
    for kind in _KINDS:  # `block is table`: the template asks the block's type
        env.tests[kind.__name__.lower()] = lambda item, kind=kind: isinstance(item, kind)
    return env.get_template("report.html.j2")


def html_page(blocks: list[Block], title: str, caption: str, images: dict[str, bytes]) -> str:
    """The blocks as one self-contained HTML page (PNG images inlined as data URIs)."""
    inlined = {name: base64.b64encode(data).decode("ascii") for name, data in images.items()}
    return _template().render(blocks=blocks, title=title, caption=caption, images=inlined)
