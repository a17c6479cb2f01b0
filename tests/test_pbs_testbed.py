"""The OpenPBS testbed itself: real pbs_server, pbs_sched and four MoMs (scripts/pbs-testbed).

What scalestudy's PBS backend relies on, checked against the real server: scatter
placement over distinct hosts and PBS_NODEFILE, the Polaris-style directives, job
history, Open MPI and torch.distributed across MoMs, queue limits and their messages.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.pbs_testbed import SCRIPT

if TYPE_CHECKING:
    from tests.pbs_testbed import PBSCluster

pytestmark = pytest.mark.pbs


def write_script(directory: Path, name: str, body: str) -> Path:
    """A job script readable by pbsuser."""
    path = directory / name
    path.write_text("#!/bin/bash\n" + body, encoding="utf-8")
    path.chmod(0o755)
    return path


def output_of(directory: Path, job_name: str, job_id: str) -> str:
    """The joined stdout/stderr file PBS copies to PBS_O_WORKDIR: <Job_Name>.o<seq>."""
    return (directory / f"{job_name}.o{job_id.split('.')[0]}").read_text(encoding="utf-8")


def test_scatter_runs_on_distinct_hosts_listed_in_nodefile(
        pbs_cluster: PBSCluster, pbs_tmp_path: Path) -> None:
    script = write_script(pbs_tmp_path, "job.sh", """\
#PBS -N study-5ca77e0001
#PBS -l select=2:ncpus=1
#PBS -l place=scatter
#PBS -l walltime=00:05:00
#PBS -j oe
echo "nodefile: $(paste -sd, "$PBS_NODEFILE")"
# One task per chunk; the tasks write to the job's output file, not to pbsdsh's stdout.
pbsdsh -- /bin/sh -c 'echo "host: $(hostname)"'
""")
    job_id = pbs_cluster.qsub(script.name, cwd=pbs_tmp_path)
    assert job_id.endswith(f".{pbs_cluster.head}")
    attrs = pbs_cluster.wait_for_job(job_id, timeout=60)
    assert attrs["Exit_status"] == 0
    out = output_of(pbs_tmp_path, "study-5ca77e0001", job_id)
    hosts = [line.split()[1] for line in out.splitlines() if line.startswith("host: ")]
    nodefile = next(line for line in out.splitlines() if line.startswith("nodefile: "))
    listed = nodefile.split()[1].split(",")
    assert len(hosts) == 2 and len(set(hosts)) == 2, out
    assert sorted(listed) == sorted(hosts), out
    # exec_host names both hosts, one CPU each: "n0/0+n1/0".
    assert sorted(part.split("/")[0] for part in attrs["exec_host"].split("+")) == sorted(hosts)


def test_polaris_directives_are_accepted_and_kept(
        pbs_cluster: PBSCluster, pbs_tmp_path: Path) -> None:
    script = write_script(pbs_tmp_path, "job.sh", """\
#PBS -N study-901a715001
#PBS -l select=2:system=polaris
#PBS -l place=scatter
#PBS -l walltime=00:10:00
#PBS -l filesystems=home:eagle
#PBS -A SomeAccount
#PBS -q debug-scaling
#PBS -j oe
#PBS -k doe
true
""")
    job_id = pbs_cluster.qsub(script.name, cwd=pbs_tmp_path)
    attrs = pbs_cluster.wait_for_job(job_id, timeout=60)
    assert attrs["Exit_status"] == 0
    assert attrs["queue"] == "debug-scaling"
    assert attrs["Account_Name"] == "SomeAccount"  # no account check by default
    assert attrs["Keep_Files"] == "doe"
    resources = attrs["Resource_List"]
    assert resources["select"] == "2:system=polaris"
    assert resources["place"] == "scatter"
    assert resources["filesystems"] == "home:eagle"
    assert resources["walltime"] == "00:10:00"
    assert resources["nodect"] == 2  # a number in the JSON, not a string


def test_system_resource_is_matched_by_the_scheduler(
        pbs_cluster: PBSCluster, pbs_tmp_path: Path) -> None:
    job_id = pbs_cluster.qsub("-N", "study-a00a000001", "-l", "select=1:system=aurora",
                              "--", "/bin/true", cwd=pbs_tmp_path)
    try:
        comment = ""
        for _ in range(50):
            comment = pbs_cluster.qstat(job_id)[job_id].get("comment", "")
            if comment:
                break
            time.sleep(0.2)
        assert comment.startswith("Can Never Run: Insufficient amount of resource: system"), comment
    finally:
        pbs_cluster.run_as_user(["qdel", job_id])


def test_finished_jobs_stay_in_history(pbs_cluster: PBSCluster, pbs_tmp_path: Path) -> None:
    job_id = pbs_cluster.qsub("-N", "study-4157000001", "--", "/bin/sh", "-c", "exit 3",
                              cwd=pbs_tmp_path)
    attrs = pbs_cluster.wait_for_job(job_id, timeout=60)
    assert (attrs["job_state"], attrs["substate"], attrs["Exit_status"]) == ("F", 93, 3)
    assert attrs["comment"].endswith("and failed")
    listing = pbs_cluster.run_as_user(["qstat", "-x"])
    assert job_id in listing.stdout
    # Without -x a finished job is an error (exit 35), with a hint on stderr.
    plain = pbs_cluster.run_as_user(["qstat", job_id])
    assert plain.returncode == 35
    assert "Job has finished, use -x or -H" in plain.stderr


def test_mpirun_spans_two_moms(pbs_cluster: PBSCluster, pbs_tmp_path: Path) -> None:
    script = write_script(pbs_tmp_path, "job.sh", f"""\
#PBS -N study-3b10000001
#PBS -l select=2:ncpus=1
#PBS -l place=scatter
#PBS -l walltime=00:05:00
#PBS -j oe
mpirun --hostfile "$PBS_NODEFILE" -np 2 {pbs_cluster.python} -c \\
    'import os, socket; print("rank", os.environ["OMPI_COMM_WORLD_RANK"], socket.gethostname())'
""")
    job_id = pbs_cluster.qsub(script.name, cwd=pbs_tmp_path)
    attrs = pbs_cluster.wait_for_job(job_id, timeout=90)
    out = output_of(pbs_tmp_path, "study-3b10000001", job_id)
    assert attrs["Exit_status"] == 0, out
    ranks = sorted(line.split()[1:] for line in out.splitlines() if line.startswith("rank "))
    assert [r[0] for r in ranks] == ["0", "1"], out
    assert len({r[1] for r in ranks}) == 2, out


def test_torch_gloo_allreduce_across_moms(pbs_cluster: PBSCluster, pbs_tmp_path: Path) -> None:
    """What scalestudy's jobs do: MASTER_ADDR = the first node, ranks from mpirun."""
    write_script(pbs_tmp_path, "allreduce.py", """\
import datetime, os, socket
import torch
import torch.distributed as dist
rank, size = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
dist.init_process_group("gloo", rank=rank, world_size=size,
                        timeout=datetime.timedelta(seconds=60))
x = torch.tensor([float(rank + 1)])
dist.all_reduce(x)
print("allreduce", rank, socket.gethostname(), x.item(), flush=True)
dist.destroy_process_group()
""")
    script = write_script(pbs_tmp_path, "job.sh", f"""\
#PBS -N study-9100000001
#PBS -l select=2:system=polaris
#PBS -l place=scatter
#PBS -l walltime=00:05:00
#PBS -j oe
cd "$PBS_O_WORKDIR"
export MASTER_ADDR="$(head -n 1 "$PBS_NODEFILE")"
export MASTER_PORT=$(( 20000 + ${{PBS_JOBID%%.*}} % 10000 ))
mpirun --hostfile "$PBS_NODEFILE" -np 2 -x MASTER_ADDR -x MASTER_PORT \\
    {pbs_cluster.python} allreduce.py
""")
    job_id = pbs_cluster.qsub(script.name, cwd=pbs_tmp_path)
    attrs = pbs_cluster.wait_for_job(job_id, timeout=120)
    out = output_of(pbs_tmp_path, "study-9100000001", job_id)
    assert attrs["Exit_status"] == 0, out
    lines = sorted(line.split()[1:] for line in out.splitlines() if line.startswith("allreduce "))
    assert [(r[0], r[2]) for r in lines] == [("0", "3.0"), ("1", "3.0")], out
    assert lines[0][1] == pbs_cluster.master_addr
    assert len({r[1] for r in lines}) == 2, out


@pytest.mark.parametrize(("args", "code", "message"), [
    (["-q", "debug-scaling", "-l", "select=3"], 188,
     "qsub: Job violates queue and/or server resource limits"),
    (["-q", "prod", "-l", "select=1"], 188,
     "qsub: Job violates queue and/or server resource limits"),
    (["-q", "debug-scaling", "-l", "select=1", "-l", "walltime=02:00:00"], 188,
     "qsub: Job violates queue and/or server resource limits"),
    (["-q", "nosuchqueue", "-l", "select=1"], 170, "qsub: Unknown queue"),
    (["-l", "select=1:nosuchresource=1"], 187, "qsub: Unknown resource: nosuchresource"),
])
def test_qsub_refusals(pbs_cluster: PBSCluster, pbs_tmp_path: Path,
                       args: list[str], code: int, message: str) -> None:
    proc = pbs_cluster.run_as_user(["qsub", "-N", "study-0ff0000001", *args, "--", "/bin/true"],
                                   cwd=pbs_tmp_path)
    assert (proc.returncode, proc.stderr.strip(), proc.stdout) == (code, message, "")


def test_queue_limits_admit_what_fits(pbs_cluster: PBSCluster, pbs_tmp_path: Path) -> None:
    ids = [
        pbs_cluster.qsub("-q", "debug-scaling", "-l", "select=2", "-l", "walltime=01:00:00",
                         "--", "/bin/true", cwd=pbs_tmp_path),
        pbs_cluster.qsub("-q", "prod", "-l", "select=4", "-l", "place=scatter",
                         "-l", "walltime=06:00:00", "--", "/bin/true", cwd=pbs_tmp_path),
    ]
    for job_id in ids:
        assert pbs_cluster.wait_for_job(job_id, timeout=60)["Exit_status"] == 0


def test_pbsuser_runs_this_checkout(pbs_cluster: PBSCluster, pbs_tmp_path: Path) -> None:
    """pbsuser (and so every job) can run the venv's Python and import this checkout."""
    proc = pbs_cluster.scalestudy("--help", cwd=pbs_tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "Usage" in proc.stdout
    code = "import os, scalestudy; print(os.getuid(), scalestudy.__file__)"
    where = pbs_cluster.run_as_user([str(pbs_cluster.python), "-c", code], cwd=pbs_tmp_path)
    uid, path = where.stdout.split()
    assert uid != "0" and path.startswith(str(Path(__file__).resolve().parents[1]))


def test_a_restart_ends_only_the_testbeds_processes(pbs_cluster: PBSCluster) -> None:
    """A process in someone else's UTS namespace (the Slurm testbed's slurmd has one)
    survives `restart`, even when an older testbed wrote that namespace's id in its list:
    the kernel reuses a freed namespace's number, so a remembered id proves nothing."""
    foreign = subprocess.Popen(["unshare", "--uts", "sleep", "300"])
    try:
        deadline = time.monotonic() + 10
        host_uts = Path("/proc/self/ns/uts").readlink()
        while (uts := Path(f"/proc/{foreign.pid}/ns/uts").readlink()) == host_uts:
            assert time.monotonic() < deadline, "unshare did not enter a namespace"
            time.sleep(0.05)
        (pbs_cluster.state_dir / "ns" / "ids").write_text(f"{uts}\n")
        restart = subprocess.run([str(SCRIPT), "restart"],
                                 capture_output=True, text=True, timeout=300)
        assert restart.returncode == 0, restart.stderr
        assert foreign.poll() is None, restart.stderr
        assert "stale process" not in restart.stderr
        assert pbs_cluster.run_as_root(["qstat", "-B"]).returncode == 0
    finally:
        foreign.kill()
        foreign.wait()
