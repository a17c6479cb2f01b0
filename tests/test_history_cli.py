"""`scalestudy history`: a study run twice with different tags shows both runs, with
their tags and provenance, and `history ingest` rebuilds the same rows from results/."""

from __future__ import annotations

import json
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
