"""Every exit code the README documents is what a shell sees (real subprocesses): 0 done,
1 runs or checks failed, 2 a bad spec or option, 130 interrupted (Ctrl-C), with the
message written for it; an interrupted run is not a failed run and runs again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli

SLEEPER = """name: sig
workload:
  kind: command
  command: [bash, -c, 'if [ -e {run_dir}/../../../../go ]; then
            echo "Total img/sec on {world_size} GPU(s): 5.0"; else sleep 120; fi']
grid: {ranks_per_node: [1]}
job: {walltime: "00:05:00"}
"""


def start_run(spec: Path, cwd: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "SCALESTUDY_DEBUG"}
    return subprocess.Popen(
        [sys.executable, "-c", "from scalestudy.cli import main; main()", "run", str(spec)],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,  # its own group, as a terminal gives a foreground job
        # and SIGINT as a terminal's job has it: a test suite started in the background
        # of a shell without job control (`pytest &`) inherits SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def wait_until_running(cwd: Path, timeout: float = 60.0) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for status in (cwd / "results" / "sig" / "runs").glob("*/status.json"):
            if json.loads(status.read_text()).get("state") == "running":
                time.sleep(1.0)  # let the ranks start
                return status
        time.sleep(0.2)
    raise AssertionError("the run never started")


@pytest.mark.slow
@pytest.mark.parametrize("target", ["process", "group"])
def test_ctrl_c_exits_130_keeps_the_run_interrupted_and_a_plain_run_resumes_it(
        tmp_path: Path, write_spec, target: str) -> None:
    spec = write_spec(SLEEPER)
    proc = start_run(spec, tmp_path)
    status = wait_until_running(tmp_path)
    if target == "group":  # what a terminal's Ctrl-C does
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted: a local run that did not finish is kept as `interrupted`" in err
    assert "Traceback" not in err
    recorded = json.loads(status.read_text())
    assert recorded["state"] == "interrupted" and "failure" not in recorded
    shown = json.loads(run_cli("status", str(spec), "--json", cwd=tmp_path).stdout)
    assert [(r["state"], r["failure"]) for r in shown] == [("interrupted", None)]
    (tmp_path / "go").touch()
    again = run_cli("run", str(spec), cwd=tmp_path)  # no --rerun needed
    assert again.returncode == 0, again.stderr
    assert "1 run(s) completed, 0 failed" in again.stderr
    assert json.loads(status.read_text())["state"] == "completed"
    assert (status.parent / "attempts" / "1" / "status.json").is_file()  # kept


@pytest.mark.slow
def test_documented_exit_codes_without_running_anything(tmp_path: Path, write_spec) -> None:
    good = write_spec("name: ok\n")
    assert run_cli("validate", str(good), cwd=tmp_path).returncode == 0
    assert run_cli("--version", cwd=tmp_path).returncode == 0
    bad = write_spec("name: bad\ngrid: {nodez: [1]}\n", "bad.yaml")
    done = run_cli("validate", str(bad), cwd=tmp_path)
    assert done.returncode == 2 and "did you mean `nodes`?" in done.stderr
    assert run_cli("run", str(good), "--rerun", "everything", cwd=tmp_path).returncode == 2
    assert run_cli("plan", str(good), "--no-such-flag", cwd=tmp_path).returncode == 2
    none = run_cli("run", str(good), "--only", "world_size=3", cwd=tmp_path)
    assert none.returncode == 2 and "selects none of the study's 1 runs" in none.stderr
    cancel = run_cli("cancel", str(good), cwd=tmp_path)
    assert cancel.returncode == 2 and "there is no queue to cancel" in cancel.stderr


@pytest.mark.slow
def test_a_probe_that_fits_no_batch_exits_1(tmp_path: Path, write_spec) -> None:
    spec = write_spec("name: p\nworkload: {model: small_cnn, image_size: 32}\n"
                      "job: {walltime: '00:05:00'}\n")
    done = run_cli("probe", str(spec), "--max-batch", "4", "--memory-limit-gb", "0.001",
                   cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "largest per-GPU batch that fits: none" in done.stdout
    assert "error: no batch from 1 fits one GPU of local" in done.stderr
