"""The report as a list of blocks (headings, paragraphs, lists, tables, images), written
the same way as Markdown and as one self-contained HTML page (a Jinja template,
autoescaped, images inlined as data URIs)."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import jinja2

from scalestudy.report.tables import markdown_table

#: (kind, value): h1/h2/h3 text, note/p text, headline [lines], ul [items],
#: table (headers, rows), img (file, title).
Block = tuple[str, Any]


@dataclass(frozen=True)
class Link:
    """A list item that links a file: `label` to `target`, then `text`."""

    label: str
    target: str
    text: str = ""


def markdown(blocks: list[Block]) -> str:
    """The blocks as Markdown (images as links to the PNG files next to it)."""
    out = []
    for kind, value in blocks:
        if kind in ("h1", "h2", "h3"):
            out.append("#" * int(kind[1]) + " " + value)
        elif kind == "note":
            out.append(f"_{value}_" if value.startswith("Generated") else value)
        elif kind == "p":
            out.append(value)
        elif kind == "headline":
            # a hard line break (two spaces) keeps the headline's three lines apart
            out.append("  \n".join(f"> **{line}**" if i == 0 else f"> {line}"
                                   for i, line in enumerate(value)))
        elif kind == "ul":
            out.append("\n".join(f"- [{i.label}]({i.target}){i.text}" if isinstance(i, Link)
                                 else f"- {i}" for i in value))
        elif kind == "table":
            out.append(markdown_table(*value))
        elif kind == "img":
            out.append(f"![{value[1]}]({value[0]})")
        out.append("")
    return "\n".join(out)


@lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("scalestudy.report", "templates"),
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
        lstrip_blocks=True)
    env.tests["link"] = lambda item: isinstance(item, Link)
    return env.get_template("report.html.j2")


def html_page(blocks: list[Block], title: str, caption: str, images: dict[str, bytes]) -> str:
    """The blocks as one self-contained HTML page (PNG images inlined as data URIs)."""
    inlined = {name: base64.b64encode(data).decode("ascii") for name, data in images.items()}
    return _template().render(blocks=blocks, title=title, caption=caption, images=inlined)
