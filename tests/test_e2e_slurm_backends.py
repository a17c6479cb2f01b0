"""Horovod and DeepSpeed on the real Slurm testbed: sbatch + mpirun (one process per
rank, Horovod over MPI) and sbatch + srun (DeepSpeed over torch.distributed), side by
side with DDP on one and two nodes."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import run_cli
from tests.test_e2e_backends import _need

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

PROFILE = """
name: testbed-{launcher}
description: the localhost Slurm testbed (4 virtual nodes of 2 CPUs)
scheduler: slurm
launcher: {launcher}
max_nodes: 4
cores_per_node: 2
threads_per_rank: 1
launcher_options: {{cpu_bind: none}}
"""
STUDY = """
name: {name}
system: profile.yaml
workload: {{model: small_cnn, image_size: 16, num_classes: 10, warmup_iters: 1, iters: 2,
           batches_per_iter: 2}}
grid: {{nodes: [1, 2], ranks_per_node: [2], batch_size: [4], backend: [ddp, {backend}]}}
job: {{walltime: "00:05:00"}}
"""


def _study(tmp_path: Path, name: str, launcher: str, backend: str) -> str:
    (tmp_path / "profile.yaml").write_text(PROFILE.format(launcher=launcher))
    path = tmp_path / f"{name}.yaml"
    path.write_text(STUDY.format(name=name, backend=backend))
    return str(path)


def _check(tmp_path: Path, name: str, backend: str) -> pd.DataFrame:
    runs = pd.read_csv(tmp_path / "results" / name / "runs.csv")
    assert list(runs["state"]) == ["completed"] * 4, runs[["state", "reason"]]
    for b in ("ddp", backend):
        mine = runs[runs["backend"] == b]
        assert sorted(mine["world_size"]) == [2, 4], b
        assert (mine["throughput"] > 0).all() and mine["comm_overhead"].notna().all()
    two_nodes = runs[(runs["backend"] == backend) & (runs["nodes"] == 2)].iloc[0]
    assert len(set(two_nodes["hosts"].split(","))) == 2
    return runs


def test_horovod_over_mpirun_on_one_and_two_nodes(tmp_path: Path, slurm_cluster) -> None:
    _need("horovod.torch", "SCALESTUDY_REQUIRE_HOROVOD")
    spec = _study(tmp_path, "hvd-slurm", "mpirun", "horovod")
    done = run_cli("run", spec, "--wait", cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    runs = _check(tmp_path, "hvd-slurm", "horovod")
    assert set(runs.loc[runs["backend"] == "horovod", "horovod.controller"]) == {"mpi"}


def test_deepspeed_over_srun_on_one_and_two_nodes(tmp_path: Path, slurm_cluster) -> None:
    _need("deepspeed", "SCALESTUDY_REQUIRE_DEEPSPEED")
    spec = _study(tmp_path, "ds-slurm", "srun", "deepspeed")
    done = run_cli("run", spec, "--wait", cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    _check(tmp_path, "ds-slurm", "deepspeed")
