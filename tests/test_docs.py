"""The docs say what the code does: the reference pages are what dev/gen_reference.py
makes of the CLI and the spec's schema today, and every `scalestudy` command and option
that README.md or a page under docs/ names exists; docs/commands.md has a line for every
command and no option list of its own. The site renders as written: no list
shows as a paragraph with literal markers, every page's table of contents lists its
sections, and no page outside the generated reference runs past 300 lines."""

from __future__ import annotations

import html
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from functools import cache
from html.parser import HTMLParser
from pathlib import Path
from types import ModuleType

import click
import pytest

from tests.docblocks import blocks

ROOT = Path(__file__).resolve().parents[1]


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
            elif inline and words and words[0] in top() and any(w.startswith("--") for w in words):
                found.append(" ".join(words))
    return found


@cache
def tree() -> click.Group:
    import typer

    from scalestudy.cli import app

    group = typer.main.get_command(app)
    assert isinstance(group, click.Group)
    return group


def top() -> list[str]:
    """The names of the top-level commands."""
    return tree().list_commands(click.Context(tree()))


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


#: A line of docs/commands.md: a link to a command's section of the CLI reference.
OVERVIEW_LINK = re.compile(r"\]\(reference/cli\.md#scalestudy-([a-z0-9-]+)\)")


def overview_gaps(text: str, paths: list[tuple[str, ...]]) -> list[str]:
    """What docs/commands.md gets wrong about the commands at `paths`: a command without
    its line (a link to its reference section), a link to a command that does not exist,
    and options or usage of its own, which belong to the generated reference."""
    anchors = {"-".join(path): " ".join(path) for path in paths}
    linked = set(OVERVIEW_LINK.findall(text))
    wrong = [f"no line for `scalestudy {name}`" for anchor, name in anchors.items()
             if anchor not in linked]
    wrong += [f"a line for `scalestudy {a.replace('-', ' ')}`, which does not exist"
              for a in sorted(linked - set(anchors))]
    if re.search(r"^\|.*\|$|^ {4}scalestudy ", text, flags=re.M):
        wrong.append("an option table or a usage line: those are the CLI reference's")
    return wrong


def test_the_commands_page_has_a_line_for_every_command_and_no_other() -> None:
    paths = [path for path, command in generator().commands()
             if not isinstance(command, click.Group) or command.invoke_without_command]
    assert ("history", "check") in paths and ("dataset",) not in paths  # a group of commands
    text = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    assert overview_gaps(text, paths) == []
    gone = text.replace("(reference/cli.md#scalestudy-history-check)", "(gate.md)")
    assert overview_gaps(gone + "[`x`](reference/cli.md#scalestudy-frob)\n", paths) == [
        "no line for `scalestudy history check`", "a line for `scalestudy frob`, which "
        "does not exist"]


MAX_LINES = 300
KNOWN_LONG: set[str] = set()  # pages allowed over MAX_LINES (none now)


def test_no_page_outside_the_reference_is_over_300_lines() -> None:
    docs = ROOT / "docs"
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines())
             for p in sorted(docs.glob("*.md"))}
    long = [f"docs/{name}: {n} lines" for name, n in sizes.items()
            if n > MAX_LINES and name not in KNOWN_LONG]
    assert not long, (f"over {MAX_LINES} lines (split it by what a reader comes for):\n"
                      + "\n".join(long))
    short = sorted(name for name in KNOWN_LONG if sizes.get(name, 0) <= MAX_LINES)
    assert not short, f"no longer over {MAX_LINES} lines: drop {short} from KNOWN_LONG"


#: A page of this site named as a code-formatted path (`docs/x.md`), not linked.
CODE_PATH = re.compile(r"`(?:docs/)?([a-z0-9_-]+\.md)(#[a-z0-9-]+)?`")


def unlinked_pages(text: str, pages: set[str]) -> list[str]:
    """The pages a text names as code-formatted paths outside its code blocks."""
    found, inside = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
        elif not inside:
            found += [m.group(0) for m in CODE_PATH.finditer(line) if m.group(1) in pages]
    return found


def test_pages_link_the_pages_they_name() -> None:
    docs = ROOT / "docs"
    pages = {p.name for p in docs.glob("*.md")} - {"index.md"}  # index.md: the README
    assert unlinked_pages("see `docs/spec.md` and [x](spec.md)\n```\n`spec.md`\n```",
                          pages) == ["`docs/spec.md`"]
    named = {f"docs/{p.name}": unlinked_pages(p.read_text(encoding="utf-8"), pages)
             for p in sorted(docs.glob("*.md")) if not p.is_symlink()}
    named = {k: v for k, v in named.items() if v}
    assert not named, f"link these pages, not their paths: {named}"


class Page(HTMLParser):
    """What a rendered page shows: each paragraph's text, the ids of its H2s and the
    anchors its right-hand table of contents (Material's secondary nav) links to."""

    def __init__(self) -> None:
        super().__init__()
        self.paragraphs: list[str] = []
        self.h2: list[str] = []
        self.toc: set[str] = set()
        self._p: list[str] | None = None
        self._navs: list[bool] = []  # open <nav>s: whether each is a table of contents

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "nav":
            self._navs.append("md-nav--secondary" in (a.get("class") or ""))
        elif tag == "a" and any(self._navs) and (a.get("href") or "").startswith("#"):
            self.toc.add((a["href"] or "")[1:])
        elif tag == "h2" and a.get("id"):
            self.h2.append(a["id"] or "")
        elif tag == "p":
            self._p = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "nav" and self._navs:
            self._navs.pop()
        elif tag == "p" and self._p is not None:
            self.paragraphs.append("".join(self._p))
            self._p = None

    def handle_data(self, data: str) -> None:
        if self._p is not None:
            self._p.append(data)


MARKER = re.compile(r"^\s*(?:[-*+]|\d+\.) \S")


def problems(html: str) -> list[str]:
    """A rendered page's defects: a paragraph with a line that starts with a list marker
    (a list written right under a paragraph line, which Python-Markdown leaves as text),
    and an H2 that the table of contents leaves out (empty, or hidden under a second H1)."""
    page = Page()
    page.feed(html)
    found = [f"a list rendered as a paragraph: {line.strip()[:70]!r}"
             for text in page.paragraphs for line in text.splitlines() if MARKER.match(line)]
    missing = [h for h in page.h2 if h not in page.toc]
    if missing:
        found.append(f"table of contents lacks {len(missing)} of {len(page.h2)} sections "
                     f"(first: #{missing[0]}); is there a second H1?")
    return found


def test_the_render_check_finds_a_literal_list_and_a_hidden_section() -> None:
    toc = ('<nav class="md-nav md-nav--secondary"><ul><li><a href="#a">A</a></li></ul></nav>'
           '<nav class="md-nav"><a href="#b">B</a></nav>')
    good = toc + '<h1 id="t">T</h1><h2 id="a">A</h2><p>Text, with - a dash.</p><ul><li>x</li></ul>'
    assert problems(good) == []
    bad = toc + ('<h2 id="a">A</h2><h1 id="u">U</h1><h2 id="b">B</h2>'
                 "<p>Checked like runs:\n- <strong>One</strong> thing\n1. another</p>")
    assert problems(bad) == [
        "a list rendered as a paragraph: '- One thing'",
        "a list rendered as a paragraph: '1. another'",
        "table of contents lacks 1 of 2 sections (first: #b); is there a second H1?"]


def unrendered_blocks(page: Path, text: str, rendered: str) -> list[str]:
    """The fenced blocks of a page's Markdown that its HTML does not show as code blocks
    (a fence inside a list item, without superfences, becomes inline code in a
    paragraph): each block's first line must be in one of the page's <pre>s."""
    pres = [html.unescape(re.sub(r"<[^>]+>", "", pre))
            for pre in re.findall(r"<pre\b.*?</pre>", rendered, flags=re.S)]
    return [f"{block.where()}: a ```{block.lang} block is not rendered as a block"
            for block in blocks(page, text) if block.body.strip()
            and not any(block.body.strip().splitlines()[0] in pre for pre in pres)]


def test_the_render_check_finds_a_fence_rendered_inline() -> None:
    text = "1. Step:\n\n    ```sh\n    scalestudy plan s.yaml\n    ```\n"
    inline = "<ol><li><p>Step:</p><p><code>sh\nscalestudy plan s.yaml</code></p></li></ol>"
    block = ('<div class="highlight"><pre><span></span><code>scalestudy<span> </span>'
             "plan s.yaml\n</code></pre></div>")
    assert unrendered_blocks(Path("p.md"), text, block) == []
    assert unrendered_blocks(Path("p.md"), text, inline) == [
        "p.md:3: a ```sh block is not rendered as a block"]


@pytest.mark.slow
def test_the_site_builds_and_renders_lists_and_tables_of_contents(tmp_path: Path) -> None:
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    if mkdocs is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[docs]')")
    site = tmp_path / "site"
    done = subprocess.run([mkdocs, "build", "--strict", "-q", "-d", str(site)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    wrong = [f"{page.relative_to(site)}: {p}" for page in sorted(site.rglob("*.html"))
             if page.name == "index.html" and page.parent != site / "search"
             for p in problems(page.read_text(encoding="utf-8"))]
    for source in sorted((ROOT / "docs").rglob("*.md")):
        name = source.relative_to(ROOT / "docs").with_suffix("")
        built = site / ("index.html" if name.name == "index" else name / "index.html")
        wrong += unrendered_blocks(source, source.read_text(encoding="utf-8"),
                                   built.read_text(encoding="utf-8"))
    assert not wrong, "\n".join(wrong)
