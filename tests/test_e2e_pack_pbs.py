"""`run --pack` on a real OpenPBS (scripts/pbs-testbed): a study of 1-, 2- and 4-node
runs with repeats as steps of one allocation, each step's Open MPI on its own lines of
$PBS_NODEFILE; the same report rows as one job per run; the allocation deleted half-way
(qdel) and the rest finished by the next `run`, none lost and none run twice."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pytest

from scalestudy.execute.packing.steplog import read_events
from tests.test_e2e_pbs import PROFILE, cli, write

if TYPE_CHECKING:
    from tests.pbs_testbed import PBSCluster

pytestmark = [pytest.mark.pbs, pytest.mark.slow]

STUDY = """
name: {name}
system: profile.yaml
workload: {{model: small_cnn, image_size: 16, num_classes: 10, warmup_iters: 1, iters: 2,
           batches_per_iter: 2}}
grid: {{nodes: [1, 2, 4], ranks_per_node: [1], batch_size: [4]}}
repeats: 2
job: {{walltime: "00:05:00"{job}}}
"""


def setup(cluster: PBSCluster, directory: Path, name: str, job: str = "") -> str:
    write(directory, "profile.yaml", PROFILE.format(python=cluster.python))
    write(directory, f"{name}.yaml", STUDY.format(name=name, job=job))
    return f"{name}.yaml"


def ended_ok(directory: Path) -> dict[str, int]:
    """run id -> how many times a step of it ended with exit 0, over every allocation."""
    counts: dict[str, int] = {}
    for a in (directory / "allocations").iterdir():
        for e in read_events(a / "steps.jsonl"):
            if e.event == "ended" and e.rc == 0:
                counts[e.run_id] = counts.get(e.run_id, 0) + 1
    return counts


def rows(directory: Path) -> list[tuple]:
    scaling = pd.read_csv(directory / "report" / "scaling.csv")
    return sorted(tuple(r) for r in scaling[["world_size", "nodes", "batch_size",
                                             "n_repeats"]].itertuples(index=False))


def test_a_packed_study_on_pbs_gives_the_rows_one_job_per_run_gives(
        pbs_cluster: PBSCluster, pbs_tmp_path: Path) -> None:
    spec = setup(pbs_cluster, pbs_tmp_path, "packed", job=", pack: true")
    done = cli(pbs_cluster, pbs_tmp_path, "run", spec, "--wait", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 run(s) packed into 1 job(s)" in done.stdout
    directory = pbs_tmp_path / "results" / "packed"
    events = read_events(directory / "allocations" / "a1" / "steps.jsonl")
    hosts = {e.run_id: e.hosts for e in events if e.event == "started"}
    assert sorted(len(h) for h in hosts.values()) == [1, 1, 2, 2, 4, 4]
    for run_id, used in hosts.items():
        script = (directory / "runs" / run_id / "job.sh").read_text()
        assert "#PBS" not in script and '--hostfile "$SCALESTUDY_STEP_HOSTFILE"' in script
        seen = (directory / "runs" / run_id / "hosts.txt").read_text().split()
        assert seen == list(used)  # the step ran on the nodes the runner gave it
    assert set(pd.read_csv(directory / "runs.csv")["state"]) == {"completed"}
    per_run = cli(pbs_cluster, pbs_tmp_path, "run", setup(pbs_cluster, pbs_tmp_path, "per-run"),
                  "--wait", timeout=600)
    assert per_run.returncode == 0, per_run.stdout + per_run.stderr
    assert rows(directory) == rows(pbs_tmp_path / "results" / "per-run")


def test_an_allocation_deleted_half_way_on_pbs_loses_and_repeats_nothing(
        pbs_cluster: PBSCluster, pbs_tmp_path: Path) -> None:
    spec = setup(pbs_cluster, pbs_tmp_path, "cut")
    first = cli(pbs_cluster, pbs_tmp_path, "run", spec, "--pack")
    assert first.returncode == 0, first.stdout + first.stderr
    directory = pbs_tmp_path / "results" / "cut"
    deadline = time.monotonic() + 180
    while sum(ended_ok(directory).values()) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    cancelled = cli(pbs_cluster, pbs_tmp_path, "cancel", spec, "--json")
    assert len(json.loads(cancelled.stdout)["cancelled"]) == 1  # one job for all its runs
    before = ended_ok(directory)
    assert 2 <= sum(before.values()) < 6
    again = cli(pbs_cluster, pbs_tmp_path, "run", spec, "--pack", "--wait", timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    # each run measured exactly once, over all its attempts: the runs' own records (a
    # step that ended as qdel struck may have no `ended` event in the step journal)
    records = {run.name: sum(len(m.read_text().splitlines())
                             for m in run.glob("**/metrics.jsonl"))
               for run in (directory / "runs").iterdir()}
    assert len(records) == 6 and set(records.values()) == {1}, records
    assert set(pd.read_csv(directory / "runs.csv")["state"]) == {"completed"}
