"""The localhost Slurm testbed really works: jobs over 2 nodes, accounting, MPI (PMIx and
mpirun), torch.distributed over srun, the PBS wrappers, cancellation.

Needs the testbed installed (`scripts/slurm-testbed install`); skipped otherwise.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.slurm_testbed import (
    SCRIPT,
    SlurmCluster,
    free_port,
    parse_exports,
    sacct_state,
    scontrol_state,
    wait_for_job,
)

pytestmark = pytest.mark.slurm

HELLO_C = r"""
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, size, sum = 0, len;
    char host[MPI_MAX_PROCESSOR_NAME];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(host, &len);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("rank %d of %d on %s sum %d\n", rank, size, host, sum);
    MPI_Finalize();
    return 0;
}
"""
HELLO_LINE = re.compile(r"^rank (\d+) of (\d+) on (\S+) sum (\d+)$", re.MULTILINE)

ALLREDUCE_PY = """
import os, socket
import torch
import torch.distributed as dist

rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
dist.init_process_group("gloo", rank=rank, world_size=world)
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
print(f"rank {rank} of {world} on {socket.gethostname()} sum {int(t.item())}", flush=True)
dist.destroy_process_group()
"""

PBS_SCRIPT = """#!/bin/bash
#PBS -N pbscheck
#PBS -l nodes=2:ppn=1
#PBS -l walltime=00:01:00
echo "PBS_JOBID=$PBS_JOBID"
echo "PBS_O_WORKDIR=$PBS_O_WORKDIR"
echo "PBS_NODEFILE=$PBS_NODEFILE"
sed 's/^/node: /' "$PBS_NODEFILE"
"""


def sacct_fields(job_id: str, fields: str) -> list[str]:
    """One allocation's sacct fields, e.g. sacct_fields(id, "State,ExitCode")."""
    out = subprocess.run(
        ["sacct", "-j", job_id, "-X", "-n", "-P", "-o", fields],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout
    return out.strip().split("|")


def check_hosts(cluster: SlurmCluster, hosts: list[str], nodes: int) -> None:
    """The tasks ran on `nodes` distinct nodes (one shared hostname in the fallback)."""
    if cluster.shared_hostname:
        assert len(set(hosts)) == 1, hosts
    else:
        assert len(set(hosts)) == nodes, hosts
        assert set(hosts) <= set(cluster.nodes), hosts


@pytest.fixture(scope="module")
def hostname_job(
    slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, str, str]:
    """`srun hostname` on 2 nodes x 2 tasks, under the account the testbed created:
    (job id, final state, output)."""
    work = tmp_path_factory.mktemp("hostname")
    job_id = slurm_cluster.sbatch(
        "-N2", "--ntasks-per-node=2", "-A", "scalestudy", "-o", "out.txt",
        "--wrap", "srun hostname", cwd=work,
    )
    state = wait_for_job(job_id, timeout=60)
    return job_id, state, (work / "out.txt").read_text()


@pytest.fixture(scope="module")
def mpi_hello(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 10-line MPI program that allreduces the ranks, built with Open MPI's mpicc."""
    if shutil.which("mpicc") is None:
        pytest.skip("mpicc not installed (libopenmpi-dev)")
    work = tmp_path_factory.mktemp("mpi")
    (work / "hello.c").write_text(HELLO_C)
    subprocess.run(["mpicc", "-o", "hello", "hello.c"], cwd=work, check=True, timeout=60)
    return work / "hello"


def test_srun_spans_two_nodes(
    slurm_cluster: SlurmCluster, hostname_job: tuple[str, str, str]
) -> None:
    _job_id, state, out = hostname_job
    assert state == "COMPLETED", out
    hosts = out.split()
    assert len(hosts) == 4, out
    check_hosts(slurm_cluster, hosts, nodes=2)
    assert sorted(hosts.count(h) for h in set(hosts)) == ([4] if slurm_cluster.shared_hostname
                                                          else [2, 2])


def test_sacct_records_the_job(hostname_job: tuple[str, str, str]) -> None:
    job_id, _state, _out = hostname_job
    state, exit_code, nnodes, account = sacct_fields(job_id, "State,ExitCode,NNodes,Account")
    assert (state, exit_code, nnodes, account) == ("COMPLETED", "0:0", "2", "scalestudy")
    # The step (srun) is recorded too, with its 4 tasks.
    steps = subprocess.run(
        ["sacct", "-j", job_id, "-n", "-P", "-o", "JobID,NTasks,State"],
        capture_output=True, text=True, check=True,
    ).stdout.split()
    assert f"{job_id}.0|4|COMPLETED" in steps, steps


def test_srun_pmix_runs_open_mpi(slurm_cluster: SlurmCluster, mpi_hello: Path) -> None:
    work = mpi_hello.parent
    job_id = slurm_cluster.sbatch(
        "-N2", "--ntasks-per-node=2", "-o", "pmix.txt",
        "--wrap", f"srun --mpi=pmix {mpi_hello}", cwd=work,
    )
    state = wait_for_job(job_id, timeout=60)
    out = (work / "pmix.txt").read_text()
    assert state == "COMPLETED", out
    ranks = HELLO_LINE.findall(out)
    assert sorted(int(r[0]) for r in ranks) == [0, 1, 2, 3], out
    assert {(r[1], r[3]) for r in ranks} == {("4", "6")}, out
    check_hosts(slurm_cluster, [r[2] for r in ranks], nodes=2)


def test_mpirun_inside_allocation(slurm_cluster: SlurmCluster, mpi_hello: Path) -> None:
    work = mpi_hello.parent
    job_id = slurm_cluster.sbatch(
        "-N2", "--ntasks-per-node=2", "-o", "mpirun.txt",
        "--wrap", f"mpirun {mpi_hello}", cwd=work,
    )
    state = wait_for_job(job_id, timeout=60)
    out = (work / "mpirun.txt").read_text()
    assert state == "COMPLETED", out
    ranks = HELLO_LINE.findall(out)
    assert sorted(int(r[0]) for r in ranks) == [0, 1, 2, 3], out
    assert {(r[1], r[3]) for r in ranks} == {("4", "6")}, out
    check_hosts(slurm_cluster, [r[2] for r in ranks], nodes=2)


def test_torch_gloo_allreduce_over_srun(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "allreduce.py").write_text(ALLREDUCE_PY)
    # MASTER_ADDR is computed inside the job: the first node of the allocation, which
    # resolves there (or 127.0.0.1 where the nodes share a hostname).
    master = ("127.0.0.1" if slurm_cluster.shared_hostname
              else '$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)')
    (tmp_path / "job.sh").write_text(
        "#!/bin/bash\n"
        f"export MASTER_ADDR={master}\n"
        f"export MASTER_PORT={free_port()}\n"
        'echo "master $MASTER_ADDR"\n'
        f"srun --kill-on-bad-exit=1 {sys.executable} allreduce.py\n"
    )
    job_id = slurm_cluster.sbatch(
        "-N2", "--ntasks-per-node=1", "-t", "2", "-o", "out.txt", "job.sh", cwd=tmp_path,
    )
    state = wait_for_job(job_id, timeout=120)
    out = (tmp_path / "out.txt").read_text()
    assert state == "COMPLETED", out
    ranks = HELLO_LINE.findall(out)
    assert sorted((r[0], r[1], r[3]) for r in ranks) == [("0", "2", "3"), ("1", "2", "3")], out
    check_hosts(slurm_cluster, [r[2] for r in ranks], nodes=2)
    rank0_host = next(r[2] for r in ranks if r[0] == "0")
    if not slurm_cluster.shared_hostname:
        assert f"master {rank0_host}\n" in out, out


def test_qsub_runs_pbs_script(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    (tmp_path / "job.pbs").write_text(PBS_SCRIPT)
    qsub = subprocess.run(
        ["qsub", "job.pbs"], cwd=tmp_path, capture_output=True, text=True, timeout=30,
    )
    assert qsub.returncode == 0, qsub.stderr
    job_id = qsub.stdout.strip()
    assert job_id.isdigit(), qsub.stdout  # a bare id, like PBS Pro's "123.server" minus the server
    assert wait_for_job(job_id, timeout=60) == "COMPLETED"

    # The wrapper sends output to <script>.o<id> in the submission directory.
    outs = list(tmp_path.glob(f"*.o{job_id}"))
    assert len(outs) == 1, sorted(p.name for p in tmp_path.iterdir())
    out = outs[0].read_text()
    assert f"PBS_JOBID={job_id}" in out, out
    assert f"PBS_O_WORKDIR={tmp_path}" in out, out
    nodefile = re.search(r"^PBS_NODEFILE=(\S+)$", out, re.MULTILINE)
    assert nodefile, out
    nodes = re.findall(r"^node: (\S+)$", out, re.MULTILINE)
    assert len(nodes) == 2 and len(set(nodes)) == 2, out
    assert set(nodes) <= set(slurm_cluster.nodes), out
    # The #PBS directives were honoured (sacct gets the time limit only later).
    job = subprocess.run(
        ["scontrol", "show", "job", job_id], capture_output=True, text=True, check=True,
    ).stdout.split()
    assert "NumNodes=2" in job and "TimeLimit=00:01:00" in job, job

    qstat = subprocess.run(
        ["qstat", "-f", job_id], capture_output=True, text=True, check=True, timeout=30,
    ).stdout
    fields = dict(
        (key.strip(), value.strip())
        for key, sep, value in (line.partition("=") for line in qstat.splitlines()) if sep
    )
    assert fields["job_state"] == "C", qstat
    assert fields["Job_Name"] == "pbscheck", qstat


def test_scancel_ends_job_cancelled(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    job_id = slurm_cluster.sbatch("-N1", "-o", "/dev/null", "--wrap", "sleep 300", cwd=tmp_path)
    deadline = time.monotonic() + 30
    while scontrol_state(job_id) != "RUNNING":
        assert time.monotonic() < deadline, f"job {job_id}: {scontrol_state(job_id)}"
        time.sleep(0.1)
    subprocess.run(["scancel", job_id], check=True, timeout=30)
    assert wait_for_job(job_id, timeout=30) == "CANCELLED"
    assert (sacct_state(job_id) or "").startswith("CANCELLED")


def test_env_command_matches_fixture(slurm_cluster: SlurmCluster) -> None:
    env = subprocess.run(
        [str(SCRIPT), "env"], capture_output=True, text=True, check=True, timeout=30,
    ).stdout
    assert parse_exports(env) == slurm_cluster.env
    assert slurm_cluster.env["OMPI_ALLOW_RUN_AS_ROOT"] == "1"
    assert slurm_cluster.conf.is_file()
    assert slurm_cluster.nodes == ["n1", "n2", "n3", "n4"]
