"""`scalestudy history`: a study run twice with different tags shows both runs, with
their tags and provenance, and `history ingest` rebuilds the same rows from results/."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.test_e2e_local import TINY

pytestmark = pytest.mark.slow


def test_a_study_run_twice_with_tags_shows_both_in_history(tmp_path: Path,
                                                           write_spec) -> None:
    spec = str(write_spec(TINY.replace("name: tiny", "name: tiny\ntags: [cpu-ci]")))
    store = {"SCALESTUDY_STORE": str(tmp_path / "history.sqlite")}
    first = run_cli("run", spec, "--only", "nodes=1", "--tag", "before", cwd=tmp_path,
                    env_extra=store)
    assert first.returncode == 0, first.stderr
    assert "history: 1 run attempt(s) of tiny in sqlite:///" in first.stderr
    again = run_cli("run", spec, "--only", "nodes=1", "--rerun", "all", "--tag", "after",
                    cwd=tmp_path, env_extra=store)
    assert again.returncode == 0, again.stderr

    listed = run_cli("history", "--json", cwd=tmp_path, env_extra=store)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(r["attempt"], r["tags"]) for r in rows] == [(1, ["cpu-ci", "before"]),
                                                         (2, ["cpu-ci", "after"])]
    assert all(r["state"] == "completed" and r["throughput"] > 0 for r in rows)
    prov = rows[1]["provenance"]
    assert prov["versions"]["torch"] and prov["versions"]["scalestudy"]
    assert prov["hardware"]["device"] == "cpu"
    assert prov["configuration"]["system"] == "local" and prov["placement"]["nodes"]
    assert len(json.loads(run_cli("history", "--json", "--tag", "before", cwd=tmp_path,
                                  env_extra=store).stdout)) == 1
    table = run_cli("history", cwd=tmp_path, env_extra={**store, "COLUMNS": "200"})
    assert "tiny" in table.stdout and "before" in table.stdout and "after" in table.stdout

    # a lost store comes back from the run directories, with the same rows
    (tmp_path / "history.sqlite").unlink()
    rebuilt = run_cli("history", "ingest", "results", cwd=tmp_path, env_extra=store)
    assert rebuilt.returncode == 0 and "ingested 2 run attempt(s) of 1 study" in rebuilt.stdout
    back = json.loads(run_cli("history", "--json", cwd=tmp_path, env_extra=store).stdout)
    assert [(r["run_id"], r["attempt"], r["tags"], r["throughput"]) for r in back] == \
        [(r["run_id"], r["attempt"], r["tags"], r["throughput"]) for r in rows]


def test_history_ingest_of_a_missing_directory_says_what_to_give(tmp_path: Path) -> None:
    done = run_cli("history", "ingest", "nowhere", cwd=tmp_path,
                   env_extra={"SCALESTUDY_STORE": str(tmp_path / "h.sqlite")})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "nowhere: no such directory" in done.stderr


GATED = f"""name: gated
workload:
  kind: command
  command: [{json.dumps(sys.executable)}, "train.py", "{{world_size}}", "{{repeat}}"]
grid: {{nodes: [1, 2], ranks_per_node: [1]}}
repeats: 3
job: {{walltime: "00:02:00"}}
"""
# A program whose speed the test sets (SLOW: the fraction lost), with 1 % of noise that
# differs by repeat: each rank prints what a benchmark prints.
TRAIN = """import os, random, sys
world, repeat = int(sys.argv[1]), int(sys.argv[2])
noise = random.Random(repeat * 7 + len(os.environ.get("SCALESTUDY_TAGS", ""))).gauss(0, 0.01)
value = 100.0 * world * 0.95 ** (world - 1) * (1 - float(os.environ.get("SLOW", "0")))
print(f"Total img/sec on {world} GPU(s): {value * (1 + noise):.3f}")
"""


def test_the_gate_passes_a_rerun_and_names_a_slowdown_of_real_runs(tmp_path: Path,
                                                                    write_spec) -> None:
    spec = str(write_spec(GATED))
    (tmp_path / "train.py").write_text(TRAIN)
    store = {"SCALESTUDY_STORE": str(tmp_path / "history.sqlite")}
    first = run_cli("run", spec, "--tag", "first", cwd=tmp_path, env_extra=store)
    assert first.returncode == 0, first.stderr
    rerun = run_cli("run", spec, "--rerun", "all", "--tag", "rerun", cwd=tmp_path,
                    env_extra=store)
    assert rerun.returncode == 0, rerun.stderr
    unchanged = run_cli("history", "check", spec, "--baseline-tag", "first", cwd=tmp_path,
                        env_extra=store)
    assert unchanged.returncode == 0, unchanged.stdout + unchanged.stderr
    assert "3 vs 3 repeats" in unchanged.stdout and "REGRESSION" not in unchanged.stdout

    slow = run_cli("run", spec, "--rerun", "all", "--tag", "slow", cwd=tmp_path,
                   env_extra={**store, "SLOW": "0.2"})
    assert slow.returncode == 0, slow.stderr
    found = run_cli("history", "check", spec, "--baseline-tag", "rerun", "--junit", "j.xml",
                    cwd=tmp_path, env_extra=store)
    assert found.returncode == 1, found.stdout + found.stderr
    assert "REGRESSION (compute): command 1x1 (1 GPUs)" in found.stdout
    assert "REGRESSION (compute): command 2x1 (2 GPUs)" in found.stdout
    assert "2 point(s) regressed" in found.stderr
    assert 'failures="2"' in (tmp_path / "j.xml").read_text()
