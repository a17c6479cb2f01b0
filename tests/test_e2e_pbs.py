"""A real OpenPBS (scripts/pbs-testbed): studies submitted with qsub and Open MPI's mpirun
over $PBS_NODEFILE, followed to the end and reported; Polaris-style directives; status
as one batched qstat, cancel through qdel, walltime and failure classes, a job id the
server never knew. Everything runs as pbsuser through the real CLI."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pytest

if TYPE_CHECKING:
    from tests.pbs_testbed import PBSCluster

pytestmark = [pytest.mark.pbs, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
# The testbed's 4 MoMs have 2 CPUs each. gpus-per-node asks `N:ncpus=2:mpiprocs=R`:
# Open MPI takes its slots from $PBS_NODEFILE, one line per mpiprocs (dev/pbs-testbed.md).
PROFILE = """
name: pbslab
description: the OpenPBS testbed (4 MoMs of 2 CPUs)
scheduler: pbs
launcher: mpirun
max_nodes: 4
cores_per_node: 2
threads_per_rank: 1
python: {python}
launcher_options: {{cpu_bind: none}}
scheduler_options: {{gpus_directive: gpus-per-node, place: scatter}}
"""
# ALCF Polaris's directives, on the testbed's scaled-down queue: whole nodes
# (select=N:system=polaris, one nodefile line per node), so one rank per node.
POLARIS = """
name: pbslab-polaris
scheduler: pbs
launcher: mpirun
max_nodes: 2
cores_per_node: 2
threads_per_rank: 1
python: {python}
launcher_options: {{cpu_bind: none}}
scheduler_options:
  queue: debug-scaling
  account_required: true
  select_terms: {{system: polaris}}
  place: scatter
  filesystems: home:eagle
  gpus_directive: none
"""
CNN = """
name: cnn
system: profile.yaml
workload: {model: small_cnn, image_size: 16, num_classes: 10, warmup_iters: 1, iters: 2,
           batches_per_iter: 2}
grid: {nodes: [1, 2], ranks_per_node: [1, 2], batch_size: [4]}
job: {walltime: "00:05:00"}
"""
THROUGHPUT = "[python3, -c, \"print('Total img/sec on 1 GPU(s): 1.0')\"]"
COMMAND = """
name: {name}
system: {profile}
workload: {{kind: command, command: {command}}}
grid: {{nodes: {nodes}}}
job: {{walltime: "{walltime}"{job}}}
"""


def write(directory: Path, name: str, text: str) -> Path:
    """A file pbsuser can read."""
    path = directory / name
    path.write_text(text, encoding="utf-8")
    path.chmod(0o644)
    return path


def command_study(directory: Path, name: str, command: str, nodes: str = "[1]",
                  walltime: str = "00:05:00", profile: str = "profile.yaml",
                  job: str = "") -> str:
    """A study of a `command` workload, as a file name in `directory`."""
    write(directory, f"{name}.yaml", COMMAND.format(
        name=name, profile=profile, command=command, nodes=nodes, walltime=walltime,
        job=job))
    return f"{name}.yaml"


@pytest.fixture(scope="module")
def work(pbs_cluster: PBSCluster) -> Iterator[Path]:
    """One directory pbsuser owns for the module's studies, with both profiles and a
    `qstat` first on PATH that logs each call and runs the real one; at the end, what a
    failed test left queued or running is cancelled."""
    directory = pbs_cluster.user_dir("e2e")
    write(directory, "profile.yaml", PROFILE.format(python=pbs_cluster.python))
    write(directory, "profile-polaris.yaml", POLARIS.format(python=pbs_cluster.python))
    wrappers = directory / "bin"
    wrappers.mkdir()
    qstat = write(wrappers, "qstat", f'#!/bin/sh\necho "$*" >> {directory}/qstat.log\n'
                  'exec /opt/pbs/bin/qstat "$@"\n')
    qstat.chmod(0o755)
    subprocess.run(["chown", "-R", f"{pbs_cluster.user}:{pbs_cluster.user}", str(directory)],
                   check=True)
    yield directory
    for spec in sorted(directory.glob("*.yaml")):
        if (directory / "results" / spec.stem / "jobs.jsonl").exists():
            cli(pbs_cluster, directory, "cancel", spec.name)


def cli(cluster: PBSCluster, work: Path, *args: str,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`scalestudy ARGS` as pbsuser in `work`, the logging qstat first on PATH."""
    return cluster.run_as_user(
        ["env", f"PATH={work}/bin:/opt/pbs/bin:/usr/bin:/bin", str(cluster.python), "-c",
         "from scalestudy.cli import main; main()", *args],
        cwd=work, timeout=timeout, env={"PYTHONPATH": str(ROOT)})


def qstat_calls(work: Path) -> list[str]:
    """The qstat command lines logged so far (and forget them)."""
    log = work / "qstat.log"
    calls = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return calls


def status(cluster: PBSCluster, work: Path, spec: str) -> list[dict[str, Any]]:
    """`scalestudy status --json` rows."""
    done = cli(cluster, work, "status", spec, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return list(json.loads(done.stdout))


def status_until(cluster: PBSCluster, work: Path, spec: str, wanted: set[str],
                 timeout: float = 120) -> list[dict[str, Any]]:
    """Status rows once every run's state is in `wanted` (or when the time is up)."""
    deadline = time.monotonic() + timeout
    while True:
        rows = status(cluster, work, spec)
        if all(r["state"] in wanted for r in rows) or time.monotonic() > deadline:
            return rows
        time.sleep(2)


def test_cnn_study_over_one_and_two_nodes_is_run_and_reported(
        pbs_cluster: PBSCluster, work: Path) -> None:
    write(work, "cnn.yaml", CNN)
    done = cli(pbs_cluster, work, "run", "cnn.yaml", "--wait")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 job(s) submitted" in done.stdout and "report: " in done.stdout
    directory = work / "results" / "cnn"
    runs = pd.read_csv(directory / "runs.csv")
    assert list(runs["state"]) == ["completed"] * 4, runs[["state", "reason"]]
    assert sorted(runs["world_size"]) == [1, 2, 2, 4]
    assert (directory / "report" / "index.html").is_file()
    scaling = pd.read_csv(directory / "report" / "scaling.csv")
    assert (scaling["efficiency"] > 0).all()
    for run in runs.itertuples():
        run_dir = directory / "runs" / str(run.run_id)
        hosts = (run_dir / "hosts.txt").read_text().split()
        assert len(hosts) == run.nodes and len(set(hosts)) == run.nodes, hosts
        assert set(hosts) <= set(pbs_cluster.nodes)
        assert set(str(run.hosts).split(",")) == set(hosts)  # where the ranks ran
        script = (run_dir / "job.sh").read_text()
        select = f"#PBS -l select={run.nodes}:ncpus=2:mpiprocs={run.ranks_per_node}"
        assert select in script and "#PBS -l place=scatter" in script
        record = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
        assert record["world_size"] == run.nodes * run.ranks_per_node
    again = cli(pbs_cluster, work, "run", "cnn.yaml")
    assert again.returncode == 0 and "0 job(s) submitted" in again.stdout


def test_polaris_directives_are_accepted_and_kept(pbs_cluster: PBSCluster, work: Path) -> None:
    spec = command_study(work, "polaris", THROUGHPUT, nodes="[1, 2]", walltime="00:07:00",
                         profile="profile-polaris.yaml", job=", account: SomeAccount")
    refused = cli(pbs_cluster, work, "run", command_study(
        work, "noaccount", THROUGHPUT, profile="profile-polaris.yaml"), "--dry-run")
    assert refused.returncode != 0 and "account" in refused.stderr
    done = cli(pbs_cluster, work, "run", spec, "--wait")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = status(pbs_cluster, work, spec)
    assert [r["state"] for r in rows] == ["completed", "completed"]
    jobs = pbs_cluster.qstat(*(r["job_id"] for r in rows))
    for row in rows:
        attrs = jobs[row["job_id"]]
        assert attrs["queue"] == "debug-scaling" and attrs["Account_Name"] == "SomeAccount"
        resources = attrs["Resource_List"]
        assert resources["select"] == f"{row['nodes']}:system=polaris"
        assert resources["place"] == "scatter" and resources["filesystems"] == "home:eagle"
        assert resources["walltime"] == "00:07:00" and resources["nodect"] == row["nodes"]
        assert len({part.split("/")[0] for part in attrs["exec_host"].split("+")}) == \
            row["nodes"]


def test_status_is_one_qstat_cancel_is_qdel_and_an_unknown_id_ends_lost(
        pbs_cluster: PBSCluster, work: Path) -> None:
    spec = command_study(work, "sleeper", "[sleep, \"300\"]", nodes="[1, 2, 3]",
                         walltime="00:10:00")
    started = cli(pbs_cluster, work, "run", spec, "--only", "nodes<=2")
    assert started.returncode == 0 and "2 job(s) submitted" in started.stdout, started.stderr
    rows = status_until(pbs_cluster, work, spec, {"running", "pending"})
    assert [r["state"] for r in rows] == ["running", "running", "pending"], rows
    # The third run's job id is one the server never had (a purged job), submitted long
    # ago: past the grace period of a job not listed yet.
    journal = work / "results" / "sleeper" / "jobs.jsonl"
    lost_run = rows[2]["run_id"]
    with journal.open("a") as out:
        out.write(json.dumps({"run_id": lost_run, "job_id": "99999.pbslab", "attempt": 1,
                              "scheduler": "pbs", "via": "native",
                              "submitted_at": "2020-01-01T00:00:00+00:00"}) + "\n")
    qstat_calls(work)
    rows = status(pbs_cluster, work, spec)
    calls = qstat_calls(work)
    assert len(calls) == 1 and calls[0].startswith("-x -f -F json "), calls
    # asked by their full ids (`20.pbslab`), as the journal holds them
    assert sorted(c.split(".")[0] for c in calls[0].split()[4:]) == sorted(
        r["job_id"].split(".")[0] for r in rows)
    assert [r["state"] for r in rows] == ["running", "running", "failed"]  # qstat exit 153
    assert "(lost)" in rows[2]["reason"] and "99999.pbslab" in rows[2]["reason"]
    cancelled = cli(pbs_cluster, work, "cancel", spec)
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    assert "cancelled 2 job(s)" in cancelled.stdout
    rows = status_until(pbs_cluster, work, spec, {"failed"}, timeout=60)
    for row in rows[:2]:
        assert row["state"] == "failed" and row["failure"] == "cancelled", row
        assert "terminated by pbsuser@" in row["reason"]
    assert len(qstat_calls(work)) >= 1
    again = cli(pbs_cluster, work, "cancel", spec)  # nothing left to cancel
    assert again.returncode == 0, again.stderr


def test_walltime_and_a_failing_program_are_classified(
        pbs_cluster: PBSCluster, work: Path) -> None:
    slow = command_study(work, "walltime", "[sleep, \"120\"]", walltime="00:00:10")
    broken = command_study(work, "broken", "[python3, -c, \"import scalestudy_no_such\"]")
    for spec in (slow, broken):  # both queued before either is followed
        done = cli(pbs_cluster, work, "run", spec)
        assert done.returncode == 0 and "1 job(s) submitted" in done.stdout, done.stderr
    for spec, failure, line in [
            (broken, "import_error",
             "ModuleNotFoundError: No module named 'scalestudy_no_such'"),
            (slow, "walltime", None)]:
        done = cli(pbs_cluster, work, "run", spec, "--wait", timeout=240)
        assert done.returncode == 1, done.stdout + done.stderr
        (row,) = status(pbs_cluster, work, spec)
        assert (row["state"], row["failure"]) == ("failed", failure), row
        if line:
            assert line in row["failure_line"], row
        else:
            assert "exceeded resource walltime" in row["reason"], row


def test_a_study_run_with_an_exclude_list_never_lands_on_that_host(
        pbs_cluster: PBSCluster, work: Path) -> None:
    """PBS cannot exclude a host in select: with `--exclude-nodes`, each qsub names the
    hosts outside the list (-l select=1:...:host=A+...); every job's exec_host and
    nodefile leave n1 out, and the job script says why."""
    spec = command_study(work, "exclude", THROUGHPUT, nodes="[1, 2, 3]")
    write(work, "slow.txt", "n1  # 40.0% slower\n")
    done = cli(pbs_cluster, work, "run", spec, "--exclude-nodes", "slow.txt", "--wait",
               timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    runs = sorted((work / "results" / "exclude" / "runs").iterdir())
    assert len(runs) == 3
    for run_dir in runs:
        assert "# scalestudy: not on n1" in (run_dir / "job.sh").read_text()
        job = json.loads((run_dir / "status.json").read_text())["job_id"]
        shown = pbs_cluster.run_as_user(["/opt/pbs/bin/qstat", "-x", "-f", "-F", "json", job],
                                        cwd=work, timeout=60)
        attrs = next(iter(json.loads(shown.stdout)["Jobs"].values()))
        hosts = {chunk.split("/")[0] for chunk in attrs["exec_host"].split("+")}
        assert hosts and "n1" not in hosts, attrs["exec_host"]
        assert "host=" in attrs["Resource_List"]["select"]
    frame = pd.read_csv(work / "results" / "exclude" / "runs.csv")
    assert set(frame["state"]) == {"completed"}
