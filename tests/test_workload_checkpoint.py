"""workload/checkpoint.py: when saves fall due, which checkpoint counts (only one with its
complete marker; the last good one is never deleted before a newer one is complete);
and, slow, 2 gloo ranks under torchrun training
to a measured target, SIGKILLed after their first complete checkpoint and started again:
they resume from it, read the batches an uninterrupted run reads, and end where it ends;
the same through `scalestudy run`, which starts the killed run again."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scalestudy.workload import checkpoint
from scalestudy.workload.checkpoint import MARKER, due, latest, remaining, stale
from tests.test_workload_main import REPO


def test_saves_fall_due_every_n_steps_and_the_timed_loop_resumes_in_place() -> None:
    assert [s for s in range(13) if due(s, 4)] == [4, 8, 12]
    assert not any(due(s, None) for s in range(5))
    assert checkpoint.seconds_to_steps(0) == 1 and checkpoint.seconds_to_steps(7) == 7
    # 2 warm-up + 10 timed iterations of 5 steps: resumed after 23 steps (4 iterations)
    assert remaining(23, 2, 10, 5) == (0, 8)
    assert remaining(5, 2, 10, 5) == (1, 10)
    assert remaining(60, 2, 10, 5) == (0, 1)  # at least one timed iteration


def mark(root: Path, step: int, complete: bool = True) -> Path:
    path = checkpoint.step_dir(root, step)
    path.mkdir(parents=True)
    (path / "__0_0.distcp").write_bytes(b"x" * 10)
    if complete:
        checkpoint.write_marker(path / MARKER, checkpoint.progress(step, {}, None, 2))
    return path


def test_only_a_complete_checkpoint_counts_and_the_last_good_one_stays(tmp_path: Path) -> None:
    assert latest(tmp_path / "none") is None
    mark(tmp_path, 10)
    mark(tmp_path, 20)
    mark(tmp_path, 30, complete=False)  # killed while saving
    (tmp_path / "step-000000040").mkdir()  # a save that wrote nothing yet
    step, saved = latest(tmp_path) or (None, {})
    assert step == 20 and saved["step"] == 20 and saved["format"] == checkpoint.FORMAT
    assert [p.name for p in stale(tmp_path, 20)] == ["step-000000010", "step-000000030",
                                                     "step-000000040"]
    assert not list(tmp_path.rglob("*.tmp"))  # the marker was renamed into place
    (checkpoint.step_dir(tmp_path, 20) / MARKER).write_text("{torn")
    assert latest(tmp_path) is not None and latest(tmp_path)[0] == 10  # type: ignore[index]
    (tmp_path / checkpoint.FINISHED).write_text("{}")  # trained to its end: start over
    assert latest(tmp_path) is None


def start(tmp_path: Path, root: Path, trace: Path) -> subprocess.Popen[str]:
    from tests.test_workload_totarget import GPT

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", "-m", "scalestudy.workload", *GPT, "--data", str(root), "--target-metric",
           "val_loss", "--target-value", "0.01", "--eval-every", "10", "--max-steps", "30",
           "--checkpoint-dir", str(tmp_path / "ck"), "--checkpoint-every-steps", "10",
           "--metrics", str(tmp_path / "metrics.jsonl")]
    env = os.environ | {"PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path),
                        "SCALESTUDY_DATA_TRACE": str(trace)}
    return subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def kill_tree(pid: int) -> None:
    """SIGKILL a process and every process under it, as a node failure would (torchrun
    starts each rank in a session of its own: killing its group leaves the ranks)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        ppid = int(text[text.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(stat.parent.name))
    todo, tree = [pid], []
    while todo:
        tree.append(todo.pop())
        todo += children.get(tree[-1], [])
    for each in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(each, signal.SIGKILL)


@pytest.mark.slow
def test_two_ranks_killed_after_a_checkpoint_resume_from_it(tmp_path: Path) -> None:
    from scalestudy.workload.data import loader
    from scalestudy.workload.data.feed import source_for
    from scalestudy.workload.layout import Layout
    from tests.test_workload_totarget import tokens

    root, _ = tokens(tmp_path)
    first = start(tmp_path, root, tmp_path / "trace1")
    deadline = time.monotonic() + 120
    while latest(tmp_path / "ck") is None and first.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    kill_tree(first.pid)
    first.wait()
    found = latest(tmp_path / "ck")
    assert found is not None and not (tmp_path / "metrics.jsonl").exists()
    again = start(tmp_path, root, tmp_path / "trace2")
    out, _ = again.communicate(timeout=180)
    assert again.returncode == 0, out[-3000:]
    record = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    at = found[0]
    assert record["resumed_from_step"] == at and record["checkpoint_load_s"] > 0
    assert f"Resumed from step {at} (checkpoint" in out
    # the uninterrupted run's end: the impossible target runs into max_steps
    assert record["steps_trained"] == 30 and record["target_reached"] is False
    assert [c[0] for c in record["eval_curve"]] == [10, 20, 30]
    assert record["train_s"] > found[1]["outcome"]["train_s"]
    # each rank read on from its data position: the batches of steps at+1.. of one run
    read = [json.loads(line)["ids"] for line in
            (tmp_path / "trace2" / "rank0.jsonl").read_text().splitlines()]
    cfg = type("C", (), {"data": str(root), "layout": Layout(dp=2), "data_seed": 0,
                         "seq_len": 32, "model": "gpt-tiny"})()
    expected = loader.batches(source_for(cfg, 0, 65536), 16, at, 30 - at)  # type: ignore[arg-type]
    assert read == [ids for ids, _ in expected]


SPEC = """name: ck
system: local
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
target: {{metric: val_loss, value: 0.01, eval_every: 10, max_steps: 60}}
grid:
  ranks_per_node: [2]
  batch_size: [16]
"""


@pytest.mark.slow
def test_scalestudy_run_resumes_a_killed_run_from_its_checkpoint(tmp_path: Path) -> None:
    from tests.test_workload_totarget import tokens

    root, _ = tokens(tmp_path)
    (tmp_path / "s.yaml").write_text(SPEC.format(data=root))
    cli = [sys.executable, "-c", "from scalestudy.cli import main; main()", "run", "s.yaml",
           "--results", "res"]
    env = os.environ | {"PYTHONPATH": str(REPO)}
    first = subprocess.Popen(cli, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("res/ck/runs/*/checkpoint/step-*/complete.json")) \
            and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    kill_tree(first.pid)  # the job, its launcher and ranks, and `run` itself
    first.wait()
    run_dir = next((tmp_path / "res/ck/runs").iterdir())
    found = latest(run_dir / "checkpoint")
    assert found is not None and not (run_dir / "metrics.jsonl").exists()
    again = subprocess.run(cli, cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    record = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert record["resumed_from_step"] == found[0] and record["steps_trained"] == 60
    assert f"Resumed from step {found[0]}" in (run_dir / "stdout.log").read_text()
    assert (run_dir / "attempts" / "1").is_dir()  # the killed attempt's logs are kept
