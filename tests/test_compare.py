"""compare: two studies aligned point by point with ratios, written and printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalestudy.core.errors import ScalestudyError
from scalestudy.results.history.compare import spec_settings
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
    assert ("| batch 16 | 4 | 1 × 4 | 16 | 64 | 320.0 [320.0–320.0] (1) | 384.0 "
            "[384.0–384.0] (1) | 1.200 |") in md


@pytest.mark.slow
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


def test_compare_names_every_setting_refuses_other_units_and_flags_superlinear(
        tmp_path: Path) -> None:
    from scalestudy.results.history.compare import load_side
    from scalestudy.study import collect, make_plan

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    spec = "name: {name}\nsystem: local\nworkload: {{bucket_cap_mb: {mb}}}\n" \
           "grid: {{nodes: [1], ranks_per_node: [1, 2], batch_size: [16]}}\nrepeats: 2\n"
    a = finished_study(tmp_path / "a", {1: 100.0, 2: 75.0}, spec.format(name="a", mb=25))
    b = finished_study(tmp_path / "b", {1: 50.0, 2: 94.5}, spec.format(name="b", mb=50))
    for s in (a, b):
        collect(make_plan(s, s.parent / "results"))
        name = s.parent.name  # `run` keeps the spec beside the results, as here
        (s.parent / "results" / name / "study.yaml").write_text(s.read_text())
    got = compare(tmp_path / "a/results/a", tmp_path / "b/results/b", tmp_path / "cmp")
    # the example's case: only a workload option differs, and it is named
    assert got.differs == {"workload.bucket_cap_mb": ("25", "50")}
    md = (got.out / "compare.md").read_text()
    assert "- workload.bucket_cap_mb: A 25; B 50" in md
    assert "189.0% (above 100 %: check)" in md and "(2)" in md
    side = load_side(tmp_path / "b/results/b", tmp_path)
    side.table["throughput_unit"] = "tokens/s"
    from scalestudy.results.history.compare import align

    with pytest.raises(ScalestudyError, match=r"a measures img/s and b tokens/s"):
        align(load_side(tmp_path / "a/results/a", tmp_path), side)


def test_each_container_image_of_a_side_is_a_setting_with_its_digest(tmp_path) -> None:
    from scalestudy.results.history.compare import image_digests

    for run, digest in (("a", "sha256:1"), ("b", "sha256:2"), ("c", None)):
        (tmp_path / "runs" / run).mkdir(parents=True)
        lines = ["SCALESTUDY_CONTAINER=charliecloud:/img" if digest else "PATH=/bin",
                 *([f"SCALESTUDY_CONTAINER_DIGEST={digest}"] if digest else [])]
        (tmp_path / "runs" / run / "env.txt").write_text("\n".join(lines) + "\n")
    assert image_digests(tmp_path) == {"image charliecloud:/img": "sha256:1/sha256:2"}


def test_a_spec_moved_to_the_new_job_options_form_compares_equal_to_its_old_self(
        tmp_path: Path) -> None:
    head = "name: o\nsystem: perlmutter\ngrid: {nodes: [1]}\n"
    specs = {name: tmp_path / f"{name}.yaml" for name in ("old", "new", "other")}
    specs["old"].write_text(head + "job: {account: A, qos: debug, constraint: gpu}\n")
    specs["new"].write_text(head + "job: {account: A, slurm: {qos: debug, constraint: gpu}}\n")
    specs["other"].write_text(head + "job: {account: A, slurm: {qos: regular, constraint: gpu}}\n")
    old, new, other = (spec_settings(p) for p in specs.values())
    assert old == new and old["job.qos"] == "debug"
    assert {k for k in new if new[k] != other.get(k)} == {"job.qos"}
