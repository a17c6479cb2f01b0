"""Preflight without a cluster: the parsers on outputs recorded from the testbeds
(tests/data/preflight/), the judgement on facts made up here, the asking through a fake
scheduler, and the CLI where no scheduler command is on PATH or the ranks outnumber
the cores. The real Slurm and OpenPBS are in test_e2e_preflight.py."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import pytest

from scalestudy.execute.preflight import ask_python, preflight
from scalestudy.site import preflight as pf
from scalestudy.site import queues
from scalestudy.site.plan import make_plan
from scalestudy.site.schedulers import get
from scalestudy.site.schedulers.pbs import limits as pbs_limits
from scalestudy.site.schedulers.slurm import limits as slurm_limits
from tests.conftest import run_cli

DATA = Path(__file__).resolve().parent / "data" / "preflight"
PROFILE = """
name: fake
scheduler: {scheduler}
launcher: {launcher}
max_nodes: 8
cores_per_node: 2
threads_per_rank: 1
"""
SPEC = """
name: t
system: profile.yaml
grid: {{nodes: {nodes}, ranks_per_node: [2], batch_size: [8]{backend}}}
job: {{walltime: "{walltime}"{job}}}
"""


def read(name: str) -> str:
    return (DATA / name).read_text()


def plan_of(tmp_path: Path, scheduler: str = "slurm", nodes: str = "[1, 2]",
            walltime: str = "00:05:00", job: str = "", backend: str = "",
            launcher: str = "", profile_extra: str = ""):  # type: ignore[no-untyped-def]
    launcher = launcher or {"slurm": "srun", "pbs": "mpiexec"}[scheduler]
    (tmp_path / "profile.yaml").write_text(
        PROFILE.format(scheduler=scheduler, launcher=launcher) + profile_extra)
    (tmp_path / "s.yaml").write_text(SPEC.format(nodes=nodes, walltime=walltime, job=job,
                                                 backend=backend))
    return make_plan(tmp_path / "s.yaml", tmp_path / "results")


def slurm_facts(**overrides) -> pf.Facts:  # type: ignore[no-untyped-def]
    answer = slurm_limits.parse_scontrol_partitions(read("slurm-scontrol-show-partition.txt"))
    answer.merge(slurm_limits.parse_sinfo_states(read("slurm-sinfo.txt")))
    answer.merge(slurm_limits.parse_sacctmgr_qos(read("slurm-sacctmgr-show-qos.txt")))
    facts = pf.Facts(user="root", host="login1", queues=answer,
                     accounts=slurm_limits.parse_sacctmgr_accounts(
                         read("slurm-sacctmgr-show-assoc.txt")))
    for key, value in overrides.items():
        setattr(facts, key, value)
    return facts


# ---------------------------------------------------------------- parsers


def test_scontrol_partitions_recorded_from_the_testbed() -> None:
    answer = slurm_limits.parse_scontrol_partitions(read("slurm-scontrol-show-partition.txt"))
    assert answer.default == "debug"
    debug, short = answer.queues["debug"], answer.queues["short"]
    assert (debug.max_nodes, debug.max_walltime_s, debug.total_nodes) == (None, None, 4)
    assert (short.min_nodes, short.max_nodes, short.max_walltime_s) == (1, 2, 600)
    assert short.closed is None and short.allow_accounts is None and short.allow_pools is None
    assert short.describe() == "1-2 nodes and 00:10:00"
    assert debug.describe() == "1-4 nodes"


def test_scontrol_states_and_access_lists() -> None:
    line = ("PartitionName=gpu AllowGroups=ALL AllowAccounts=proj1,Proj2 AllowQos=ALL "
            "Default=NO MaxNodes=16 MaxTime=2-00:00:00 MinNodes=2 State=DRAIN TotalNodes=64")
    gpu = slurm_limits.parse_scontrol_partitions(line).queues["gpu"]
    assert gpu.closed == "State=DRAIN" and gpu.allow_accounts == {"proj1", "proj2"}
    assert (gpu.min_nodes, gpu.max_nodes, gpu.max_walltime_s) == (2, 16, 2 * 86400)


@pytest.mark.parametrize(("text", "seconds"), [
    ("UNLIMITED", None), ("INFINITE", None), ("30", 1800), ("30:15", 1815),
    ("1:00:00", 3600), ("2-00:00:00", 172800), ("1-12", 129600), ("1-0:30", 88200),
    ("bogus", None)])
def test_slurm_times(text: str, seconds: int | None) -> None:
    assert slurm_limits.slurm_seconds(text) == seconds


@pytest.mark.parametrize(("value", "seconds"), [
    ("01:00:00", 3600), ("30:00", 1800), (3600, 3600), ("72:00:00", 259200), (None, None),
    ("x", None)])
def test_pbs_walltimes(value: object, seconds: int | None) -> None:
    assert pbs_limits.pbs_seconds(value) == seconds


def test_sinfo_counts_the_nodes_that_take_no_job() -> None:
    assert slurm_limits.parse_sinfo_states(read("slurm-sinfo.txt")).down_nodes == {
        "debug": 0, "short": 0}
    text = "gpu|idle|10\ngpu|drained|3\ngpu|down*|2\ngpu|mixed|5\ngpu|draining|1\n"
    assert slurm_limits.parse_sinfo_states(text).down_nodes == {"gpu": 6}


def test_sacctmgr_assoc_and_qos() -> None:
    assert slurm_limits.parse_sacctmgr_accounts(read("slurm-sacctmgr-show-assoc.txt")) == {
        "scalestudy": {""}, "root": {""}}
    assert slurm_limits.parse_sacctmgr_accounts("Proj|gpu|normal\nproj|cpu|normal\n") == {
        "proj": {"gpu", "cpu"}}
    qos = slurm_limits.parse_sacctmgr_qos(
        read("slurm-sacctmgr-show-qos.txt") + "debug|00:30:00|cpu=256,node=8|node=1\n").pools
    assert qos["normal"].max_nodes is None and qos["normal"].max_walltime_s is None
    assert (qos["debug"].min_nodes, qos["debug"].max_nodes, qos["debug"].max_walltime_s) \
        == (1, 8, 1800)


def test_openpbs_queues_server_and_qmgr_recorded_from_the_testbed() -> None:
    answer = pbs_limits.parse_qstat_queues(read("pbs-qstat-Q-f-F-json.json"))
    assert set(answer.queues) == {"workq", "debug-scaling", "prod"}
    ds, prod = answer.queues["debug-scaling"], answer.queues["prod"]
    assert (ds.min_nodes, ds.max_nodes, ds.max_walltime_s) == (1, 2, 3600)
    assert (prod.min_nodes, prod.max_nodes, prod.max_walltime_s) == (2, 4, 6 * 3600)
    assert answer.queues["workq"].max_nodes is None and prod.closed is None
    assert pbs_limits.parse_qstat_server(read("pbs-qstat-B-f-F-json.json")).default == "workq"
    listed = pbs_limits.parse_qmgr_queues(read("pbs-qmgr-list-queue.txt")).queues
    assert listed == {name: queues.QueueLimits(**{**vars(q), "source": listed[name].source})
                      for name, q in answer.queues.items()}


def test_a_disabled_pbs_queue_is_closed_and_torque_qstat_is_no_answer() -> None:
    text = ('{"Queue": {"q": {"enabled": "False", "started": "True", '
            '"resources_max": {"nodect": 8}}}}')
    assert pbs_limits.parse_qstat_queues(text).queues["q"].closed == "enabled = False"
    pbs = get("pbs")
    assert pbs.parse_limits(["qstat", "-Q", "-f", "-F", "json"], 2, "", "Unknown option: F") \
        is None
    assert pbs.parse_limits(["qstat", "-Q", "-f", "-F", "json"], 0, "Queue: q\n", "") is None


# ---------------------------------------------------------------- judgement


def test_a_clean_slurm_study_gives_one_ok_line(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, job=", account: scalestudy, partition: short")
    found = pf.check(plan, slurm_facts())
    assert found.problems == []
    assert found.ok_line() == (
        "preflight: ok: slurm answers; account scalestudy known; partition short takes 1-2 "
        "nodes and 00:10:00; at most 2 rank(s) on a fake node's 2 cores")


def test_slurm_problems_each_with_its_fix(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, nodes="[1, 2, 4]", walltime="00:30:00",
                   job=", account: Nosuch, partition: short, qos: fast")
    texts = [p.line() for p in pf.check(plan, slurm_facts()).problems]
    s = tmp_path / "s.yaml"
    assert texts == [
        f"preflight: error: {s}:5: job.account: account Nosuch is not one that user root may "
        "charge (sacctmgr show assoc lists: root, scalestudy): set job.account to one of "
        "them, or ask your centre to add root to Nosuch; Slurm refuses such jobs where it "
        "enforces associations and charges your default account elsewhere",
        f"preflight: error: {s}:4: grid.nodes: 4 node(s): partition short takes at most 2 "
        "nodes (scontrol show partition), so 1 run(s) would be refused or wait for ever; "
        "run those node counts as a study of their own with job.partition: debug (it takes "
        "4-node jobs of 00:30:00), or keep grid.nodes at most 2 (or exclude those node "
        "counts)",
        f"preflight: error: {s}:5: job.walltime: 00:30:00 is longer than partition short "
        "allows (00:10:00, scontrol show partition): the jobs would be refused or never "
        "start; lower job.walltime to 00:10:00, or run those node counts as a study of "
        "their own with job.partition: debug (it takes 1-node jobs of 00:30:00)",
        f"preflight: error: {s}:5: job.qos: QOS fast does not exist (sacctmgr show qos "
        "lists normal): set job.qos to one of them"]


def test_unknown_partition_and_down_nodes(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, job=", partition: gpu")
    found = pf.check(plan, slurm_facts())
    assert [p.text for p in found.errors] == [
        f"{tmp_path / 's.yaml'}:5: job.partition: partition gpu does not exist (scontrol "
        "show partition lists debug, short): set job.partition to one of them"]
    facts = slurm_facts()
    facts.queues.down_nodes["debug"] = 3
    found = pf.check(plan_of(tmp_path), facts)  # the default partition, debug
    assert [p.line() for p in found.problems] == [
        "preflight: warning: only 1 of the 4 nodes of partition debug take jobs now (sinfo: "
        "3 down, drained or failing): the 2-node runs wait until enough return"]


def test_no_accounting_is_a_note_and_a_missing_command_an_error(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, job=", account: scalestudy")
    found = pf.check(plan, slurm_facts(accounts=None, accounts_note="sacctmgr is not on PATH"))
    assert [p.line() for p in found.problems] == [
        "preflight: note: account scalestudy not checked: sacctmgr is not on PATH"]
    assert not found.errors
    found = pf.check(plan, slurm_facts(missing=["sbatch", "sacct"]))
    assert [p.line() for p in found.errors] == [
        "preflight: error: sbatch, sacct: not found on PATH on login1; scalestudy submits "
        "and follows slurm jobs with them: run it on a login node of the cluster (or load "
        "the module that provides them), or pick another `system:` than fake"]


def test_where_the_scheduler_cannot_be_asked_the_profiles_limits_apply(
        tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: t\nsystem: polaris\ngrid: {nodes: [10, 32]}\n"
                    "job: {account: A, queue: prod, walltime: '04:00:00'}\n")
    facts = pf.Facts(user="u", host="polaris-login-01",
                     queue_errors=["qstat: exit 1: cannot connect to server"])
    found = pf.check(make_plan(spec, tmp_path / "r"), facts)
    assert [p.line() for p in found.problems] == [
        "preflight: warning: could not ask pbs for its queues (qstat: exit 1: cannot connect "
        "to server); checked against profile polaris's limits instead",
        f"preflight: error: {spec}:4: job.walltime: 04:00:00 is longer than queue prod "
        "allows (03:00:00 for 10 node(s), profile polaris, from the site's docs): the jobs "
        "would be refused or never start; lower job.walltime to 03:00:00, or pick another "
        "queue"]
    spec.write_text("name: t\nsystem: polaris\ngrid: {nodes: [1, 16]}\njob: {account: A, "
                    "queue: debug-scaling}\n")
    found = pf.check(make_plan(spec, tmp_path / "r"), facts)
    assert found.errors[0].text.startswith(
        f"{spec}:3: grid.nodes: 16 node(s): queue debug-scaling takes at most 10 nodes "
        "(profile polaris, from the site's docs), so 1 run(s) would be refused or wait for "
        "ever; name prod too, e.g. job.queue: [debug-scaling, prod] (together they take "
        "every run of the study, 1-16-node jobs of 00:30:00; each run goes to the first "
        "that takes it), or pack the study (`run "
        "--pack`: each allocation goes to a queue that takes its size)")
    # naming none, the runs the default queue does not take go to one that does
    spec.write_text("name: t\nsystem: polaris\ngrid: {nodes: [1, 16]}\njob: {account: A}\n")
    assert not pf.check(make_plan(spec, tmp_path / "r"), facts).errors


def test_partition_access_lists_and_closed_partitions(tmp_path: Path) -> None:
    facts = slurm_facts()
    facts.queues.queues["short"] = queues.QueueLimits(
        "short", "scontrol show partition", closed="State=DOWN",
        allow_accounts=frozenset({"other"}))
    plan = plan_of(tmp_path, job=", account: scalestudy, partition: short")
    texts = [p.text for p in pf.check(plan, facts).errors]
    where = f"{tmp_path / 's.yaml'}:5: job.partition"
    assert texts == [
        f"{where}: partition short takes no jobs now (State=DOWN, scontrol show partition): "
        "its jobs would wait until it reopens; use another partition",
        f"{where}: partition short admits the accounts other only, not scalestudy (scontrol "
        "show partition): use one of them, or another partition"]


def test_ranks_over_the_cores_are_named_with_their_effect(tmp_path: Path) -> None:
    (tmp_path / "here.yaml").write_text(
        "name: here\nscheduler: local\nlauncher: torchrun\ncores_per_node: 2\n"
        "threads_per_rank: 1\nmax_nodes: 4\n")
    spec = tmp_path / "s.yaml"
    spec.write_text("name: t\nsystem: here.yaml\ngrid: {nodes: [1, 2, 4]}\n")
    found = pf.check(make_plan(spec, tmp_path / "r"), pf.Facts(user="u", host="h"))
    assert [p.line() for p in found.problems] == [
        "preflight: warning: 1 run(s) put more ranks on this host than its 2 cores "
        "(world_size 4): ranks share cores, so compute slows and efficiency understates how "
        "communication scales; keep world_size at most 2 for clean numbers (the report flags "
        "such points `oversubscribed`)"]


def test_the_jobs_python(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, backend=", backend: [ddp, deepspeed]")
    answer = pf.PythonAnswer("/opt/py", "profile fake: python", "login1", record={
        "torch": "2.13.0", "cuda": None, "hip": None,
        "modules": {"deepspeed": "ModuleNotFoundError: No module named 'deepspeed'"}})
    facts = slurm_facts(python=answer)
    texts = [p.text for p in pf.check(plan, facts).errors]
    assert texts == [
        f"{tmp_path / 's.yaml'}:4: grid.backend: backend deepspeed needs deepspeed, which "
        "/opt/py (profile fake: python) cannot import (ModuleNotFoundError: No module named "
        "'deepspeed'; checked on this host, login1; the compute nodes run it after the setup "
        "lines): install it with `pip install 'scalestudy[deepspeed]'`, or remove deepspeed "
        "from grid.backend"]
    gpus = plan_of(tmp_path, profile_extra="gpus_per_node: 4\n")
    facts = slurm_facts(python=pf.PythonAnswer("/opt/py", "w", "login1", record={
        "torch": "2.13.0+cpu", "cuda": None, "hip": None, "modules": {}}))
    assert "a CPU-only build" in pf.check(gpus, facts).errors[0].text
    facts.python = pf.PythonAnswer("/opt/py", "w", "login1", record={
        "torch": "2.13.0", "cuda": "12.8", "hip": None, "modules": {}})
    found = pf.check(gpus, facts)
    assert not found.problems and found.checked[-1] == (
        "/opt/py imports torch 2.13.0 (CUDA 12.8) on this host, login1")


@pytest.mark.slow
def test_asking_python_for_real() -> None:
    here = ask_python(sys.executable, "w", ["json", "no_such_module_x"], "h")
    assert here.error is None and here.record is not None
    assert here.record["torch"].startswith("2.") and here.record["modules"] == {
        "json": None, "no_such_module_x": "ModuleNotFoundError: No module named "
        "'no_such_module_x'"}
    missing = ask_python("/nonexistent/python3", "w", [], "h")
    assert missing.error == "was not found" and missing.record is None


# ---------------------------------------------------------------- asking


class RecordedSlurm:
    """Answers preflight's Slurm commands with the outputs recorded from the testbed."""

    FILES: ClassVar[dict[str, str]] = {"scontrol": "slurm-scontrol-show-partition.txt",
                                       "sinfo": "slurm-sinfo.txt"}

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], cwd: Path | None = None) -> tuple[int, str, str]:
        self.calls.append(list(argv))
        if argv[0] == "sacctmgr":
            return 0, read("slurm-sacctmgr-show-assoc.txt" if "assoc" in argv
                           else "slurm-sacctmgr-show-qos.txt"), ""
        return 0, read(self.FILES[argv[0]]), ""


def test_preflight_asks_each_command_once(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, job=", account: scalestudy, partition: short")
    fake = RecordedSlurm()
    found = preflight(plan, python=False, runner=fake, which=lambda c: f"/usr/bin/{c}")
    assert found.problems == [] and found.checked[0] == "slurm answers"
    assert [c[0] for c in fake.calls] == ["sacctmgr", "scontrol", "sinfo", "sacctmgr"]
    missing = preflight(plan, python=False, runner=fake, which=lambda c: None)
    assert [p.text.split(":")[0] for p in missing.errors] == ["sbatch, squeue, sacct"]
    assert len(fake.calls) == 4  # nothing asked without the commands


@pytest.mark.slow
def test_cli_preflight_without_the_scheduler_on_path(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: c\nsystem: generic-slurm\nworkload: {kind: command, command: "
                    "[hostname]}\njob: {account: a}\n")
    for argv in (("validate", "--preflight"), ("run",)):
        done = run_cli(*argv, str(spec), cwd=tmp_path, path="/nonexistent")
        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines()[0].startswith(
            "preflight: error: sbatch, squeue, sacct: not found on PATH on ")
        assert done.stderr.splitlines()[-1].startswith(
            "error: preflight: 1 problem(s) above would make jobs of study c fail or wait "
            "for ever: fix them")
    assert "--no-preflight" in done.stderr and not (tmp_path / "results" / "c" /
                                                     "jobs.jsonl").exists()


@pytest.mark.slow  # a real local run: torchrun starts 2 ranks
def test_cli_local_run_names_oversubscription_before_it_starts(tmp_path: Path) -> None:
    (tmp_path / "here.yaml").write_text(
        "name: here\nscheduler: local\nlauncher: torchrun\ncores_per_node: 1\n"
        "threads_per_rank: 1\nmax_nodes: 4\n")
    spec = tmp_path / "s.yaml"
    spec.write_text("name: t\nsystem: here.yaml\nworkload: {kind: command, command: "
                    "[echo, 'Total img/sec on 2 GPU(s): 5.0']}\ngrid: {nodes: [2]}\n")
    done = run_cli("run", str(spec), cwd=tmp_path)
    assert done.stderr.splitlines()[0] == (
        "preflight: warning: 1 run(s) put more ranks on this host than its 1 cores "
        "(world_size 2): ranks share cores, so compute slows and efficiency understates how "
        "communication scales; keep world_size at most 1 for clean numbers (the report flags "
        "such points `oversubscribed`)")
    assert "preflight: ok" not in done.stderr
    quiet = run_cli("validate", str(spec), "--preflight", cwd=tmp_path)
    assert quiet.returncode == 0 and quiet.stderr.count("preflight: warning") == 1


def test_another_users_flux_instance_is_an_error_before_anything_is_queued(
        tmp_path: Path) -> None:
    """Flux answers anyone but its owner `Unable to connect to Flux: Operation not
    permitted` (measured on the testbed: dev/flux-notes.md); `flux batch` would too."""
    spec = tmp_path / "s.yaml"
    spec.write_text("name: f\nsystem: generic-flux\nworkload: {kind: command, command: "
                    "[hostname]}\n")
    plan = make_plan(spec, tmp_path / "results")

    def refusing(argv: Sequence[str], cwd: Path | None = None) -> tuple[int, str, str]:
        return 1, "", "flux-queue: ERROR: Unable to connect to Flux: Operation not permitted\n"

    found = preflight(plan, python=False, runner=refusing, which=lambda c: f"/usr/bin/{c}")
    [error] = found.errors
    assert error.text.startswith("the Flux instance at $FLUX_URI does not accept this user")
    assert "belongs to someone else" in error.text and "flux alloc" in error.text
