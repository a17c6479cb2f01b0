"""A real Flux (scripts/flux-testbed): studies submitted with flux batch and launched with
flux run, followed to the end and reported; the example study's cluster variant gives
the same report rows on Flux as on Slurm; status as one `flux jobs --json`, cancel
through flux cancel, time limit and failure classes, preflight's queue limits, a job
whose id never reached scalestudy adopted by its name. Everything runs as the
instance's user through the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pytest
import yaml

from scalestudy.execute.packing.steplog import read_events
from tests.conftest import run_cli
from tests.test_e2e_pack_slurm import completions

if TYPE_CHECKING:
    from tests.flux_testbed import FluxCluster

pytestmark = [pytest.mark.flux, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
PYTHON = ROOT / ".venv" / "bin" / "python"
# The testbed's 4 nodes have 2 cores each: flux run gives each rank its own (-c 1).
PROFILE = """
name: fluxlab
description: the Flux testbed (4 nodes of 2 cores)
scheduler: flux
launcher: flux
max_nodes: 4
cores_per_node: 2
threads_per_rank: 1
python: {python}
launcher_options: {{cpu_bind: per-task}}
scheduler_options: {{queue: {queue}}}
"""
# The same study on the Slurm testbed (4 nodes of 2 CPUs), srun starting the ranks.
SLURM_PROFILE = """
name: slurmlab
description: the localhost Slurm testbed (4 nodes of 2 CPUs)
scheduler: slurm
launcher: srun
max_nodes: 4
cores_per_node: 2
threads_per_rank: 1
launcher_options: {cpu_bind: none}
"""
COMMAND = """
name: {name}
system: profile.yaml
workload: {{kind: command, command: {command}}}
grid: {{nodes: {nodes}}}
job: {{walltime: "{walltime}"}}
"""
THROUGHPUT = "[python3, -c, \"print('Total img/sec on 1 GPU(s): 1.0')\"]"


def write(directory: Path, name: str, text: str) -> str:
    """A file the instance's user can read; its name."""
    path = directory / name
    path.write_text(text, encoding="utf-8")
    path.chmod(0o644)
    return name


def example_variant(directory: Path) -> str:
    """studies/example.yaml on a cluster: its workload and scaling, its smaller batch size,
    one rank on each of 1, 2 and 4 nodes (the testbeds' nodes have 2 cores), one repeat:
    3 runs (the suite's time goes to the Slurm worker, where this test runs)."""
    spec = yaml.safe_load((ROOT / "studies" / "example.yaml").read_text(encoding="utf-8"))
    spec.update(system="profile.yaml", repeats=1)
    spec["grid"].update(nodes=[1, 2, 4], ranks_per_node=[1], batch_size=[8])
    return write(directory, "example.yaml", yaml.safe_dump(spec, sort_keys=False))


@pytest.fixture(scope="module")
def work(flux_cluster: FluxCluster) -> Iterator[Path]:
    """A directory the instance's user owns for the module's studies; at the end, what a
    failed test left queued or running is cancelled."""
    directory = flux_cluster.user_dir("e2e")
    write(directory, "profile.yaml", PROFILE.format(python=PYTHON, queue="batch"))
    yield directory
    for spec in sorted(directory.glob("*.yaml")):
        if (directory / "results" / spec.stem / "jobs.jsonl").exists():
            cli(flux_cluster, directory, "cancel", spec.name)


def cli(cluster: FluxCluster, work: Path, *args: str,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`scalestudy ARGS` as the instance's user in `work`, with a results store there
    (the session's own is in root's private temporary directory)."""
    return cluster.run_as_user(
        [str(PYTHON), "-c", "from scalestudy.cli import main; main()", *args], cwd=work,
        timeout=timeout, env={"PYTHONPATH": str(ROOT),
                              "SCALESTUDY_STORE": str(work / "history.sqlite")})


def status(cluster: FluxCluster, work: Path, spec: str) -> list[dict[str, Any]]:
    """`scalestudy status --json` rows."""
    done = cli(cluster, work, "status", spec, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return list(json.loads(done.stdout))


def status_until(cluster: FluxCluster, work: Path, spec: str, wanted: set[str],
                 timeout: float = 120) -> list[dict[str, Any]]:
    """Status rows once every run's state is in `wanted` (or when the time is up)."""
    deadline = time.monotonic() + timeout
    while True:
        rows = status(cluster, work, spec)
        if all(r["state"] in wanted for r in rows) or time.monotonic() > deadline:
            return rows
        time.sleep(1)


def report_rows(results: Path) -> pd.DataFrame:
    """The report's scaling rows without what a measurement decides (its numbers)."""
    scaling = pd.read_csv(results / "report" / "scaling.csv")
    keys = [c for c in ("group", "nodes", "ranks_per_node", "world_size", "batch_size",
                        "global_batch", "repeats") if c in scaling.columns]
    return scaling[keys].sort_values(keys).reset_index(drop=True)


def test_the_example_study_gives_the_same_report_rows_on_flux_as_on_slurm(
        flux_cluster: FluxCluster, work: Path, slurm_cluster: Any, tmp_path: Path) -> None:
    spec = example_variant(work)
    done = cli(flux_cluster, work, "run", spec, "--wait", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    flux_results = work / "results" / "example"
    runs = pd.read_csv(flux_results / "runs.csv")
    assert list(runs["state"]) == ["completed"] * 3, runs[["state", "reason"]]
    assert sorted(runs["world_size"]) == [1, 2, 4]
    for run_id, nodes in zip(runs["run_id"], runs["nodes"], strict=True):
        run_dir = flux_results / "runs" / run_id
        assert run_dir.joinpath("job.sh").read_text().startswith("#!/bin/bash\n# flux: ")
        assert len(run_dir.joinpath("hosts.txt").read_text().split()) == nodes
        assert (run_dir / "flux.log").exists()
    # the results store knows where each ran: its Flux job id and its queue wait
    stored = json.loads(cli(flux_cluster, work, "history", "--json").stdout)
    journal = [json.loads(line) for line in
               (flux_results / "jobs.jsonl").read_text().splitlines() if '"job_id"' in line]
    assert {r["provenance"]["placement"]["job_id"] for r in stored
            if r["directory"] == str(flux_results.resolve())} == {j["job_id"] for j in journal}
    # the same study on Slurm
    (tmp_path / "profile.yaml").write_text(SLURM_PROFILE)
    (tmp_path / "example.yaml").write_text((work / spec).read_text())
    on_slurm = run_cli("run", str(tmp_path / "example.yaml"), "--wait", cwd=tmp_path)
    assert on_slurm.returncode == 0, on_slurm.stdout + on_slurm.stderr
    slurm_rows = report_rows(tmp_path / "results" / "example")
    assert len(slurm_rows) == 3 and set(slurm_rows.columns) >= {"world_size", "global_batch"}
    pd.testing.assert_frame_equal(report_rows(flux_results), slurm_rows)
    columns = pd.read_csv(flux_results / "report" / "scaling.csv").columns
    assert list(columns) == list(
        pd.read_csv(tmp_path / "results" / "example" / "report" / "scaling.csv").columns)


def test_status_is_one_flux_jobs_and_cancel_is_flux_cancel(
        flux_cluster: FluxCluster, work: Path) -> None:
    spec = write(work, "sleeper.yaml", COMMAND.format(
        name="sleeper", command="[sleep, \"300\"]", nodes="[1, 2]", walltime="00:10:00"))
    started = cli(flux_cluster, work, "run", spec)
    assert started.returncode == 0 and "2 job(s) submitted" in started.stdout, started.stderr
    rows = status_until(flux_cluster, work, spec, {"running"})
    assert [r["state"] for r in rows] == ["running", "running"], rows
    assert all(r["job_id"].startswith("f") for r in rows)
    cancelled = cli(flux_cluster, work, "cancel", spec)
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    assert "cancelled 2 job(s)" in cancelled.stdout
    rows = status_until(flux_cluster, work, spec, {"failed"}, timeout=60)
    for row in rows:
        assert (row["state"], row["failure"]) == ("failed", "cancelled"), row
        record = flux_cluster.job(row["job_id"])
        assert record is not None and record["result"] == "CANCELED"
    again = cli(flux_cluster, work, "cancel", spec)  # nothing left: `job is inactive`
    assert again.returncode == 0, again.stderr


def test_time_limit_and_failing_programs_are_classified(
        flux_cluster: FluxCluster, work: Path) -> None:
    slow = write(work, "walltime.yaml", COMMAND.format(
        name="walltime", command="[sleep, \"120\"]", nodes="[1]", walltime="00:00:10"))
    broken = write(work, "broken.yaml", COMMAND.format(
        name="broken", command="[python3, -c, \"import scalestudy_no_such\"]", nodes="[1]",
        walltime="00:05:00"))
    missing = write(work, "missing.yaml", COMMAND.format(
        name="missing", command="[/no/such/program]", nodes="[1]", walltime="00:05:00"))
    for spec in (slow, broken, missing):  # all queued before any is followed
        done = cli(flux_cluster, work, "run", spec)
        assert done.returncode == 0 and "1 job(s) submitted" in done.stdout, done.stderr
    for spec, failure in ((broken, "import_error"), (missing, "not_found"),
                          (slow, "walltime")):
        done = cli(flux_cluster, work, "run", spec, "--wait", timeout=240)
        assert done.returncode == 1, done.stdout + done.stderr
        (row,) = status(flux_cluster, work, spec)
        assert (row["state"], row["failure"]) == ("failed", failure), row
    (row,) = status(flux_cluster, work, slow)
    assert "time limit" in row["reason"], row
    assert flux_cluster.job(row["job_id"])["result"] == "TIMEOUT"


def test_preflight_reads_the_queues_and_flux_refuses_what_they_do_not_take(
        flux_cluster: FluxCluster, work: Path) -> None:
    write(work, "profile-debug.yaml", PROFILE.format(python=PYTHON, queue="debug")
          .replace("name: fluxlab", "name: fluxlab-debug"))
    spec = write(work, "big.yaml", COMMAND.format(
        name="big", command=THROUGHPUT, nodes="[1, 4]", walltime="00:05:00")
        .replace("profile.yaml", "profile-debug.yaml"))
    checked = cli(flux_cluster, work, "validate", "--preflight", spec)
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert ("queue debug takes at most 2 nodes (flux queue list), so 1 run(s) would be "
            "refused or wait for ever; run those node counts as a study of their own with "
            "job.flux.queue: batch") in checked.stderr
    stopped = cli(flux_cluster, work, "run", spec)
    assert stopped.returncode == 2 and "takes at most 2 nodes" in stopped.stderr, \
        stopped.stdout + stopped.stderr
    assert not (work / "results" / "big" / "jobs.jsonl").exists()
    write(work, spec, (work / spec).read_text().replace("[1, 4]", "[1, 2]"))
    clean = cli(flux_cluster, work, "validate", "--preflight", spec)
    assert clean.returncode == 0, clean.stderr
    assert clean.stderr.startswith("preflight: ok: flux answers; queue debug takes 1-2 nodes "
                                   "and 01:00:00;"), clean.stderr


def test_preflight_against_another_users_instance_says_so(flux_cluster: FluxCluster,
                                                          work: Path) -> None:
    """The instance belongs to its user alone: anyone else (here root, who started it)
    is refused, and preflight says so before anything is queued."""
    import getpass

    if getpass.getuser() == flux_cluster.user:
        pytest.skip("the tests run as the instance's own user: nobody else to be")
    spec = write(work, "other.yaml", COMMAND.format(
        name="other", command=THROUGHPUT, nodes="[1]", walltime="00:05:00"))
    env = {**flux_cluster.env, "FLUX_URI": flux_cluster.uri,
           "PATH": f"{flux_cluster.prefix / 'bin'}:{os.environ.get('PATH', '')}",
           "SCALESTUDY_STORE": str(work / "root-history.sqlite")}
    done = run_cli("validate", "--preflight", spec, cwd=work, env_extra=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "does not accept this user" in done.stderr and "Operation not permitted" \
        in done.stderr, done.stderr


NESTED = """
name: nested
system: profile.yaml
workload: {model: small_cnn, image_size: 16, num_classes: 10, warmup_iters: 1, iters: 2,
           batches_per_iter: 2}
grid: {nodes: [1, 2, 4], ranks_per_node: [1], batch_size: [4]}
repeats: 2
job: {walltime: "00:05:00", pack: true, pack_engine: flux}
"""


def test_a_flux_nested_in_a_slurm_job_runs_a_packed_study(
        flux_cluster: FluxCluster, slurm_cluster: Any, tmp_path: Path) -> None:
    (tmp_path / "profile.yaml").write_text(SLURM_PROFILE)
    (tmp_path / "nested.yaml").write_text(NESTED)
    path = f"{flux_cluster.prefix / 'bin'}:{os.environ['PATH']}"
    done = run_cli("run", str(tmp_path / "nested.yaml"), "--wait", cwd=tmp_path, path=path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 run(s) packed into 1 job(s)" in done.stdout
    results = tmp_path / "results" / "nested"
    journal = [json.loads(x) for x in (results / "jobs.jsonl").read_text().splitlines()]
    assert len({j["job_id"] for j in journal if "job_id" in j}) == 1  # one queue wait
    events = read_events(results / "allocations" / "a1" / "steps.jsonl")
    assert events[0].event == "allocation" and events[0].extra["engine"] == "flux"
    assert events[0].hosts == ("n1", "n2", "n3", "n4") and events[-1].event == "done"
    started = [e for e in events if e.event == "started"]
    ended = [e for e in events if e.event == "ended"]
    assert len(started) == len(ended) == 6 and all(e.rc == 0 for e in ended)
    runs = pd.read_csv(results / "runs.csv").set_index("run_id")
    for event in started:  # each step a Flux job of the nested instance, on its nodes
        assert event.extra["flux_id"].startswith("f")
        assert len(event.hosts) == runs.loc[event.run_id, "nodes"]
        step = (results / "runs" / event.run_id / "job.sh").read_text()
        assert step.startswith("#!/bin/bash\n# flux: ") and "flux run --nodes=" in step
    scaling = pd.read_csv(results / "report" / "scaling.csv")
    assert sorted(tuple(r) for r in scaling[["world_size", "nodes", "n_repeats"]]
                  .itertuples(index=False)) == [(1, 1, 2), (2, 2, 2), (4, 4, 2)]


def test_a_packed_study_on_flux_is_one_flux_batch_whose_instance_runs_the_steps(
        flux_cluster: FluxCluster, work: Path) -> None:
    spec = write(work, "packed.yaml", COMMAND.format(
        name="packed", command=THROUGHPUT, nodes="[1, 2, 4]", walltime="00:05:00")
        .replace('job: {walltime: "00:05:00"}', 'job: {walltime: "00:05:00", pack: true}')
        + "repeats: 2\n")
    done = cli(flux_cluster, work, "run", spec, "--wait")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 run(s) packed into 1 job(s)" in done.stdout
    results = work / "results" / "packed"
    journal = [json.loads(x) for x in (results / "jobs.jsonl").read_text().splitlines()]
    (job_id,) = {j["job_id"] for j in journal if "job_id" in j}
    assert flux_cluster.job(job_id)["result"] == "COMPLETED"
    events = read_events(results / "allocations" / "a1" / "steps.jsonl")
    assert events[0].extra["engine"] == "flux" and events[0].job_id == job_id
    ended = [e for e in events if e.event == "ended"]
    assert len(ended) == 6 and all(e.rc == 0 for e in ended), ended
    script = (results / "allocations" / "a1" / "job.sh").read_text()
    assert "# flux: --nodes=4" in script and "\nexec " + str(PYTHON) in script


def test_a_flux_engine_allocation_cancelled_half_way_loses_and_repeats_nothing(
        flux_cluster: FluxCluster, slurm_cluster: Any, tmp_path: Path) -> None:
    (tmp_path / "profile.yaml").write_text(SLURM_PROFILE)
    (tmp_path / "cut.yaml").write_text(NESTED.replace("name: nested", "name: cut"))
    path = f"{flux_cluster.prefix / 'bin'}:{os.environ['PATH']}"
    first = run_cli("run", str(tmp_path / "cut.yaml"), cwd=tmp_path, path=path)
    assert first.returncode == 0, first.stdout + first.stderr
    results = tmp_path / "results" / "cut"
    job_id = json.loads((results / "jobs.jsonl").read_text().splitlines()[-1])["job_id"]

    def ended_ok() -> dict[str, int]:
        counts: dict[str, int] = {}
        for alloc in (results / "allocations").iterdir():
            for e in read_events(alloc / "steps.jsonl"):
                if e.event == "ended" and e.rc == 0:
                    counts[e.run_id] = counts.get(e.run_id, 0) + 1
        return counts

    deadline = time.monotonic() + 180
    while sum(ended_ok().values()) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    subprocess.run(["scancel", job_id], check=True)
    before = ended_ok()
    assert 2 <= sum(before.values()) < 6
    again = run_cli("run", str(tmp_path / "cut.yaml"), "--wait", cwd=tmp_path, path=path)
    assert again.returncode == 0, again.stdout + again.stderr
    counts = completions(results)
    assert len(counts) == 6 and set(counts.values()) == {1}  # none lost, none twice
    second = read_events(results / "allocations" / "a2" / "steps.jsonl")
    assert not {e.run_id for e in second if e.event == "started"} & set(before)
    assert set(pd.read_csv(results / "runs.csv")["state"]) == {"completed"}


EXCLUDE = """
name: exclude
system: profile.yaml
workload: {model: small_cnn, image_size: 16, num_classes: 10, warmup_iters: 1, iters: 2,
           batches_per_iter: 2}
grid: {nodes: [3], ranks_per_node: [1], batch_size: [4]}
job: {walltime: "00:05:00"}
"""


def test_ranks_record_their_flux_node_and_an_exclude_list_keeps_a_study_off_it(
        flux_cluster: FluxCluster, work: Path) -> None:
    """Each testbed broker has its own hostname: a 3-node study run with `--exclude-nodes`
    (Flux: `--requires=-host:`) gets the other three nodes, its ranks record them as
    their hosts, and the results store can judge each of them."""
    if flux_cluster.env.get("SCALESTUDY_FLUX_HOSTNAMES") != "own":
        pytest.skip("the Flux testbed's nodes share one hostname here (no user namespaces)")
    spec = write(work, "exclude.yaml", EXCLUDE)
    write(work, "slow.txt", "node2  # 40.0% slower\n")
    done = cli(flux_cluster, work, "run", spec, "--exclude-nodes", "slow.txt", "--wait",
               timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    (run_dir,) = (work / "results" / "exclude" / "runs").iterdir()
    assert "--requires=-host:node2" in (run_dir / "job.sh").read_text()
    job = json.loads((run_dir / "status.json").read_text())["job_id"]
    nodelist = flux_cluster.flux("hostlist", "--expand", "--delimiter= ",
                                 flux_cluster.flux("jobs", "-n", "-o", "{nodelist}", job)
                                 .stdout.strip()).stdout.split()
    assert sorted(nodelist) == ["node0", "node1", "node3"]
    runs = pd.read_csv(work / "results" / "exclude" / "runs.csv")
    assert sorted(str(runs.loc[0, "rank_hosts"]).split(",")) == nodelist == sorted(
        (run_dir / "hosts.txt").read_text().split())
    judged = cli(flux_cluster, work, "history", "nodes", "--json")
    assert judged.returncode == 0, judged.stderr
    evidence = json.loads(judged.stdout)  # three distinct hosts: the run can be judged
    assert evidence["testable_runs"] >= 1 and evidence["hosts"] >= 3, evidence
