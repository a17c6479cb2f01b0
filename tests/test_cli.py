"""The command line as a user meets it: fast help, clean errors, plan/validate/schema output."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli

BROKEN = sorted((ROOT / "tests" / "specs" / "broken").glob("*.yaml"))


def test_help_is_fast_and_imports_no_heavy_module() -> None:
    code = ("import sys, time; t = time.perf_counter(); from scalestudy.cli import app\n"
            "heavy = [m for m in ('torch', 'pandas', 'matplotlib', 'numpy') if m in sys.modules]\n"
            "print(heavy, time.perf_counter() - t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    heavy, seconds = out.stdout.rsplit(" ", 1)
    assert heavy == "[]"
    assert float(seconds) < 1.0
    started = time.perf_counter()
    done = run_cli("--help", cwd=ROOT)
    assert done.returncode == 0 and "plan" in done.stdout and "report" in done.stdout
    assert time.perf_counter() - started < 3.0  # a whole interpreter, on a loaded 2-core box


@pytest.mark.parametrize("command", ["validate", "plan", "run"])
@pytest.mark.parametrize("path", BROKEN[:6] + BROKEN[-3:], ids=lambda p: p.stem)
def test_broken_spec_is_one_clean_error_and_writes_nothing(command: str, path: Path,
                                                           tmp_path: Path) -> None:
    done = run_cli(command, str(path), cwd=tmp_path)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert done.stderr.startswith("error: ")
    assert list(tmp_path.iterdir()) == []


def test_missing_spec_file(tmp_path: Path) -> None:
    done = run_cli("plan", "nope.yaml", cwd=tmp_path)
    assert done.returncode == 2 and "nope.yaml: no such file" in done.stderr


def test_bad_only_expression_is_a_clean_error(tmp_path: Path) -> None:
    done = run_cli("run", str(ROOT / "studies" / "example.yaml"), "--only", "gpus=2",
                   cwd=tmp_path)
    assert done.returncode == 2 and "unknown key 'gpus'" in done.stderr
    assert "Traceback" not in done.stderr


def test_validate_and_plan_the_example(tmp_path: Path) -> None:
    example = str(ROOT / "studies" / "example.yaml")
    done = run_cli("validate", example, cwd=tmp_path)
    assert done.returncode == 0 and "ok: 12 runs (6 grid points x 2 repeats)" in done.stdout
    table = run_cli("plan", example, cwd=tmp_path)
    assert "12 runs, at most" in table.stdout and "per-GPU batch" in table.stdout
    data = json.loads(run_cli("plan", example, "--json", cwd=tmp_path).stdout)
    assert data["run_count"] == 12 and len(data["runs"]) == 12
    assert {r["world_size"] for r in data["runs"]} == {1, 2, 4}
    assert all(r["global_batch"] == r["batch_size"] * r["world_size"] for r in data["runs"])
    assert all(r["state"] == "pending" for r in data["runs"])
    assert list(tmp_path.iterdir()) == []


def test_dry_run_renders_scripts_and_runs_nothing(tmp_path: Path) -> None:
    done = run_cli("run", str(ROOT / "studies" / "example.yaml"), "--dry-run",
                   "--only", "repeat=0", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "6 of 12 runs to do (dry run" in done.stdout
    scripts = sorted((tmp_path / "results" / "example" / "runs").glob("*/job.sh"))
    assert len(scripts) == 6
    assert not list((tmp_path / "results").rglob("status.json"))


def test_schema_command_prints_the_committed_schema(tmp_path: Path) -> None:
    done = run_cli("schema", cwd=tmp_path)
    assert json.loads(done.stdout) == json.loads((ROOT / "schema" / "study.schema.json")
                                                 .read_text())


def test_systems_lists_local(tmp_path: Path) -> None:
    done = run_cli("systems", cwd=tmp_path)
    assert done.returncode == 0
    assert any(line.startswith("local ") for line in done.stdout.splitlines())


def test_cluster_spec_errors_before_anything_is_submitted(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: c\nsystem: polaris\ngrid: {nodes: [1, 600]}\n"
                    "job: {partition: gpu, walltime: '48:00:00'}\n")
    done = run_cli("run", str(spec), cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert any("grid.nodes: 600 node(s) is more than system 'polaris' allows" in ln for ln in lines)
    assert any("job.partition: system 'polaris' uses pbs, which has no partition" in ln
               for ln in lines)
    assert any("requires an account" in ln for ln in lines)
    assert any("job.walltime: 48:00:00 is longer than system 'polaris' allows" in ln
               for ln in lines)
    assert not (tmp_path / "results").exists()


def test_missing_sbatch_is_a_clear_error(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: c\nsystem: generic-slurm\njob: {account: a}\n")
    done = run_cli("run", str(spec), cwd=tmp_path, path="/nonexistent")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "error: sbatch: command not found" in done.stderr
    assert "0 job(s) were submitted before this" in done.stderr
