"""A real Slurm on localhost: studies submitted with sbatch (srun, mpirun), submitit and
the Torque-style qsub, followed to the end, reported; status and cancel on live jobs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import run_cli

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

PROFILE = """
name: testbed-{launcher}
description: the localhost Slurm testbed (4 virtual nodes of 2 CPUs)
scheduler: {scheduler}
launcher: {launcher}
max_nodes: 4
cores_per_node: 2
threads_per_rank: 1
launcher_options: {{cpu_bind: none{extra}}}
{sched}"""
STUDY = """
name: {name}
system: profile.yaml
workload: {{model: small_cnn, image_size: 16, num_classes: 10, warmup_iters: 1, iters: 2,
           batches_per_iter: 2}}
grid: {{nodes: {nodes}, ranks_per_node: [2], batch_size: [4]}}
job: {{walltime: "00:05:00"{job}}}
"""


def study(tmp_path: Path, name: str, launcher: str = "srun", scheduler: str = "slurm",
          nodes: str = "[1, 2]", job: str = "", extra: str = "") -> str:
    (tmp_path / "profile.yaml").write_text(
        PROFILE.format(launcher=launcher, scheduler=scheduler, extra=extra,
                       # Slurm's Torque-style qsub has no -f (PBS Pro's foreground flag)
                       sched="scheduler_options: {submit_args: []}\n"
                       if scheduler == "pbs" else ""))
    path = tmp_path / f"{name}.yaml"
    path.write_text(STUDY.format(name=name, nodes=nodes, job=job))
    return str(path)


def check_report(tmp_path: Path, name: str, world_sizes: list[int]) -> pd.DataFrame:
    directory = tmp_path / "results" / name
    runs = pd.read_csv(directory / "runs.csv")
    assert list(runs["state"]) == ["completed"] * len(world_sizes), runs[["state", "reason"]]
    assert sorted(runs["world_size"]) == world_sizes
    scaling = pd.read_csv(directory / "report" / "scaling.csv")
    base = scaling["world_size"].min()
    assert scaling.loc[scaling["world_size"] == base, "efficiency"].item() == 1.0
    assert (scaling["efficiency"] > 0).all()
    for run_id in runs["run_id"]:
        run_dir = directory / "runs" / run_id
        assert (run_dir / "job.sh").is_file() and (run_dir / "stdout.log").is_file()
        record = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
        assert record["world_size"] == record["nodes"] * 2
    return runs


def test_sbatch_srun_study_on_one_two_and_four_nodes(tmp_path: Path, slurm_cluster) -> None:
    spec = study(tmp_path, "srun", nodes="[1, 2, 4]")
    done = run_cli("run", spec, "--wait", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 job(s) submitted" in done.stdout and "report: " in done.stdout
    runs = check_report(tmp_path, "srun", [2, 4, 8])
    four = runs[runs["nodes"] == 4].iloc[0]
    assert len(set(four["hosts"].split(","))) == 4  # four virtual nodes, four host names
    script = (tmp_path / "results" / "srun" / "runs" / four["run_id"] / "job.sh").read_text()
    assert "#SBATCH -N 4" in script and "srun --nodes=4 --ntasks-per-node=2" in script
    again = run_cli("run", spec, "--wait", cwd=tmp_path)
    assert again.returncode == 0 and "0 job(s) submitted" in again.stdout
    journal = [line for line in (tmp_path / "results" / "srun" / "jobs.jsonl")
               .read_text().splitlines() if '"job_id"' in line]  # not the intent lines
    assert len(journal) == 3
    # the results store has each run with where it ran: job id, nodes, queue wait
    assert "history: 3 run attempt(s) of srun in " in done.stderr
    stored = [r for r in json.loads(run_cli("history", "--json", cwd=tmp_path).stdout)
              if r["directory"] == str((tmp_path / "results" / "srun").resolve())]
    ids = {json.loads(line)["run_id"]: json.loads(line)["job_id"] for line in journal}
    assert sorted(r["world_size"] for r in stored) == [2, 4, 8]
    for r in stored:
        placement = r["provenance"]["placement"]
        assert placement["job_id"] == ids[r["run_id"]]
        assert len(placement["nodes"]) == r["nodes"] and placement["queue_wait_s"] >= 0
        assert r["provenance"]["configuration"]["system"] == "testbed-srun"


def test_sbatch_mpirun_study(tmp_path: Path, slurm_cluster) -> None:
    spec = study(tmp_path, "mpirun", launcher="mpirun")
    done = run_cli("run", spec, "--wait", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    check_report(tmp_path, "mpirun", [2, 4])
    stored = [r for r in json.loads(run_cli("history", "--json", cwd=tmp_path).stdout)
              if r["directory"] == str((tmp_path / "results" / "mpirun").resolve())]
    assert len(stored) == 2  # the MPI that started the ranks, as its mpirun says
    assert all("Open MPI" in r["provenance"]["versions"]["mpi"] for r in stored)


def test_submitit_study(tmp_path: Path, slurm_cluster) -> None:
    spec = study(tmp_path, "submitit", job=", submit: submitit")
    done = run_cli("run", spec, "--wait", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    runs = check_report(tmp_path, "submitit", [2, 4])
    run_dir = tmp_path / "results" / "submitit" / "runs" / runs["run_id"][0]
    # submitit's own sbatch script went through scalestudy's submission engine
    script = (run_dir / "job.sh").read_text()
    assert "-m submitit.core._submit" in script and "#SBATCH --job-name=submitit-" in script
    journal = [json.loads(line) for line in
               (tmp_path / "results/submitit/jobs.jsonl").read_text().splitlines()]
    assert {e.get("via") for e in journal if "job_id" in e} == {"submitit"}
    assert sum(1 for e in journal if e.get("intent")) == len(runs)
    assert list((run_dir / "submitit").glob("*_submitted.pkl"))


def test_pbs_study_through_the_torque_qsub(tmp_path: Path, slurm_cluster) -> None:
    spec = study(tmp_path, "pbs", launcher="mpirun", scheduler="pbs")
    done = run_cli("run", spec, "--wait", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    runs = check_report(tmp_path, "pbs", [2, 4])
    run_dir = tmp_path / "results" / "pbs" / "runs" / runs["run_id"][1]
    assert (run_dir / "job.sh").read_text().startswith("#!/bin/bash\n#PBS -N pbs-")
    assert "Total img/sec on 4 GPU(s)" in (run_dir / "stdout.log").read_text()


SLEEPER = """
name: sleeper
system: profile.yaml
workload: {kind: command, command: [sleep, "300"]}
grid: {nodes: [1, 2]}
job: {walltime: "00:10:00"}
"""


def status_until(spec: Path, cwd: Path, wanted: str, timeout: float = 60) -> list[dict]:
    """`scalestudy status --json` until every run is in `wanted` (or the time is up)."""
    deadline = time.monotonic() + timeout
    while True:
        rows = json.loads(run_cli("status", str(spec), "--json", cwd=cwd).stdout)
        if all(r["state"] == wanted for r in rows) or time.monotonic() > deadline:
            return rows
        time.sleep(1)


def test_max_jobs_status_and_cancel_on_live_jobs(tmp_path: Path, slurm_cluster) -> None:
    study(tmp_path, "unused")
    spec = tmp_path / "sleeper.yaml"
    spec.write_text(SLEEPER)
    first = run_cli("run", str(spec), "--max-jobs", "1", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "1 job(s) submitted" in first.stdout and "1 held back by --max-jobs" in first.stdout
    second = run_cli("run", str(spec), cwd=tmp_path)  # a re-run submits only what is missing
    assert "1 job(s) submitted, 2 in the queue" in second.stdout
    rows = status_until(spec, tmp_path, "running")
    assert [r["state"] for r in rows] == ["running", "running"]
    cancelled = run_cli("cancel", str(spec), cwd=tmp_path)
    assert cancelled.returncode == 0 and "cancelled 2 job(s)" in cancelled.stdout
    rows = status_until(spec, tmp_path, "failed")
    assert all(r["state"] == "failed" and "cancelled" in r["reason"] for r in rows), rows
    journal = [line for line in (tmp_path / "results" / "sleeper" / "jobs.jsonl")
               .read_text().splitlines() if '"job_id"' in line]  # not the intent lines
    assert len(journal) == 2
