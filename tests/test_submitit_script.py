"""execute.submitit_script: submitit's own sbatch script and task, written without Slurm
(the submission itself is the Slurm testbed's: tests/test_e2e_slurm.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from scalestudy.execute.submitit_script import TASK, SubmititScript
from scalestudy.site.plan import make_plan
from tests.testbed_sessions import unavailable

SPEC = """name: sub
system: generic-slurm
workload: {kind: command, command: [hostname]}
job: {submit: submitit, record_env: [MY_*]}
"""


@pytest.fixture(autouse=True)
def _srun_on_path() -> None:
    """submitit's SlurmExecutor refuses to be made (and so to write its script) where no
    `srun` is on PATH: on a machine without Slurm this test skips, saying so."""
    if shutil.which("srun") is None:
        unavailable("submitit writes its script only where srun is on PATH: "
                    "scripts/slurm-testbed install", "SCALESTUDY_REQUIRE_SLURM")


def test_the_script_records_the_environment_as_the_rendered_ones_do(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC)
    plan = make_plan(spec, tmp_path / "results")
    run = plan.runs[0]
    run_dir = plan.run_dir(run)
    run_dir.mkdir(parents=True)
    script = SubmititScript().write_script(plan, run, run_dir)
    text = script.read_text()
    assert text.startswith("#!/bin/bash") and "#SBATCH" in text
    assert "scalestudy_record_env" in text and "MY_*" in text
    assert (run_dir / "submitit" / TASK).is_file()
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
