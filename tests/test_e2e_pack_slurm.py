"""`run --pack` on a real Slurm on localhost: a study of 1-, 2- and 4-node runs with
repeats as steps of one allocation, the same report rows as one job per run; the
allocation cancelled half-way and the rest finished by the next `run` (none lost, none
run twice); a partition with a short walltime splitting the study."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from scalestudy.execute import workspace as ws
from scalestudy.execute.packing.steplog import read_events
from tests.conftest import run_cli

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

PROFILE = """
name: testbed-pack
description: the localhost Slurm testbed (4 virtual nodes of 2 CPUs)
scheduler: slurm
launcher: srun
max_nodes: 4
cores_per_node: 2
threads_per_rank: 1
launcher_options: {cpu_bind: none}
"""
STUDY = """
name: {name}
system: profile.yaml
workload: {{model: small_cnn, image_size: 16, num_classes: 10, warmup_iters: 1, iters: 2,
           batches_per_iter: 2}}
grid: {{nodes: {nodes}, ranks_per_node: [1], batch_size: [4]}}
repeats: 2
job: {{walltime: "{walltime}"{job}}}
"""


def spec(tmp_path: Path, name: str, nodes: str = "[1, 2, 4]", walltime: str = "00:05:00",
         job: str = "") -> str:
    (tmp_path / "profile.yaml").write_text(PROFILE)
    path = tmp_path / f"{name}.yaml"
    path.write_text(STUDY.format(name=name, nodes=nodes, walltime=walltime, job=job))
    return str(path)


def steps(directory: Path) -> dict[str, list[tuple[str, str]]]:
    """allocation name -> its (event, run id) list."""
    return {a.name: [(e.event, e.run_id or "") for e in read_events(a / "steps.jsonl")]
            for a in sorted((directory / "allocations").iterdir())}


def ended_ok(directory: Path) -> dict[str, int]:
    """run id -> how many times a step of it ended with exit 0, over every allocation."""
    counts: dict[str, int] = {}
    for a in (directory / "allocations").iterdir():
        for e in read_events(a / "steps.jsonl"):
            if e.event == "ended" and e.rc == 0:
                counts[e.run_id] = counts.get(e.run_id, 0) + 1
    return counts


def completions(directory: Path) -> dict[str, int]:
    """run id -> how many of its attempts completed (the current one and those kept in
    attempts/<n>/): an exit_code file that says 0 (a step cut off right after it ended
    has no `ended` line), or, cut off before it wrote one, a whole metrics record (the
    workload's last act: the run counts as measured, as `run` counts it)."""
    counts: dict[str, int] = {}
    for run_dir in (directory / "runs").iterdir():
        attempts = [run_dir, *run_dir.glob("attempts/*")]
        counts[run_dir.name] = sum(1 for a in attempts if _completed(a))
    return counts


def _completed(attempt: Path) -> bool:
    code = attempt / "exit_code"
    if code.exists():
        return code.read_text().strip() == "0"
    return (attempt / ws.METRICS).exists() and ws.record_problem(
        ws.read_record(attempt / ws.METRICS)) is None


def rows(directory: Path) -> list[tuple]:
    scaling = pd.read_csv(directory / "report" / "scaling.csv")
    return sorted(tuple(r) for r in scaling[["world_size", "nodes", "batch_size",
                                             "n_repeats"]].itertuples(index=False))


def test_a_packed_study_gives_the_rows_one_job_per_run_gives(tmp_path: Path,
                                                             slurm_cluster) -> None:
    done = run_cli("run", spec(tmp_path, "packed", job=", pack: true"), "--wait", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 run(s) packed into 1 job(s)" in done.stdout
    packed = tmp_path / "results" / "packed"
    journal = [json.loads(x) for x in (packed / "jobs.jsonl").read_text().splitlines()]
    assert len({j["job_id"] for j in journal if "job_id" in j}) == 1  # one queue wait
    events = steps(packed)["a1"]
    assert events[0][0] == "allocation" and events[-1][0] == "done"
    four = json.loads((packed / "allocations" / "a1" / "allocation.json").read_text())
    assert four["nodes"] == 4 and [s["nodes"] for s in four["steps"]] == [4, 2, 1, 4, 2, 1]
    runs = pd.read_csv(packed / "runs.csv")
    assert set(runs["state"]) == {"completed"} and len(runs) == 6
    for run_id in runs["run_id"]:
        script = (packed / "runs" / run_id / "job.sh").read_text()
        assert "#SBATCH" not in script and '--nodelist="$SCALESTUDY_STEP_HOSTS"' in script
    status = json.loads((packed / "runs" / runs["run_id"][0] / "status.json").read_text())
    assert status["elapsed_s"] > 0 and status["started_at"]
    shown = run_cli("status", str(tmp_path / "packed.yaml"), cwd=tmp_path)
    assert "allocation a1" in shown.stdout, shown.stdout
    per_run = run_cli("run", spec(tmp_path, "per-run"), "--wait", cwd=tmp_path)
    assert per_run.returncode == 0, per_run.stdout + per_run.stderr
    assert rows(packed) == rows(tmp_path / "results" / "per-run")


def test_an_allocation_cancelled_half_way_loses_and_repeats_nothing(tmp_path: Path,
                                                                     slurm_cluster) -> None:
    path = spec(tmp_path, "cut")
    first = run_cli("run", path, "--pack", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    directory = tmp_path / "results" / "cut"
    job_id = json.loads((directory / "jobs.jsonl").read_text().splitlines()[-1])["job_id"]
    deadline = time.monotonic() + 120
    while sum(ended_ok(directory).values()) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    subprocess.run(["scancel", job_id], check=True)
    before = ended_ok(directory)
    assert 2 <= sum(before.values()) < 6
    again = run_cli("run", path, "--pack", "--wait", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    counts = completions(directory)
    assert len(counts) == 6 and set(counts.values()) == {1}  # none lost, none twice
    started_in_a2 = {r for e, r in steps(directory)["a2"] if e == "started"}
    assert not started_in_a2 & set(before)
    runs = pd.read_csv(directory / "runs.csv")
    assert set(runs["state"]) == {"completed"}


def test_a_short_partition_splits_the_study(tmp_path: Path, slurm_cluster) -> None:
    path = spec(tmp_path, "split", nodes="[1, 2]", walltime="00:04:00",
                job=", partition: short")
    # a store of its own: the session's holds other tests' timings, which size the
    # allocations differently from one test order to another
    store = {"SCALESTUDY_STORE": str(tmp_path / "history.sqlite")}
    shown = run_cli("plan", path, "--pack", "--json", cwd=tmp_path, env_extra=store)
    assert shown.returncode == 0, shown.stderr
    planned = json.loads(shown.stdout)["pack"]["allocations"]
    assert len(planned) > 1 and all(a["walltime"] <= "00:10:00" for a in planned)
    assert sorted(r for a in planned for r in a["runs"]) == sorted(
        r["run_id"] for r in json.loads(shown.stdout)["runs"])
    done = run_cli("run", path, "--pack", "--wait", cwd=tmp_path, env_extra=store)
    assert done.returncode == 0, done.stdout + done.stderr
    directory = tmp_path / "results" / "split"
    jobs = {json.loads(x)["job_id"] for x in (directory / "jobs.jsonl").read_text().splitlines()
            if '"job_id"' in x}
    assert len(jobs) == len(planned)
    assert set(pd.read_csv(directory / "runs.csv")["state"]) == {"completed"}
