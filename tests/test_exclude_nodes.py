"""Nodes kept out of a study's jobs (`job.exclude_nodes`, `run --exclude-nodes FILE`): in
each scheduler's own syntax where it has one, refused where it has none, and the list
file read with its mistakes located."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalestudy.core.errors import ScalestudyError, SpecError, SubmitError
from scalestudy.site import schedulers
from scalestudy.site.plan import make_plan
from scalestudy.site.schedulers import JobRequest
from scalestudy.site.schedulers.pbs import PBSOptions
from scalestudy.study.planning import read_exclude_list, with_excluded

JOB = JobRequest(name="s-1", nodes=2, ranks_per_node=1, walltime="00:10:00",
                 exclude_nodes=("n2", "nid001234"))


def test_slurm_and_flux_say_it_their_own_way() -> None:
    assert "#SBATCH --exclude=n2,nid001234" in schedulers.get("slurm").directives(JOB)
    assert "# flux: --requires=-host:n2,nid001234" in schedulers.get("flux").directives(JOB)


def spec(tmp_path: Path, system: str, job: str = "") -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\nsystem: {system}\nworkload: {{model: resnet50}}\n"
                    f"grid: {{nodes: [1, 2]}}\njob: {{account: A{job}}}\n")
    return path


def test_a_system_without_a_scheduler_refuses_it_with_the_key(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"s.yaml:5: job.exclude_nodes: system 'local' uses "
                                        r"local.*flux or pbs or slurm option"):
        make_plan(spec(tmp_path, "local", ", exclude_nodes: [x3001c0s13b0n0]"))
    plan = make_plan(spec(tmp_path, "local"))
    with pytest.raises(ScalestudyError, match="--exclude-nodes: system local uses local"):
        with_excluded(plan, ["x3001c0s13b0n0"])


#: `pbsnodes -a -F json` of the OpenPBS testbed (scripts/pbs-testbed, OpenPBS 23.06.06),
#: recorded, then n1 marked down and n2 given a job.
PBSNODES = (
    "{\"timestamp\":1795742914,\"pbs_version\":\"23.06.06\",\"pbs_server\":\"pbslab\",\"nodes\":{\"n0\":{\"M"
    "om\":\"n0\",\"ntype\":\"PBS\",\"state\":\"free\",\"pcpus\":2,\"resources_available\":{\"arch\":\"linux\",\"h"
    "ost\":\"n0\",\"mem\":\"24684084kb\",\"ncpus\":2,\"system\":\"polaris\",\"vnode\":\"n0\"},\"resources_assig"
    "ned\":{},\"resv_enable\":\"True\",\"sharing\":\"default_shared\",\"license\":\"l\",\"last_state_change"
    "_time\":1795742913,\"last_used_time\":1795740778},\"n1\":{\"Mom\":\"n1\",\"ntype\":\"PBS\",\"state\":\"d"
    "own\",\"pcpus\":2,\"resources_available\":{\"arch\":\"linux\",\"host\":\"n1\",\"mem\":\"24684084kb\",\"ncp"
    "us\":2,\"system\":\"polaris\",\"vnode\":\"n1\"},\"resources_assigned\":{},\"resv_enable\":\"True\",\"sha"
    "ring\":\"default_shared\",\"license\":\"l\",\"last_state_change_time\":1795742913,\"last_used_time"
    "\":1795740778},\"n2\":{\"Mom\":\"n2\",\"ntype\":\"PBS\",\"state\":\"job-busy\",\"pcpus\":2,\"resources_ava"
    "ilable\":{\"arch\":\"linux\",\"host\":\"n2\",\"mem\":\"24684084kb\",\"ncpus\":2,\"system\":\"polaris\",\"vno"
    "de\":\"n2\"},\"resources_assigned\":{},\"resv_enable\":\"True\",\"sharing\":\"default_shared\",\"licen"
    "se\":\"l\",\"last_state_change_time\":1795742913,\"last_used_time\":1795740778,\"jobs\":[\"7.pbsla"
    "b/0\"]},\"n3\":{\"Mom\":\"n3\",\"ntype\":\"PBS\",\"state\":\"free\",\"pcpus\":2,\"resources_available\":{\"a"
    "rch\":\"linux\",\"host\":\"n3\",\"mem\":\"24684084kb\",\"ncpus\":2,\"system\":\"polaris\",\"vnode\":\"n3\"},\""
    "resources_assigned\":{},\"resv_enable\":\"True\",\"sharing\":\"default_shared\",\"license\":\"l\",\"la"
    "st_state_change_time\":1795742913,\"last_used_time\":1795740778}}}"
)


def test_pbs_names_the_hosts_outside_the_list_at_submission() -> None:
    pbs = schedulers.get("pbs")
    assert pbs.parse_hosts(PBSNODES) == ["n0", "n3", "n2"]  # free first, down never
    job = JobRequest(name="s-1", nodes=2, ranks_per_node=4, walltime="00:10:00",
                     gpus_per_node=4, cores_per_node=32,
                     options=PBSOptions(select_terms={"system": "polaris"}),
                     exclude_nodes=("n1",))
    assert pbs.on_hosts(job, ["n0", "n3"]) == [
        "-l", "select=1:ncpus=32:ngpus=4:mpiprocs=4:system=polaris:host=n0"
        "+1:ncpus=32:ngpus=4:mpiprocs=4:system=polaris:host=n3"]
    lines = pbs.directives(job)
    assert "#PBS -l select=2:ncpus=32:ngpus=4:mpiprocs=4:system=polaris" in lines
    assert lines[-1].startswith("# scalestudy: not on n1: qsub is given -l select")
    with pytest.raises(SubmitError, match="no node list"):
        pbs.parse_hosts("pbsnodes: Server has no node list")


def test_a_pbs_batch_spreads_over_the_hosts_left_and_says_when_too_few(
        tmp_path: Path) -> None:
    from scalestudy.execute.submit import Placer

    plan = make_plan(spec(tmp_path, "polaris", ", exclude_nodes: [n1]"))
    calls: list[list[str]] = []

    def runner(argv, cwd=None):
        calls.append(list(argv))
        return 0, PBSNODES, ""

    placer = Placer(plan, runner)
    one, two = sorted(plan.runs, key=lambda r: r.nodes)
    assert placer.args(one)[1].endswith(":host=n0")
    assert placer.args(two) == ["-l", "select=1:system=polaris:host=n3"
                                      "+1:system=polaris:host=n2"]  # the next ones in turn
    assert calls == [["pbsnodes", "-a", "-F", "json"]]  # listed once per batch
    crowded = make_plan(spec(tmp_path, "polaris", ", exclude_nodes: [n1, n0, n3]"))
    with pytest.raises(SubmitError, match=r"needs 2 node\(s\), and 1 host\(s\) are up "
                                          r"outside job.exclude_nodes \(n0, n1, n3\)"):
        Placer(crowded, runner).args(two)
    assert Placer(make_plan(spec(tmp_path, "polaris")), runner).args(two) == []


def test_the_list_file_adds_to_the_spec_and_its_mistakes_are_located(tmp_path: Path) -> None:
    plan = make_plan(spec(tmp_path, "perlmutter", ", exclude_nodes: [nid001]"))
    listed = tmp_path / "slow.txt"
    listed.write_text("nid002  # 12% slower\n\nnid003, nid001\n# a comment\n")
    hosts = read_exclude_list(listed)
    assert hosts == ["nid002", "nid003", "nid001"]
    assert with_excluded(plan, hosts).study.job.exclude_nodes == ["nid001", "nid002", "nid003"]
    assert [r.run_id for r in with_excluded(plan, hosts).runs] == [r.run_id for r in plan.runs]
    listed.write_text("nid002\nnid 0;rm -rf\n")
    with pytest.raises(ScalestudyError, match=r"slow.txt:2: ';rm' is not a host name|"
                                              r"slow.txt:2: '0;rm' is not a host name"):
        read_exclude_list(listed)
    with pytest.raises(ScalestudyError, match="cannot read it"):
        read_exclude_list(tmp_path / "missing.txt")


@pytest.mark.slurm
@pytest.mark.slow
def test_a_study_run_with_the_exclude_list_avoids_the_node(tmp_path: Path,
                                                            slurm_cluster) -> None:
    """On the 4-node Slurm testbed, n2 excluded: the 3-node runs take n1, n3 and n4,
    every run's hosts.txt leaves n2 out, and the job scripts say so."""
    import json
    import sys

    from tests.conftest import run_cli
    from tests.slurm_testbed import TESTBED_PROFILE

    (tmp_path / "profile.yaml").write_text(TESTBED_PROFILE)
    program = json.dumps([sys.executable, "-c",
                          "print('Total img/sec on 1 GPU(s): 1.0')"])
    (tmp_path / "s.yaml").write_text(
        "name: ex\nsystem: profile.yaml\n"
        f"workload: {{kind: command, command: {program}}}\n"
        "grid: {nodes: [1, 3]}\nrepeats: 2\njob: {walltime: '00:05:00'}\n")
    (tmp_path / "slow.txt").write_text("n2  # 12.0% slower\n")
    done = run_cli("run", "s.yaml", "--exclude-nodes", "slow.txt", "--wait", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    import subprocess

    runs = list((tmp_path / "results" / "ex" / "runs").iterdir())
    assert len(runs) == 4
    for run_dir in runs:
        assert "#SBATCH --exclude=n2" in (run_dir / "job.sh").read_text()
        job = json.loads((run_dir / "status.json").read_text())["job_id"]
        nodes = subprocess.run(["sacct", "-n", "-X", "-P", "-j", str(job), "-o", "NodeList"],
                               capture_output=True, text=True).stdout.strip()
        hosts = subprocess.run(["scontrol", "show", "hostnames", nodes],
                               capture_output=True, text=True).stdout.split()
        assert hosts and "n2" not in hosts, (nodes, hosts)
        if not slurm_cluster.shared_hostname:  # the ranks' own hosts say it too
            assert "n2" not in (run_dir / "hosts.txt").read_text().split()
