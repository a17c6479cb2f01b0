"""workload.data end to end: the benchmark trains on datasets written by the test's own
numpy/Pillow/tarfile code, on real gloo ranks under torchrun; the record carries the
input's figures; a bad dataset is one line `error: data: ...` and exit status 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.test_workload_data import write_images, write_tokens
from tests.test_workload_main import run_workload

CNN = ["--model", "small_cnn", "--image-size", "16", "--batch-size", "4", "--num-classes",
       "10", "--warmup-iters", "1", "--iters", "2", "--batches-per-iter", "2",
       "--no-diagnostics"]
GPT = ["--model", "gpt-tiny", "--seq-len", "16", "--batch-size", "2", "--warmup-iters", "1",
       "--iters", "2", "--batches-per-iter", "2", "--no-diagnostics"]
DATA_KEYS = {"data_kind", "data_path", "data_workers", "data_stage", "input_wait_s",
             "input_wait_max_s", "input_wait_fraction", "decode_s", "bytes_read", "read_GBps",
             "stage_s", "stage_bytes", "samples_seen", "epoch"}


def workload(tmp_path: Path, args: list[str], ranks: int = 1, env: dict[str, str] | None = None
             ) -> tuple[int, str, dict | None]:
    metrics = tmp_path / "metrics.jsonl"
    launch = (["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks)]
              if ranks > 1 else [])
    cmd = [sys.executable, *launch, "-m", "scalestudy.workload", *args, "--metrics",
           str(metrics)]
    if env:
        import os
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
    try:
        proc = run_workload(cmd, tmp_path, timeout=240)
    finally:
        if env:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    record = json.loads(metrics.read_text().splitlines()[-1]) if metrics.exists() else None
    return proc.returncode, proc.stderr + proc.stdout, record


@pytest.mark.slow
def test_two_ranks_read_every_image_once_per_epoch(tmp_path: Path) -> None:
    data = write_images(tmp_path / "img", shards=4, per_shard=5, kinds=("png", "jpg", "npy"))
    trace = tmp_path / "trace"
    code, out, record = workload(tmp_path, [*CNN, "--data", str(data), "--data-workers", "1"],
                                 ranks=2, env={"SCALESTUDY_DATA_TRACE": str(trace)})
    assert code == 0, out[-3000:]
    assert record is not None and set(record) >= DATA_KEYS
    assert (record["data_kind"], record["data_workers"], record["data_stage"]) == (
        "images", 1, "none")
    # 6 steps of 4 on each of 2 ranks: 24 samples per rank, 10 per rank and epoch
    assert record["samples_seen"] == 48 and record["epoch"] == 3
    assert record["bytes_read"] > 0 and record["read_GBps"] > 0
    assert 0 <= record["input_wait_fraction"] < 1 and record["decode_s"] > 0
    assert "Input: waited" in out
    seen = {0: [], 1: []}
    for rank in (0, 1):
        for line in (trace / f"rank{rank}.jsonl").read_text().splitlines():
            batch = json.loads(line)
            seen[rank] += [i for i, e in zip(batch["ids"], batch["epochs"], strict=True)
                           if e == 0]
    assert sorted(seen[0] + seen[1]) == [(s << 32) + k for s in range(4) for k in range(5)]
    assert not set(seen[0]) & set(seen[1])


@pytest.mark.slow
def test_staged_tokens_record_the_copy_apart_and_remove_it(tmp_path: Path) -> None:
    data = write_tokens(tmp_path / "tok", np.arange(2000) % 300, 300, "uint32")
    local = tmp_path / "local"
    local.mkdir()
    code, out, record = workload(
        tmp_path, [*GPT, "--data", str(data), "--data-workers", "0", "--data-stage", "local"],
        env={"SCALESTUDY_LOCAL_STORAGE": str(local)})
    assert code == 0, out[-3000:]
    assert record is not None and record["data_kind"] == "tokens"
    assert record["stage_s"] > 0 and record["stage_bytes"] == 2000 * 4
    assert record["bytes_read"] == 2 * 4 * 17 * 4  # 2 timed iterations x 2 steps x 2 windows
    assert list(local.iterdir()) == []  # the copy is gone


@pytest.mark.slow
@pytest.mark.parametrize("problem", ["truncated", "no_cls", "token_id", "few_windows"])
def test_a_bad_dataset_is_one_line_and_exit_2(tmp_path: Path, problem: str) -> None:
    if problem == "truncated":
        data = write_images(tmp_path / "d", shards=1, per_shard=10)  # 24 samples are read
        shard = data / "train-000000.tar"
        shard.write_bytes(shard.read_bytes()[:12_000])  # inside a member
        args, expect = CNN, "train-000000.tar: truncated or corrupt tar"
    elif problem == "no_cls":
        data = write_images(tmp_path / "d", shards=1, per_shard=4, cls=False)
        args, expect = CNN, "has no sample000000.cls"
    elif problem == "token_id":
        data = write_tokens(tmp_path / "d", np.arange(2000) % 400, 300)
        args, expect = GPT, "is >= vocab_size 300 of meta.json; re-tokenise"
    else:
        data = write_tokens(tmp_path / "d", np.arange(10) % 30, 30)
        args, expect = GPT, "0 window(s) of 17 tokens for 1 data-parallel replicas"
    code, out, record = workload(tmp_path, [*args, "--data", str(data), "--data-workers",
                                            "0" if problem != "no_cls" else "2"],
                                 )
    errors = [line for line in out.splitlines() if line.startswith("error: data:")]
    assert len(errors) >= 1 and expect in errors[0], out[-3000:]
    assert "Traceback" not in out and record is None
    assert code == 2


@pytest.mark.slow
@pytest.mark.parametrize("layout", [["--pp", "2"], ["--backend", "fsdp"]])
def test_tokens_train_under_pipeline_and_fsdp(tmp_path: Path, layout: list[str]) -> None:
    data = write_tokens(tmp_path / "tok", np.arange(3000) % 250, 256)
    code, out, record = workload(tmp_path, [*GPT, *layout, "--data", str(data),
                                            "--data-workers", "1"], ranks=2)
    assert code == 0, out[-3000:]
    assert record is not None and record["data_kind"] == "tokens"
    replicas = 1 if "--pp" in layout else 2
    assert record["samples_seen"] == 6 * 2 * replicas  # 6 steps of 2 sequences per replica
    assert record["final_loss"] is not None and record["final_loss"] > 0
