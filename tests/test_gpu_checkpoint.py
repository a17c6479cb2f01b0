"""benchmarks/gpu_checkpoint.py runs end to end on CPU (gloo, two ranks, gpt-tiny): a
real sharded save, async save and load of the model and its optimizer, one JSON line
each, with the bytes the checkpoint holds on disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_checkpoint.py"


def test_the_checkpoint_benchmark_saves_and_loads_for_real(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         str(SCRIPT), "--cpu", "--model", "gpt-tiny", "--seq-len", "64", "--repeats", "1",
         "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    assert [(x["mode"], x["ranks"]) for x in lines] == [("sync", 2), ("async", 2)]
    for x in lines:
        # the model and AdamW's two moments: more bytes than the parameters alone
        assert x["bytes"] > 3 * 4 * 200_000
        assert 0 < x["save_blocked_s"] <= x["save_done_s"] and x["load_s"] > 0
    assert not list(tmp_path.glob("ckpt-*/*-0"))  # each checkpoint removed after use
