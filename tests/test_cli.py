"""The command line as a user meets it: fast help, clean errors, plan/validate/schema output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli

BROKEN = sorted((ROOT / "tests" / "specs" / "broken").glob("*.yaml"))


@pytest.mark.slow
def test_help_imports_no_heavy_module() -> None:
    # What keeps `scalestudy --help` instant, by construction (its time is a benchmark's
    # business, not a test's): the CLI and its help load no torch, pandas or matplotlib.
    code = ("import sys; from scalestudy.cli import app; from typer.main import get_command\n"
            "get_command(app)\n"
            "print([m for m in ('torch', 'pandas', 'matplotlib', 'numpy') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    done = run_cli("--help", cwd=ROOT)
    assert done.returncode == 0 and "plan" in done.stdout and "report" in done.stdout


# Every command loads a spec through the same make_plan: all broken specs through
# validate, a few through plan and run.
@pytest.mark.parametrize(("command", "path"), [
    *(("validate", p) for p in BROKEN[:6] + BROKEN[-3:]),
    *((c, p) for c in ("plan", "run") for p in (BROKEN[0], BROKEN[-1]))],
    ids=lambda v: v.stem if isinstance(v, Path) else v)
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


@pytest.mark.slow
def test_validate_and_plan_the_example(tmp_path: Path) -> None:
    example = str(ROOT / "studies" / "example.yaml")
    done = run_cli("validate", example, cwd=tmp_path)
    assert done.returncode == 0 and "ok: 12 runs (6 grid points x 2 repeats)" in done.stdout
    table = run_cli("plan", example, cwd=tmp_path)
    assert "12 runs: at most" in table.stdout and "per-GPU batch" in table.stdout
    assert "expected" in table.stdout
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
    done = run_cli("run", str(spec), "--no-preflight", cwd=tmp_path, path="/nonexistent")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "error: sbatch: command not found" in done.stderr
    assert "0 job(s) were submitted before this" in done.stderr


@pytest.mark.slow
def test_version_help_and_choices(tmp_path: Path) -> None:
    from scalestudy import __version__

    version = run_cli("--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.strip() == f"scalestudy {__version__}"
    helps = {c: run_cli(c, "--help", cwd=tmp_path, env_extra={"COLUMNS": "120"}).stdout
             for c in ("run", "report", "plan")}
    assert "[failed|all]" in helps["run"]
    assert "[log|ring]" in helps["report"] and "[fit|probe]" in helps["report"]
    assert "smallest|node|N" in helps["report"]
    assert "the results directory" in helps["plan"]
    top = run_cli("--help", cwd=tmp_path, env_extra={"COLUMNS": "120"}).stdout
    listing = top.split("Commands", 1)[1].splitlines()
    commands = [ln for ln in listing if ln.startswith("│ ") and "  " in ln[2:]]
    assert len(commands) >= 11
    for line in commands:  # one line each, ending a sentence
        assert line.rstrip(" │").endswith((".", ")", "`")), line
    typo = run_cli("report", "nowhere.yaml", "--latency", "tre", cwd=tmp_path)
    assert typo.returncode == 2 and "'tre' is not one of 'log', 'ring'" in typo.stderr


@pytest.mark.slow
def test_json_everywhere_and_one_profile(tmp_path: Path) -> None:
    example = str(ROOT / "studies" / "example.yaml")
    valid = json.loads(run_cli("validate", example, "--json", cwd=tmp_path).stdout)
    assert valid == {"study": example, "ok": True, "runs": 12, "points": 6, "repeats": 2,
                     "system": "local", "warnings": []}
    listed = json.loads(run_cli("systems", "--json", cwd=tmp_path).stdout)
    assert {p["name"] for p in listed} >= {"local", "polaris", "perlmutter"}
    one = run_cli("systems", "polaris", cwd=tmp_path)
    assert one.returncode == 0 and "scheduler: pbs" in one.stdout
    assert "launcher: mpiexec" in one.stdout
    assert json.loads(run_cli("systems", "polaris", "--json", cwd=tmp_path).stdout)[
        "gpus_per_node"] == 4
    unknown = run_cli("systems", "nope", cwd=tmp_path)
    assert unknown.returncode == 2 and "valid systems:" in unknown.stderr
    collected = json.loads(run_cli("collect", example, "--json", cwd=tmp_path).stdout)
    assert collected["runs"] == 12 and collected["pending"] == 12


@pytest.mark.slow
def test_local_study_says_what_queue_options_do_there(tmp_path: Path, write_spec) -> None:
    spec = write_spec("name: q\n")
    cancel = run_cli("cancel", str(spec), cwd=tmp_path)
    assert cancel.returncode == 2
    assert "runs jobs directly on this machine: there is no queue to cancel" in cancel.stderr
    dry = run_cli("run", str(spec), "--dry-run", "--max-jobs", "2", cwd=tmp_path)
    assert dry.returncode == 0


@pytest.mark.slow
def test_a_dry_run_refuses_a_budget_as_the_real_run_would(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\nsystem: generic-slurm\ngrid: {nodes: [1, 4], batch_size: [8]}\n"
                    "job: {walltime: '01:00:00'}\n")
    done = run_cli("run", str(spec), "--dry-run", "--budget", "2", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "may use up to 5 node-hours" in done.stderr and "more than --budget 2" in done.stderr
    assert not (tmp_path / "results").exists()
    fits = run_cli("run", str(spec), "--dry-run", "--budget", "5", cwd=tmp_path)
    assert fits.returncode == 0 and "2 of 2 runs to do (dry run" in fits.stdout


def test_a_deadline_without_a_unit_is_refused(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\nsystem: local\ngrid: {nodes: [1]}\n")
    done = run_cli("report", str(spec), "--deadline", "6", cwd=tmp_path)
    assert done.returncode == 2 and "'6' has no unit: write 6h" in done.stderr
