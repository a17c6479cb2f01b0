"""Results written by the previous release still load (tests/data/previous-release)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from scalestudy import study as uc

DATA = Path(__file__).parent / "data" / "previous-release"


@pytest.mark.slow
def test_the_previous_releases_results_still_load(tmp_path: Path) -> None:
    shutil.copytree(DATA, tmp_path / "w")
    spec, results = tmp_path / "w" / "prev.yaml", tmp_path / "w" / "results"
    plan = uc.make_plan(spec, results)
    # the same run ids: its completed runs are found, not run again
    selection = uc.choose_runs(plan, None)
    assert selection.todo == [] and len(selection.done) == 2
    rows = uc.status(plan)
    assert [r["state"] for r in rows] == ["completed", "completed"]
    built = uc.report(plan).analysis
    assert list(built.table["world_size"]) == [1, 2]
    assert (built.table["throughput_median"] > 0).all()
    summary = json.loads((results / "prev" / "report" / "summary.json").read_text())
    assert summary["runs"]["completed"] == 2
    got = uc.compare(results / "prev", results / "prev", tmp_path / "cmp")
    assert list(got.frame["throughput_ratio"]) == [1.0, 1.0]
