"""compare: two studies aligned point by point with ratios, written and printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalestudy.core.errors import ScalestudyError
from scalestudy.study import compare
from tests.conftest import run_cli
from tests.test_report import finished_study

SPEC = """name: {name}
system: local
grid: {{nodes: [1], ranks_per_node: [1, 2, 4], batch_size: [16], tuning: [{tuning}]}}
tuning: {{tuned: {{env: {{NCCL_ALGO: Ring}}}}}}
"""


def two_studies(root: Path) -> tuple[Path, Path]:
    (root / "a").mkdir()
    (root / "b").mkdir()
    a = finished_study(root / "a", {1: 100.0, 2: 90.0, 4: 80.0},
                       SPEC.format(name="before", tuning="default"))
    b = finished_study(root / "b", {1: 100.0, 2: 99.0, 4: 96.0},
                       SPEC.format(name="after", tuning="tuned"))
    (root / "a/results/before/runs.csv").unlink(missing_ok=True)
    return a, b


def test_compare_aligns_and_writes(tmp_path: Path) -> None:
    from scalestudy.study import collect, make_plan

    a, b = two_studies(tmp_path)
    for spec in (a, b):
        collect(make_plan(spec, spec.parent / "results"))
    got = compare(tmp_path / "a/results/before", tmp_path / "b/results/after",
                  tmp_path / "cmp")
    frame, differs, out = got.frame, got.differs, got.out
    assert differs == {"tuning": ("default", "tuned")}
    assert frame["world_size"].tolist() == [1, 2, 4]
    assert frame["throughput_ratio"].tolist() == pytest.approx([1.0, 1.1, 1.2])
    assert frame["efficiency_b"].tolist() == pytest.approx([1.0, 0.99, 0.96])
    assert frame["global_batch"].tolist() == ["16", "32", "64"]
    # node-hours per million images: the same nodes, so B / A = A's throughput / B's
    assert frame["node_hours_ratio"].tolist() == pytest.approx([1.0, 1 / 1.1, 1 / 1.2])
    assert frame["energy_ratio"].isna().all()  # no run measured energy
    assert sorted(p.name for p in out.iterdir()) == ["compare.csv", "compare.md",
                                                     "compare.png"]
    md = (out / "compare.md").read_text()
    assert "- tuning: A default; B tuned" in md
    assert "| batch 16 | 4 | 1 × 4 | 16 | 64 | 320.0 | 384.0 | 1.200 |" in md


def test_compare_cli_and_errors(tmp_path: Path) -> None:
    from scalestudy.study import collect, make_plan

    a, b = two_studies(tmp_path)
    for spec in (a, b):
        collect(make_plan(spec, spec.parent / "results"))
    done = run_cli("compare", str(tmp_path / "a/results/before"),
                   str(tmp_path / "b/results/after"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "1.200" in done.stdout and "tuning: A default, B tuned" in done.stdout
    assert (tmp_path / "results/compare-before-vs-after/compare.png").is_file()
    missing = run_cli("compare", str(tmp_path / "nowhere"), str(b), cwd=tmp_path)
    assert missing.returncode == 2
    assert "neither a study spec (.yaml) nor a results directory" in missing.stderr
    with pytest.raises(ScalestudyError, match=r"no runs\.csv"):
        compare(tmp_path / "a", tmp_path / "b")
