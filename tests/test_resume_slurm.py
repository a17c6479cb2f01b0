"""On the real Slurm testbed: a run of the checkpointing benchmark (2 ranks on 2 virtual
nodes, one checkpoint directory both see) whose job is SIGKILLed after its first complete
checkpoint is started again by `scalestudy run --rerun failed`, resumes from that
checkpoint, says so in its record, and trains only the steps after it."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from scalestudy.workload.checkpoint import latest
from tests.conftest import run_cli
from tests.slurm_testbed import TESTBED_PROFILE, wait_for_job

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

STEPS = 60
SPEC = """name: ckslurm
system: profile.yaml
workload:
  model: gpt-tiny
  seq_len: 32
  warmup_iters: 1
  batches_per_iter: 5
  diagnostics: false
  data: {{path: {data}, workers: 0}}
  optimizer: adamw
  lr: 0.003
  checkpoint: {{every_steps: 10}}
target: {{metric: val_loss, value: 0.01, eval_every: {steps}, max_steps: {steps}}}
grid: {{nodes: [2], ranks_per_node: [1], batch_size: [16]}}
job: {{walltime: "00:05:00"}}
"""


def job_id(study: Path) -> str:
    """The job id of the run's latest submission, from the study's journal."""
    lines = [json.loads(line) for line in (study / "jobs.jsonl").read_text().splitlines()]
    return str([entry for entry in lines if entry.get("job_id")][-1]["job_id"])


def test_a_run_killed_after_its_first_checkpoint_resumes_from_it(tmp_path: Path,
                                                                 slurm_cluster) -> None:
    from scalestudy.workload.data import loader
    from scalestudy.workload.data.feed import source_for
    from scalestudy.workload.layout import Layout
    from tests.test_workload_totarget import tokens

    root, _ = tokens(tmp_path)
    (tmp_path / "profile.yaml").write_text(TESTBED_PROFILE)
    (tmp_path / "ck.yaml").write_text(SPEC.format(data=root, steps=STEPS))
    first = run_cli("run", "ck.yaml", cwd=tmp_path)  # submits and returns
    assert first.returncode == 0, first.stdout + first.stderr
    study = tmp_path / "results" / "ckslurm"
    run_dir = next((study / "runs").iterdir())
    deadline = time.monotonic() + 120
    while not list(run_dir.glob("checkpoint/step-*/complete.json")) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    job = job_id(study)
    subprocess.run(["scancel", "--signal=KILL", job], check=True, timeout=30)
    assert wait_for_job(job, timeout=60) in ("FAILED", "CANCELLED")
    found = latest(run_dir / "checkpoint")  # what a new attempt finds (a save may have
    assert found is not None and not (run_dir / "metrics.jsonl").exists()  # completed)
    trace = tmp_path / "trace"
    again = run_cli("run", "ck.yaml", "--rerun", "failed", "--wait", cwd=tmp_path,
                    env_extra={"SCALESTUDY_DATA_TRACE": str(trace)})
    assert again.returncode == 0, again.stdout + again.stderr
    assert job_id(study) != job
    record = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    at = found[0]
    assert record["resumed_from_step"] == at and record["checkpoint_load_s"] > 0
    assert record["steps_trained"] == STEPS and record["target_reached"] is False
    assert f"Resumed from step {at} (checkpoint" in (run_dir / "stdout.log").read_text()
    assert (run_dir / "attempts" / "1").is_dir()  # the killed attempt's logs are kept
    # nothing before the checkpoint was trained again: rank 0 read the batches of steps
    # at+1..STEPS of an uninterrupted run, and only those
    read = [json.loads(line)["ids"] for line in
            (trace / "rank0.jsonl").read_text().splitlines()]
    cfg = type("C", (), {"data": str(root), "layout": Layout(dp=2), "data_seed": 0,
                         "seq_len": 32, "model": "gpt-tiny"})()
    expected = loader.batches(source_for(cfg, 0, 65536), 16, at, STEPS - at)  # type: ignore[arg-type]
    assert read == [ids for ids, _ in expected]
