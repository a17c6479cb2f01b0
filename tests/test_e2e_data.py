"""Datasets written by the user's own numpy/Pillow/tarfile code (not by scalestudy) run
end to end through `scalestudy run`: on this machine and on the real Slurm testbed
(sbatch + srun over two nodes); every run's record carries its input wait and read
bandwidth, and the report's table keeps them."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import run_cli
from tests.slurm_testbed import TESTBED_PROFILE
from tests.test_datasets import user_images, user_shard, user_tokens

pytestmark = pytest.mark.slow

STUDY = """
name: {name}
system: {system}
workload: {{{model}, warmup_iters: 1, iters: 3, batches_per_iter: 2,
           data: {{path: {data}, prefetch: 2, seed: 3}}}}
grid: {{nodes: {nodes}, ranks_per_node: [{ranks}], batch_size: [{batch}], data_workers: [0, 1]}}
job: {{walltime: "00:05:00"}}
"""
MODELS = {"tokens": ("model: gpt-tiny, seq_len: 16", 2),
          "images": ("model: small_cnn, image_size: 16, num_classes: 10", 4)}


def write_data(tmp_path: Path, kind: str, ranks: int) -> Path:
    """The user's dataset: token files (uint32, as meta.json says) or four PNG shards."""
    if kind == "tokens":
        return user_tokens(tmp_path / "my tokens", n=20_000, vocab=300, dtype="uint32")
    path = user_images(tmp_path / "my images", shards=0)
    for s in range(max(4, ranks)):
        user_shard(path / f"train-{s:06d}.tar", [(s + i) % 6 for i in range(8)],
                   size=24, first_key=100 * s)
    return path


def run_and_check(tmp_path: Path, kind: str, system: str, nodes: str, ranks: int,
                  world_sizes: list[int]) -> None:
    data = write_data(tmp_path, kind, max(world_sizes))
    model, batch = MODELS[kind]
    spec = tmp_path / f"{kind}.yaml"
    spec.write_text(STUDY.format(name=kind, system=system, model=model, data=f"'{data}'",
                                 nodes=nodes, ranks=ranks, batch=batch))
    follow = ["--wait"] if system != "local" else []  # a scheduler's: followed to the end
    done = run_cli("run", str(spec), *follow, cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    directory = tmp_path / "results" / kind
    runs = pd.read_csv(directory / "runs.csv")
    assert list(runs["state"]) == ["completed"] * len(runs), runs[["state", "reason"]]
    assert sorted(runs["world_size"]) == sorted(w for w in world_sizes for _ in (0, 1))
    for run_id in runs["run_id"]:
        record = json.loads((directory / "runs" / run_id / "metrics.jsonl")
                            .read_text().splitlines()[-1])
        assert record["data_path"] == str(data) and record["data_kind"] == kind
        assert 0 <= record["input_wait_fraction"] < 1 and record["input_wait_s"] >= 0
        assert record["bytes_read"] > 0 and record["read_GBps"] > 0
        assert record["throughput"] > 0 and record["global_batch"] == \
            record["batch_size"] * record["world_size"]
    scaling = pd.read_csv(directory / "report" / "scaling.csv")
    assert {"input_wait_fraction", "read_GBps", "data_workers"} <= set(scaling.columns)
    assert (scaling["read_GBps"] > 0).all()


@pytest.mark.parametrize("kind", ["tokens", "images"])
def test_a_users_own_dataset_runs_here(tmp_path: Path, kind: str) -> None:
    run_and_check(tmp_path, kind, "local", "[1]", 2, [2])


@pytest.mark.slurm
@pytest.mark.parametrize("kind", ["tokens", "images"])
def test_a_users_own_dataset_runs_on_the_slurm_testbed(tmp_path: Path, kind: str,
                                                       slurm_cluster) -> None:
    (tmp_path / "profile.yaml").write_text(TESTBED_PROFILE)
    run_and_check(tmp_path, kind, "profile.yaml", "[1, 2]", 2, [2, 4])
