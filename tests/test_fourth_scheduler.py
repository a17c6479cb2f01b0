"""A scheduler is one module: a fourth one, written for the tests only
(tests/nohup_scheduler.py, its class and its template's blocks), plans, renders, runs a
study with real ranks and is tracked to its end, with nothing else in scalestudy edited."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from scalestudy.core.load import parse_study
from scalestudy.site import schedulers
from scalestudy.site.profiles import load_system
from scalestudy.site.render import render
from tests.conftest import ROOT

PROFILE = """\
name: nohup-here
description: this host, jobs as detached process groups (tests/nohup_scheduler.py)
scheduler: nohup
launcher: mpirun
max_nodes: 1
cores_per_node: 2
launcher_options: {cpu_bind: none}
env: {OMPI_ALLOW_RUN_AS_ROOT: "1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: "1",
      OMPI_MCA_rmaps_base_oversubscribe: "1"}
"""

STUDY = """\
name: fourth
system: nohup-here.yaml
workload: {model: small_cnn, image_size: 16, num_classes: 10, warmup_iters: 1, iters: 2,
           batches_per_iter: 2}
grid: {nodes: [1], ranks_per_node: [2], batch_size: [4]}
job: {walltime: "00:03:00"}
"""


@pytest.fixture(autouse=True, scope="module")
def nohup() -> Iterator[type[schedulers.Scheduler]]:
    """The test scheduler, registered while this module's tests run (the registry is the
    process's: the other tests must not see it)."""
    module = importlib.import_module("tests.nohup_scheduler")
    if "nohup" not in schedulers._REGISTRY:
        schedulers.register(module.Nohup)
    yield module.Nohup
    del schedulers._REGISTRY["nohup"]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`scalestudy ARGS` in a fresh interpreter that has loaded the test scheduler."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c",
         "import tests.nohup_scheduler; from scalestudy.cli import main; main()", *args],
        cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


def test_the_fourth_scheduler_is_registered_and_a_profile_may_name_it(
        tmp_path: Path, nohup: type[schedulers.Scheduler]) -> None:
    assert "nohup" in schedulers.names()
    assert isinstance(schedulers.get("nohup"), nohup)
    (tmp_path / "nohup-here.yaml").write_text(PROFILE)
    assert load_system(str(tmp_path / "nohup-here.yaml")).scheduler == "nohup"


def test_its_script_is_the_shared_one_with_its_blocks(tmp_path: Path) -> None:
    (tmp_path / "nohup-here.yaml").write_text(PROFILE)
    study = parse_study(STUDY.replace("nohup-here.yaml", str(tmp_path / "nohup-here.yaml")),
                        tmp_path / "study.yaml")
    from scalestudy.core.grid import expand

    run = expand(study)[0]
    text = render(study, load_system(study.system), run, tmp_path / "runs" / run.run_id)
    assert text.startswith("#!/bin/bash\n# nohup: --job-name=")
    assert "# Submit by hand with: setsid nohup bash" in text
    assert "MASTER_PORT=$(( 20000 + $$ % 10000 ))" in text
    assert "\nmpirun " in text  # the launcher is the profile's, not the scheduler's
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI's mpirun")
def test_a_study_runs_on_it_end_to_end(tmp_path: Path) -> None:
    (tmp_path / "nohup-here.yaml").write_text(PROFILE)
    (tmp_path / "study.yaml").write_text(STUDY)
    done = _cli("run", "study.yaml", "--wait", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 run(s) completed, 0 failed" in done.stderr
    run_dir = next((tmp_path / "results" / "fourth" / "runs").iterdir())
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "completed" and status["job_id"].isdigit()
    assert "Total img/sec on 2 GPU(s):" in (run_dir / "stdout.log").read_text()
