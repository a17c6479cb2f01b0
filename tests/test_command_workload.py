"""A `command` workload as the README writes it: the program beside the spec, named by a
relative path, run from another directory; and when it fails, its own error (not the
launcher's report of it) in `run`'s output, `status --json`, runs.csv and the report."""

from __future__ import annotations

import json
import sys
from typing import Any

import pandas as pd
import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.slow

# `{tuning}.py`: one study, three programs (a real run costs seconds: keep them few).
SPEC = f"""name: mine
workload:
  kind: command
  command: [{json.dumps(sys.executable)}, "{{tuning}}.py", "{{run_dir}}", "{{world_size}}"]
grid: {{tuning: [train, missing, raising]}}
tuning:
  train: {{description: a program that works}}
  missing: {{description: a script that is not there}}
  raising: {{description: a program that raises}}
job: {{walltime: "00:02:00"}}
"""
TRAIN = """import os, sys
print("cwd", os.getcwd())
print("run dir", os.environ["SCALESTUDY_RUN_DIR"], sys.argv[1])
with open("train.out", "w") as out:  # relative: lands beside the spec
    out.write("ran\\n")
print(f"Total img/sec on {sys.argv[2]} GPU(s): 10.0")
"""
RAISING = """def check(batch):
    raise ValueError(f"batch size {batch} is not a power of two")


check(3)
"""
RAISED = "ValueError: batch size 3 is not a power of two"


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The study run once from a directory other than the spec's."""
    root = tmp_path_factory.mktemp("command")
    here, elsewhere = root / "project", root / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    (here / "study.yaml").write_text(SPEC)
    (here / "train.py").write_text(TRAIN)
    (here / "raising.py").write_text(RAISING)
    done = run_cli("run", "../project/study.yaml", cwd=elsewhere)
    status = run_cli("status", "../project/study.yaml", "--json", cwd=elsewhere)
    study = elsewhere / "results" / "mine"
    runs = pd.read_csv(study / "runs.csv")
    return {"here": here.resolve(), "done": done, "status": json.loads(status.stdout),
            "study": study, "runs": runs.set_index("tuning")}


def test_a_relative_command_runs_in_the_spec_directory(ran: dict[str, Any]) -> None:
    ok = ran["runs"].loc["train"]
    assert ok["state"] == "completed" and ok["throughput"] == 10.0, ran["done"].stderr
    run_dir = (ran["study"] / "runs" / ok["run_id"]).resolve()
    stdout = (run_dir / "stdout.log").read_text()
    assert f"cwd {ran['here']}\n" in stdout
    assert f"run dir {run_dir} {run_dir}\n" in stdout  # $SCALESTUDY_RUN_DIR = {run_dir}
    assert (ran["here"] / "train.out").read_text() == "ran\n"
    # The run's own files still go to its directory.
    for name in ("job.sh", "env.txt", "hosts.txt", "metrics.jsonl", "status.json"):
        assert (run_dir / name).is_file(), name


def test_a_failing_program_shows_its_own_error_everywhere(ran: dict[str, Any]) -> None:
    missing_line = (f"{sys.executable}: can't open file '{ran['here']}/missing.py': "
                    "[Errno 2] No such file or directory")
    expected = {"missing": ("not_found", missing_line), "raising": ("unknown", RAISED)}
    done = ran["done"]
    assert done.returncode == 1
    assert "1 run(s) completed, 2 failed" in done.stderr
    said = " ".join(done.stderr.split())  # rich may wrap a long line at 160 columns
    rows = {r["tuning"]: r for r in ran["status"]}
    for tuning, (failure, line) in expected.items():
        run_id = ran["runs"].loc[tuning, "run_id"]
        assert f"failed {run_id} ({failure}): {line} [" in said, done.stderr
        assert (rows[tuning]["failure"], rows[tuning]["failure_line"]) == (failure, line)
        csv = ran["runs"].loc[tuning]
        assert (csv["failure"], csv["failure_line"]) == (failure, line)
        # status.json's log tail starts with the program's lines, torchrun's after.
        tail = json.loads((ran["study"] / "runs" / run_id / "status.json").read_text())[
            "log_tail"]
        assert tail.index(line) < tail.index("the launcher's summary")
        assert "ChildFailedError" not in tail
    assert "torch.distributed" not in done.stderr


def test_the_report_lists_the_programs_error(ran: dict[str, Any]) -> None:
    report = (ran["study"] / "report" / "index.md").read_text()
    assert RAISED in report and "not_found" in report


# On a real scheduler (the localhost Slurm testbed, its Torque-style qsub for PBS):
# every rank, on every node, starts in the spec's directory and sees the run directory.
PROFILE = """name: testbed
scheduler: {scheduler}
launcher: {launcher}
max_nodes: 4
cores_per_node: 2
threads_per_rank: 1
launcher_options: {{cpu_bind: none}}
"""
WHERE = """import os, sys
rank = os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ.get("SLURM_PROCID")
with open(os.path.join(os.environ["SCALESTUDY_RUN_DIR"], f"where.{rank}"), "w") as out:
    out.write(os.getcwd())  # one file per rank: their stdout lines may interleave
print(f"Total img/sec on {sys.argv[1]} GPU(s): 10.0")
"""
ON_A_SCHEDULER = f"""name: where
system: profile.yaml
workload:
  kind: command
  command: [{json.dumps(sys.executable)}, where.py, "{{world_size}}"]
grid: {{nodes: [2], ranks_per_node: [2]}}
job: {{walltime: "00:05:00"}}
"""


@pytest.mark.slurm
@pytest.mark.parametrize(("scheduler", "launcher"), [
    ("slurm", "srun"), ("slurm", "mpirun"), ("pbs", "mpirun")])
def test_every_rank_starts_in_the_spec_directory_on_a_scheduler(
        tmp_path_factory: pytest.TempPathFactory, slurm_cluster: Any, scheduler: str,
        launcher: str) -> None:
    root = tmp_path_factory.mktemp("where")
    here, elsewhere = root / "project", root / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    (here / "profile.yaml").write_text(
        PROFILE.format(scheduler=scheduler, launcher=launcher)
        # Slurm's Torque-style qsub has no -f (PBS Pro's foreground flag)
        + ("scheduler_options: {submit_args: []}\n" if scheduler == "pbs" else ""))
    (here / "study.yaml").write_text(ON_A_SCHEDULER)
    (here / "where.py").write_text(WHERE)
    done = run_cli("run", "../project/study.yaml", "--wait", cwd=elsewhere)
    assert done.returncode == 0, done.stdout + done.stderr
    [run_dir] = (elsewhere / "results" / "where" / "runs").iterdir()
    where = {p.name: p.read_text() for p in run_dir.glob("where.*")}
    assert where == {f"where.{rank}": str(here.resolve()) for rank in range(4)}
