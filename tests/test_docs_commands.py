"""The docs' commands run as written: every shell block a page marks `<!-- run: here -->`
runs, line by line, in a directory holding a copy of studies/ (and the files its marker
names), with the environment's `scalestudy` on PATH and a store of its own; each command
must exit 0 and print the lines the page shows after it. A marked block that cannot run
here fails: the marker is a promise to the reader that it runs on a laptop."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docblocks import SHELLS, Block, blocks, commands

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def marked() -> dict[Path, list[Block]]:
    """The pages with marked blocks, and those blocks, in page order."""
    pages = {}
    for page in sorted(DOCS.rglob("*.md")):
        runs = [b for b in blocks(page) if b.run]
        if runs:
            pages[page] = runs
    return pages


TOKEN = re.compile(r"(\.\.\.|…|-?\d+(?:[.,]\d+)*|\s+)")


def shown(line: str) -> re.Pattern[str]:
    """What a line of output the page shows matches: its words as written, any number
    where it shows a number, anything where it elides (`...`), any space where it has one
    (a wrapped line too)."""
    parts = []
    tokens = [t for t in TOKEN.split(line.strip()) if t]
    for i, token in enumerate(tokens):
        if token in ("...", "…"):
            parts.append(r"[\s\S]*?")
        elif token.isspace():  # around an elision, the elision's
            near = tokens[max(i - 1, 0):i + 2]
            parts.append("" if "..." in near or "…" in near else r"\s+")
        elif re.fullmatch(r"-?\d.*", token):
            parts.append(r"-?\d+(?:[.,]\d+)*(?:e[-+]?\d+)?")
        else:
            parts.append(re.escape(token))
    return re.compile("".join(parts))


def test_blocks_are_read_as_a_reader_copies_them(tmp_path: Path) -> None:
    text = ("# T\n\n## Step\n\n- in a list:\n\n    <!-- run: here; with a.log=tests/x.log"
            " d=tests/d -->\n    ```sh\n    scalestudy validate s.yaml  # ok\n"
            "    scalestudy plan \\\n      s.yaml\n    ```\n\n```yaml\nname: x\n```\n\n"
            "<!-- run: here -->\n```console\n$ scalestudy dataset make tokens t\n"
            "t: 1,048,576 train ... tokens\n$ cat t/meta.json\n```\n")
    sh, yaml, console = blocks(tmp_path / "p.md", text)
    assert (sh.run, sh.lang, sh.heading, sh.line) == (True, "sh", "## Step", 8)
    assert sh.files == {"a.log": "tests/x.log", "d": "tests/d"}
    assert [(c.line, c.text) for c in commands(sh)] == [
        (9, "scalestudy validate s.yaml  # ok"), (10, "scalestudy plan s.yaml")]
    assert not yaml.run and yaml.files == {}
    assert console.run and console.files == {}
    made, cat = commands(console)
    assert made.text == "scalestudy dataset make tokens t" and cat.shown == []
    assert made.shown == ["t: 1,048,576 train ... tokens"]


def test_a_shown_line_matches_other_numbers_but_not_other_words() -> None:
    line = "polaris: 0.0667 failures per node-hour [0.0182–0.172, 90%] ... (comm 1)"
    pattern = shown(line)
    assert pattern.search("polaris: 0.05 failures per node-hour [0.01–0.2, 90%] from 2 "
                          "failure(s) (comm 2)")
    assert pattern.search("polaris: 1,234 failures per\n  node-hour [0–3, 90%] (comm 0)")
    assert not pattern.search("polaris: 0.05 failure per node-hour [0.01–0.2, 90%] (comm 2)")
    assert not shown("wrote 3 runs").search("wrote runs")


def test_every_marked_block_can_run_here() -> None:
    pages = marked()
    assert len(pages) >= 3, f"the marked pages went missing: {sorted(p.name for p in pages)}"
    wrong = []
    for runs in pages.values():
        for block in runs:
            if block.lang not in SHELLS:
                wrong.append(f"{block.where()}: a {block.lang or 'plain'} block, not a shell")
            elif not commands(block):
                wrong.append(f"{block.where()}: no command")
            wrong += [f"{block.where()}: no {path} in the repository"
                      for path in block.files.values() if not (ROOT / path).exists()]
    assert not wrong, "\n".join(wrong)


def workdir(tmp_path: Path, runs: list[Block]) -> tuple[Path, dict[str, str]]:
    """A user's directory for a page's blocks: studies/, the files the markers name, the
    environment's `scalestudy` as `scalestudy` and `.venv/bin/scalestudy`, and a results
    store of its own."""
    bindir = Path(sys.executable).parent
    assert (bindir / "scalestudy").exists(), (
        f"no scalestudy in {bindir}: install the checkout there (pip install -e .)")
    work = tmp_path / "work"
    shutil.copytree(ROOT / "studies", work / "studies")
    (work / ".venv").symlink_to(bindir.parent, target_is_directory=True)
    for block in runs:
        for name, source in block.files.items():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            copy = shutil.copytree if (ROOT / source).is_dir() else shutil.copy
            copy(ROOT / source, work / name)
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), env.get("PYTHONPATH"))))
    env["SCALESTUDY_STORE"] = str(tmp_path / "store.sqlite")
    return work, env


@pytest.mark.slow
@pytest.mark.parametrize("page", list(marked()), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_marked_commands_of_a_page_run_as_written(page: Path, tmp_path: Path) -> None:
    runs = marked()[page]
    work, env = workdir(tmp_path, runs)
    for block in runs:
        for command in commands(block):
            done = subprocess.run(["bash", "-o", "pipefail", "-c", command.text], cwd=work,
                                  env=env, capture_output=True, text=True, timeout=300)
            where = f"{page.relative_to(ROOT)}:{command.line}: `{command.text}`"
            assert done.returncode == 0, (
                f"{where} exited {done.returncode}:\n{done.stdout[-1500:]}{done.stderr[-1500:]}")
            missing = [line for line in command.shown if line.strip() not in ("...", "…")
                       and not shown(line).search(done.stdout + done.stderr)]
            assert not missing, f"{where} did not print {missing}:\n{done.stdout[-1500:]}"
