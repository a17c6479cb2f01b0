"""On the real Slurm testbed: a failed run is classified, left by `run`, and run again by
`run --rerun failed`, its first attempt kept."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import run_cli

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

PROFILE = """
name: testbed-rerun
scheduler: slurm
launcher: srun
max_nodes: 4
cores_per_node: 2
threads_per_rank: 1
launcher_options: {cpu_bind: none}
"""
# Fails with an import error the first time (a marker in the run directory remembers).
STUDY = r"""
name: rerun
system: profile.yaml
workload:
  kind: command
  command: [bash, -c, 'if test -e {run_dir}/marker; then
            echo "Total img/sec on {world_size} GPU(s): 5.0"; else touch {run_dir}/marker;
            echo "ModuleNotFoundError: No module named horovod" >&2; exit 1; fi']
grid: {nodes: [1, 2]}
job: {walltime: "00:02:00"}
"""


def test_failed_jobs_are_classified_and_rerun_on_request(tmp_path: Path,
                                                         slurm_cluster) -> None:
    (tmp_path / "profile.yaml").write_text(PROFILE)
    spec = tmp_path / "rerun.yaml"
    spec.write_text(STUDY)
    first = run_cli("run", str(spec), "--wait", cwd=tmp_path)
    assert first.returncode == 1, first.stdout + first.stderr
    rows = json.loads(run_cli("status", str(spec), "--json", cwd=tmp_path).stdout)
    assert [r["failure"] for r in rows] == ["import_error", "import_error"], rows
    assert all("No module named horovod" in r["failure_line"] for r in rows)
    again = run_cli("run", str(spec), "--wait", cwd=tmp_path)
    assert "2 failed run(s) left as they are" in again.stderr
    assert "0 job(s) submitted" in again.stdout
    rerun = run_cli("run", str(spec), "--rerun", "failed", "--wait", cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "2 job(s) submitted" in rerun.stdout
    runs = pd.read_csv(tmp_path / "results" / "rerun" / "runs.csv")
    assert list(runs["state"]) == ["completed", "completed"]
    for run_id in runs["run_id"]:
        run_dir = tmp_path / "results" / "rerun" / "runs" / run_id
        kept = json.loads((run_dir / "attempts" / "1" / "status.json").read_text())
        assert kept["failure"] == "import_error"
    journal = (tmp_path / "results" / "rerun" / "jobs.jsonl").read_text()
    attempts = [json.loads(line).get("attempt") for line in journal.splitlines()
                if '"job_id"' in line]
    assert sorted(attempts) == [1, 1, 2, 2]
