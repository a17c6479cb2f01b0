"""Issue: one key, one meaning. `batch_size` is the per-GPU batch and `global_batch` the
global one everywhere in a study (grid, exclude, --only, status, plan, probe); an
exclude rule or a filter that matches no run is an error, never silence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli

STRONG = """name: strong
scaling: strong
grid: {ranks_per_node: [1, 2, 4], global_batch: [32, 64], tuning: [default, bigbucket]}
tuning: {bigbucket: {options: {bucket_cap_mb: 100}}}
exclude:
  - {ranks_per_node: 4, batch_size: 8, tuning: bigbucket}
"""


@pytest.mark.slow
def test_strong_scaling_speaks_of_global_batch_and_exclude_uses_the_per_gpu_batch(
        tmp_path: Path, write_spec) -> None:
    spec = write_spec(STRONG)
    plan = json.loads(run_cli("plan", str(spec), "--json", cwd=tmp_path).stdout)
    points = {(r["world_size"], r["batch_size"], r["global_batch"], r["tuning"])
              for r in plan["runs"]}
    assert len(points) == 11  # 12 minus the one rule: 4 ranks x per-GPU 8 (global 32)
    assert (4, 8, 32, "bigbucket") not in points and (4, 16, 64, "bigbucket") in points
    only = run_cli("run", str(spec), "--dry-run", "--only", "batch_size=16", cwd=tmp_path)
    assert only.returncode == 0
    assert "4 of 11 runs to do" in only.stdout  # per-GPU 16: 2 x 16 and 4 x 16, 2 tunings


def test_the_old_strong_scaling_batch_size_is_refused_naming_global_batch(
        tmp_path: Path, write_spec) -> None:
    spec = write_spec("name: s\nscaling: strong\ngrid: {batch_size: [256]}\n")
    done = run_cli("validate", str(spec), cwd=tmp_path)
    assert done.returncode == 2
    assert "grid.batch_size: strong scaling holds the global batch fixed" in done.stderr
    assert "grid.global_batch" in done.stderr


@pytest.mark.slow
def test_an_exclude_rule_or_filter_that_matches_nothing_is_an_error(tmp_path: Path,
                                                                     write_spec) -> None:
    spec = write_spec(STRONG.replace("batch_size: 8", "batch_size: 32"))
    done = run_cli("plan", str(spec), cwd=tmp_path)
    assert done.returncode == 2
    assert "exclude[0]: matches no grid point; the grid has ranks_per_node 1, 2, 4; " \
           "batch_size 8, 16, 32, 64" in done.stderr
    ok = write_spec(STRONG, "ok.yaml")
    for args in (["run", "--only", "world_size=3"], ["run", "--dry-run", "--only", "tuning=x"]):
        none = run_cli(args[0], str(ok), *args[1:], cwd=tmp_path)
        assert none.returncode == 2, none.stdout
        assert "selects none of the study's 11 runs; it has" in none.stderr
        assert "world_size 1, 2, 4" in none.stderr
