"""Preflight against the real schedulers: the Slurm testbed (partitions `debug`, no
limits, and `short`, at most 2 nodes and 10 minutes; accounting with the account
`scalestudy`) and the OpenPBS testbed (queues `debug-scaling`, 1-2 nodes and 1 h, and
`prod`, 2-4 nodes and 6 h). Each problem is caught with its message, through the CLI;
a clean study passes with one line; `run` stops before it submits anything."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli

SLURM_PROFILE = """
name: testbed
description: the localhost Slurm testbed (4 virtual nodes of 2 CPUs)
scheduler: slurm
launcher: srun
max_nodes: 4
cores_per_node: 2
threads_per_rank: 1
launcher_options: {{cpu_bind: none}}
{python}"""
PBS_PROFILE = """
name: pbslab
description: the OpenPBS testbed (4 hosts of 2 CPUs)
scheduler: pbs
launcher: mpirun
max_nodes: 4
cores_per_node: 2
threads_per_rank: 1
scheduler_options: {{place: scatter, select_terms: {{system: polaris}}}}
launcher_options: {{cpu_bind: none}}
{python}"""
STUDY = """
name: pf
system: profile.yaml
workload: {workload}
grid: {{nodes: {nodes}, ranks_per_node: [{rpn}], batch_size: [4]}}
job: {{account: {account}, {queue_key}: {queue}, walltime: "{walltime}"}}
"""
SYNTHETIC = "{model: small_cnn, image_size: 16, num_classes: 10, iters: 1}"
#: The specs here name the queue the old way (`job.partition`, `job.queue`), which is still
#: read, with one note first; the new form (`job.slurm.partition`) is tests/test_joboptions.
OLD_FORM = {"partition": "job.partition is now job.slurm.partition",
            "queue": "job.queue is now job.pbs.queue (or job.flux.queue)"}


def note(spec: Path, key: str) -> str:
    """The note `validate` and `run` print first for the old form of `key`."""
    return f"note: {spec}:6: {OLD_FORM[key]}; the old form is still read"


def write(directory: Path, profile: str, queue_key: str, nodes: str = "[1, 2]",
          rpn: int = 2, account: str = "scalestudy", queue: str = "short",
          walltime: str = "00:05:00", python: str = "", workload: str = SYNTHETIC) -> Path:
    (directory / "profile.yaml").write_text(
        profile.format(python=f"python: {python}\n" if python else ""))
    spec = directory / "pf.yaml"
    spec.write_text(STUDY.format(nodes=nodes, rpn=rpn, account=account, queue_key=queue_key,
                                 queue=queue, walltime=walltime, workload=workload))
    return spec


# ---------------------------------------------------------------- Slurm

SLURM_PROBLEMS = {
    "unknown-account": (
        {"account": "nosuch"},
        "{spec}:6: job.account: account nosuch is not one that user root may charge "
        "(sacctmgr show assoc lists: root, scalestudy): set job.account to one of them, or "
        "ask your centre to add root to nosuch; Slurm refuses such jobs where it enforces "
        "associations and charges your default account elsewhere"),
    "unknown-partition": (
        {"queue": "gpu"},
        "{spec}:6: job.partition: partition gpu does not exist (scontrol show partition "
        "lists debug, short): set job.partition to one of them"),
    "too-many-nodes": (
        {"nodes": "[1, 2, 4]"},
        "{spec}:5: grid.nodes: 4 node(s): partition short takes at most 2 nodes (scontrol "
        "show partition), so 1 run(s) would be refused or wait for ever; run those node "
        "counts as a study of their own with job.partition: debug (it takes 4-node jobs of "
        "00:05:00), or keep grid.nodes at most 2 (or exclude those node counts)"),
    "walltime-over-the-limit": (
        {"walltime": "00:30:00"},
        "{spec}:6: job.walltime: 00:30:00 is longer than partition short allows (00:10:00, "
        "scontrol show partition): the jobs would be refused or never start; lower "
        "job.walltime to 00:10:00, or run those node counts as a study of their own with "
        "job.partition: debug (it takes 1-node jobs of 00:30:00)"),
    "missing-torch": (
        {"python": "/usr/bin/python3"},
        "/usr/bin/python3 (profile testbed: python) cannot import torch "
        "(ModuleNotFoundError: No module named 'torch'; checked on this host, {host}; the "
        "compute nodes run it after the setup lines): install torch in it (pip install "
        "torch), or set job.python (or the profile's `python:`) to an interpreter that has it"),
}


@pytest.mark.slurm
def test_slurm_clean_study_passes_with_one_line(slurm_cluster, tmp_path: Path) -> None:
    spec = write(tmp_path, SLURM_PROFILE, "partition")
    done = run_cli("validate", "--preflight", str(spec), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        note(spec, "partition"),
        "preflight: ok: slurm answers; account scalestudy known; partition short takes 1-2 "
        "nodes and 00:10:00; at most 2 rank(s) on a testbed node's 2 cores; srun on PATH; "
        f"{sys.executable} imports torch {_torch()} (CPU-only) on this host, "
        f"{socket.gethostname()}"]


@pytest.mark.slurm
@pytest.mark.parametrize("problem", SLURM_PROBLEMS)
def test_slurm_problem_is_caught_with_its_fix(problem: str, slurm_cluster,
                                              tmp_path: Path) -> None:
    change, message = SLURM_PROBLEMS[problem]
    spec = write(tmp_path, SLURM_PROFILE, "partition", **change)
    done = run_cli("validate", "--preflight", str(spec), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        note(spec, "partition"),
        "preflight: error: " + message.format(spec=spec, host=socket.gethostname()),
        "error: preflight: 1 problem(s) above would make jobs of study pf fail or wait for "
        "ever: fix them"]


@pytest.mark.slurm
def test_slurm_run_stops_before_submitting_and_runs_when_clean(slurm_cluster,
                                                               tmp_path: Path) -> None:
    spec = write(tmp_path, SLURM_PROFILE, "partition", nodes="[1, 4]",
                 workload="{kind: command, command: [echo, 'Total img/sec on 2 GPU(s): 1.5']}")
    stopped = run_cli("run", str(spec), cwd=tmp_path)
    assert stopped.returncode == 2 and "takes at most 2 nodes" in stopped.stderr
    assert stopped.stderr.splitlines()[-1].endswith(
        "fix them, or run again with --no-preflight to submit anyway")
    assert not (tmp_path / "results" / "pf" / "jobs.jsonl").exists()
    spec = write(tmp_path, SLURM_PROFILE, "partition", nodes="[1, 2]",
                 workload="{kind: command, command: [echo, 'Total img/sec on 2 GPU(s): 1.5']}")
    done = run_cli("run", str(spec), "--wait", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.splitlines()[:2] == [note(spec, "partition"), (
        "preflight: ok: slurm answers; account scalestudy known; partition short takes 1-2 "
        "nodes and 00:10:00; at most 2 rank(s) on a testbed node's 2 cores; srun on PATH")]
    assert "2 job(s) submitted" in done.stdout


# ---------------------------------------------------------------- OpenPBS

PBS_PROBLEMS = {
    "unknown-queue": (
        {"queue": "gpu"},
        "{spec}:6: job.queue: queue gpu does not exist (qstat -Q -f lists debug-scaling, "
        "prod, workq): set job.queue to one of them"),
    "too-many-nodes": (
        {"nodes": "[1, 2, 4]"},
        "{spec}:5: grid.nodes: 4 node(s): queue debug-scaling takes at most 2 nodes (qstat "
        "-Q -f), so 1 run(s) would be refused or wait for ever; run those node counts as a "
        "study of their own with job.queue: prod or workq (they take 4-node jobs of "
        "00:05:00), or pack the study (`run --pack`: each allocation goes to a queue that "
        "takes its size), or keep grid.nodes at most 2 (or exclude those node counts)"),
    "too-few-nodes": (
        {"queue": "prod"},
        "{spec}:5: grid.nodes: 1 node(s): queue prod takes at least 2 nodes (qstat -Q -f), "
        "so 1 run(s) would be refused or wait for ever; run those node counts as a study "
        "of their own with job.queue: debug-scaling or workq (they take 1-node jobs of "
        "00:05:00), or pack the study (`run --pack`: each allocation goes to a queue that "
        "takes its size), or keep grid.nodes at least 2 (or exclude those node counts)"),
    "walltime-over-the-limit": (
        {"walltime": "02:00:00"},
        "{spec}:6: job.walltime: 02:00:00 is longer than queue debug-scaling allows "
        "(01:00:00, qstat -Q -f): the jobs would be refused or never start; lower "
        "job.walltime to 01:00:00, or run those node counts as a study of their own with "
        "job.queue: workq (it takes 1-node jobs of 02:00:00)"),
    "missing-torch": (
        {"python": "/usr/bin/python3"},
        "/usr/bin/python3 (profile pbslab: python) cannot import torch "
        "(ModuleNotFoundError: No module named 'torch'; checked on this host, pbslab; the "
        "compute nodes run it after the setup lines): install torch in it (pip install "
        "torch), or set job.python (or the profile's `python:`) to an interpreter that has it"),
}


def _pbs_spec(pbs_tmp_path: Path, **change: str) -> Path:
    return write(pbs_tmp_path, PBS_PROFILE, "queue", rpn=1, account="SomeAccount",
                 queue=change.pop("queue", "debug-scaling"), **change)


@pytest.mark.pbs
def test_pbs_clean_study_passes_with_one_line(pbs_cluster, pbs_tmp_path: Path) -> None:
    spec = _pbs_spec(pbs_tmp_path)
    done = pbs_cluster.scalestudy("validate", "--preflight", str(spec), cwd=pbs_tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        note(spec, "queue"),
        "preflight: ok: pbs answers; account SomeAccount not checked (pbs keeps no list of "
        "accounts to ask); queue debug-scaling takes 1-2 nodes and 01:00:00; at most 1 "
        f"rank(s) on a pbslab node's 2 cores; mpirun on PATH; {pbs_cluster.python} imports "
        f"torch {_torch()} (CPU-only) on this host, pbslab"]


@pytest.mark.pbs
@pytest.mark.parametrize("problem", PBS_PROBLEMS)
def test_pbs_problem_is_caught_with_its_fix(problem: str, pbs_cluster,
                                            pbs_tmp_path: Path) -> None:
    change, message = PBS_PROBLEMS[problem]
    spec = _pbs_spec(pbs_tmp_path, **change)
    done = pbs_cluster.scalestudy("validate", "--preflight", str(spec), cwd=pbs_tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        note(spec, "queue"),
        "preflight: error: " + message.format(spec=spec),
        "error: preflight: 1 problem(s) above would make jobs of study pf fail or wait for "
        "ever: fix them"]


@pytest.mark.pbs
def test_pbs_run_stops_before_qsub(pbs_cluster, pbs_tmp_path: Path) -> None:
    spec = _pbs_spec(pbs_tmp_path, queue="prod")
    done = pbs_cluster.scalestudy("run", str(spec), cwd=pbs_tmp_path)
    assert done.returncode == 2 and "takes at least 2 nodes" in done.stderr
    assert not (pbs_tmp_path / "results" / "pf" / "jobs.jsonl").exists()


def _torch() -> str:
    import torch

    return torch.__version__

