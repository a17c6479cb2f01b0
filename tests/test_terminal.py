"""Terminal tables at 80, 100 and 120 columns: every shown cell whole (numbers never
cut, text wrapped), every line within the width, the caption naming what is left out.

The tables are parsed back from what rich draws: with `show_lines` each row is a
block of lines, a cell the column's slices of them; whitespace is ignored when a cell
is compared, so a wrapped name or a range broken after its dash still reads whole."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from rich.console import Console
from rich.table import Table

from scalestudy.report.terminal import plan_table, scaling_rich_table, status_table
from tests.conftest import run_cli

WIDTHS = (80, 100, 120)
LONG = "nccl-tree-with-a-rather-long-descriptive-variant-name"
SPEC = f"""name: widths
system: local
scaling: weak
workload: {{kind: synthetic, model: small_cnn, image_size: 32, iters: 20}}
grid: {{nodes: [1, 2], ranks_per_node: [1, 4], batch_size: [32],
        tuning: [default, {LONG}]}}
tuning:
  {LONG}: {{env: {{NCCL_ALGO: Tree}}}}
repeats: 2
"""
# Per-GPU rates large enough for six-digit totals: the widest numbers a table shows.
PER_GPU = {1: 38_123.4, 4: 31_000.0, 2: 35_500.5, 8: 27_012.3}
FAILED_LINE = ("python: can't open file '/home/someone/projects/a/deep/directory/train.py': "
               "[Errno 2] No such file or directory")


def finished_study(root: Path) -> Path:
    """A study whose runs ended (no jobs run): repeats differ, one run has few
    iterations (a flag), one failed with a long decisive line."""
    from scalestudy.study import make_plan

    spec = root / "study.yaml"
    spec.write_text(SPEC)
    plan = make_plan(spec, root / "results")
    for i, run in enumerate(plan.runs):
        p = run.params()
        d = plan.run_dir(run)
        d.mkdir(parents=True, exist_ok=True)
        (d / "run.json").write_text(json.dumps(p))
        if i == 5:
            (d / "status.json").write_text(json.dumps({
                "state": "failed", "exit_code": 1, "reason": "exit code 1",
                "failure": "not_found", "failure_line": FAILED_LINE}))
            continue
        (d / "status.json").write_text(json.dumps({"state": "completed", "exit_code": 0}))
        size = p["world_size"]
        rate = PER_GPU[size] * (1 + 0.013 * p["repeat"]) * (0.9 if p["tuning"] == LONG else 1)
        record = {"throughput": rate * size, "iters": 5 if i == 2 else 20,
                  "grad_bytes": 4e6, "throughput_per_rank_min": rate,
                  "throughput_per_rank_mean": rate, "comm_overhead": 0.0123 * size}
        (d / "metrics.jsonl").write_text(json.dumps(record) + "\n")
    return spec


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The finished study, its scaling table, status rows and plan summary."""
    from scalestudy import study as uc
    from scalestudy.results.analysis.efficiency import scaling_table

    root = tmp_path_factory.mktemp("widths")
    spec = finished_study(root)
    plan = uc.make_plan(spec, root / "results")
    return {"root": root, "spec": spec, "status": uc.status(plan),
            "summary": uc.plan_summary(plan),
            "scaling": scaling_table(uc.collect(plan), plan.study.scaling)}


# --- what each table should show, computed here from the same data ---------------

def scaling_cells(frame: pd.DataFrame) -> dict[str, list[str]]:
    rows = list(frame.itertuples(index=False))
    return {
        "group": [str(r.group) for r in rows],
        "GPUs": [str(r.world_size) for r in rows],
        "nodes x ranks": [f"{r.nodes} x {r.ranks_per_node}" for r in rows],
        "batch/GPU": [str(r.batch_size) for r in rows],
        "global batch": [str(r.global_batch) for r in rows],
        "img/s (min-max)": [f"{r.throughput_median:,.1f} ({r.throughput_min:,.1f}-"
                            f"{r.throughput_max:,.1f})" for r in rows],
        "img/s per GPU": [f"{r.throughput_per_gpu:,.1f}" for r in rows],
        "speedup": [f"{r.speedup:.2f}" for r in rows],
        "efficiency": [f"{r.efficiency:.1%}" for r in rows],
        "repeats": [str(r.n_repeats) for r in rows],
        "comm": ["n/a" if pd.isna(r.comm_overhead) else f"{r.comm_overhead:.1%}"
                 for r in rows],
        "flags": [str(r.flags or "") for r in rows],
    }


def status_cells(rows: list[dict[str, Any]]) -> dict[str, list[str]]:
    def reason(r: dict[str, Any]) -> str:
        if not r["failure"]:
            return r["reason"] or ""
        return f"{r['failure']}: {r['reason']} | {r['failure_line']}"

    return {"run id": [r["run_id"] for r in rows],  # no job id on a local study
            "nodes x ranks": [f"{r['nodes']} x {r['ranks_per_node']}" for r in rows],
            "batch/GPU": [str(r["batch_size"]) for r in rows],
            "global batch": [str(r["global_batch"]) for r in rows],
            "tuning": [r["tuning"] for r in rows], "repeat": [str(r["repeat"]) for r in rows],
            "state": [r["state"] for r in rows], "reason": [reason(r) for r in rows]}


def plan_cells(summary: dict[str, Any]) -> dict[str, list[str]]:
    keys = {"run id": "run_id", "nodes": "nodes", "ranks/node": "ranks_per_node",
            "world size": "world_size", "per-GPU batch": "batch_size",
            "global batch": "global_batch", "backend": "backend", "tuning": "tuning",
            "precision": "precision", "repeat": "repeat", "state": "state"}
    return {name: [str(r[key]) for r in summary["runs"]] for name, key in keys.items()}


# --- reading a drawn table back ----------------------------------------------------

def squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def draw(table: Table, width: int) -> str:
    table.show_lines = True  # a rule between rows: each row's block of lines is known
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(table)
    return console.export_text()


def parse(text: str) -> tuple[list[str], list[list[str]], str]:
    """(headers, rows of cells, caption) of a table drawn with rich's default box."""
    lines = text.rstrip("\n").split("\n")
    top = next(i for i, ln in enumerate(lines) if ln.startswith("┏"))
    head_end = next(i for i, ln in enumerate(lines) if ln.startswith("┡"))
    bottom = next(i for i, ln in enumerate(lines) if ln.startswith("└"))

    def join(block: list[str], bar: str) -> list[str]:
        parts = [ln.rstrip().split(bar)[1:-1] for ln in block]
        return [squash("".join(col)) for col in zip(*parts, strict=True)]

    headers = join(lines[top + 1:head_end], "┃")
    rows, block = [], []
    for ln in lines[head_end + 1:bottom]:
        if ln.startswith("├"):
            rows.append(join(block, "│"))
            block = []
        else:
            block.append(ln)
    if block:
        rows.append(join(block, "│"))
    return headers, rows, " ".join(lines[bottom + 1:])


def left_out(caption: str) -> list[str]:
    found = re.search(r"left out at this width \(\d+ columns\): (.*?); widen", " ".join(
        caption.split()))
    return found.group(1).split(", ") if found else []


def check(text: str, width: int, expected: dict[str, list[str]],
          always: tuple[str, ...]) -> list[str]:
    """Every line within `width`; each shown column's cells whole and in order; the
    caption names exactly the columns not shown; the `always` columns shown. Returns
    the shown headers."""
    assert max(len(ln.rstrip()) for ln in text.split("\n")) <= width, text
    headers, rows, caption = parse(text)
    names = {squash(n): n for n in expected}
    shown = [names[h] for h in headers]
    assert set(always) <= set(shown), (always, shown)
    assert sorted(left_out(caption)) == sorted(set(expected) - set(shown)), caption
    assert len(rows) == len(next(iter(expected.values())))
    for i, row in enumerate(rows):
        for name, cell in zip(shown, row, strict=True):
            assert cell == squash(expected[name][i]), (name, i, cell, expected[name][i])
    return shown


@pytest.mark.parametrize("width", WIDTHS)
def test_scaling_table_shows_every_number_whole(study: dict[str, Any], width: int) -> None:
    expected = scaling_cells(study["scaling"])
    assert any("few-iters" in f for f in expected["flags"])  # the data has a flag ...
    assert any(LONG in g for g in expected["group"])  # ... and a long group name
    text = draw(scaling_rich_table(study["scaling"], "widths", width), width)
    shown = check(text, width, expected,
                  ("group", "GPUs", "batch/GPU", "global batch", "img/s (min-max)",
                   "efficiency"))
    # Six-digit ranges leave room for the per-GPU rate at 100 columns, the speedup at 120.
    assert ("img/s per GPU" in shown) == (width >= 100)
    assert ("speedup" in shown) == (width >= 120)
    # The long variant name wrapped: its group column is far narrower than the name.
    assert f"{LONG} batch 32" not in text


@pytest.mark.parametrize("width", WIDTHS)
def test_status_table_shows_the_decisive_line_whole(study: dict[str, Any], width: int
                                                    ) -> None:
    text = draw(status_table("widths", study["status"], width), width)
    check(text, width, status_cells(study["status"]),
          ("run id", "nodes x ranks", "state", "reason"))
    assert any(squash(FAILED_LINE) in cell for row in parse(text)[1] for cell in row)


@pytest.mark.parametrize("width", WIDTHS)
def test_plan_table_fits(study: dict[str, Any], width: int) -> None:
    shown = check(draw(plan_table(study["summary"], width), width), width,
                  plan_cells(study["summary"]),
                  ("run id", "nodes", "ranks/node", "world size", "per-GPU batch",
                   "global batch", "state"))
    if width >= 100:  # the long variant name wraps instead of pushing tuning out
        assert "tuning" in shown


def test_a_table_too_wide_for_one_line_numbers_breaks_ranges_after_the_dash() -> None:
    from scalestudy.report.terminal import Column, fit_table

    cells = ["123,456.7 (120,000.0-130,000.0)", "9.0 (8.0-10.0)"]
    table = fit_table("t", [Column("name", ["a", "b"], wrap=True, right=False),
                            Column("img/s (min-max)", cells, split=True),
                            Column("speedup", ["1.00", "1.52"], 1)], 22)
    text = draw(table, 22)
    assert "(120,000.0-130,000.0)" not in text and "(120,000.0- │" in text
    check(text, 22, {"name": ["a", "b"], "img/s (min-max)": cells,
                     "speedup": ["1.00", "1.52"]}, ("name", "img/s (min-max)"))


# --- the same through the real CLI, as a user sees it ------------------------------

NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?%?")


def numbers(cells: list[str]) -> set[str]:
    return {m for c in cells for m in NUMBER.findall(c)}


def whole(number: str, text: str) -> bool:
    """`number` appears in `text` with no digit, comma or point glued to either side."""
    return re.search(rf"(?<![\d.,]){re.escape(number)}(?![\d.,%])", text) is not None


def cli_check(text: str, width: int, expected: dict[str, list[str]]) -> None:
    """The drawn table within `width`; the numbers of every shown column whole."""
    table = text[text.index("┏"):text.index("└")]
    assert max(len(ln.rstrip()) for ln in table.split("\n")) <= width, text
    lines = table.split("\n")
    head = lines[1:next(i for i, ln in enumerate(lines) if ln.startswith("┡"))]
    parts = [ln.rstrip().split("┃")[1:-1] for ln in head]
    names = {squash(n): n for n in expected}
    shown = [names[squash("".join(col))] for col in zip(*parts, strict=True)]
    caption = text[text.index("└"):]
    assert sorted(left_out(caption)) == sorted(set(expected) - set(shown)), caption
    for name in shown:
        for number in numbers(expected[name]):
            assert whole(number, table), (name, number)


@pytest.mark.parametrize("width", [w if w == 80 else pytest.param(w, marks=pytest.mark.slow)
                                   for w in WIDTHS])
def test_cli_tables_fit_columns(study: dict[str, Any], width: int) -> None:
    root, spec, columns = study["root"], str(study["spec"]), {"COLUMNS": str(width)}
    plan = run_cli("plan", spec, cwd=root, env_extra=columns)
    assert plan.returncode == 0, plan.stderr
    cli_check(plan.stdout, width, plan_cells(study["summary"]))
    status = run_cli("status", spec, cwd=root, env_extra=columns)
    assert status.returncode == 0, status.stderr
    cli_check(status.stdout, width, status_cells(study["status"]))
    report = run_cli("report", spec, cwd=root, env_extra=columns)
    assert report.returncode == 0, report.stderr
    cli_check(report.stdout, width, scaling_cells(study["scaling"]))
