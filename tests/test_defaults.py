"""Site-aware defaults: ranks per node follows the profile's GPUs per node, `plan` says
where each value came from, a run that leaves GPUs idle is named (a warning, with the
node-hours it holds), and run ids of specs that spelled ranks_per_node out stay put."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scalestudy.site.plan import make_plan
from scalestudy.site.profiles import available, load_system
from scalestudy.site.render import render
from scalestudy.study import plan_warnings
from tests.conftest import run_cli

GPU_PROFILES = [n for n in available() if load_system(n).gpus_per_node > 0]
SPEC = "name: d\nsystem: {system}\ngrid: {{nodes: [1, 2], {rpn}batch_size: [8]}}\n" \
       "job: {{account: A, walltime: '01:00:00'}}\n{workload}"
#: On Intel GPUs (Aurora's xpu) the user's own program, beside the bundled benchmark elsewhere.
COMMAND = "workload: {kind: command, command: [./train.sh, '{batch_size}']}\n"


def spec(tmp_path: Path, system: str, rpn: str = "") -> Path:
    path = tmp_path / "study.yaml"
    named = tmp_path / system if system.endswith(".yaml") else system
    workload = COMMAND if load_system(str(named)).gpu_api != "cuda" else ""
    path.write_text(SPEC.format(system=system, rpn=rpn, workload=workload))
    return path


def test_there_are_gpu_profiles_to_test() -> None:
    assert {"polaris", "aurora", "perlmutter", "frontier"} <= set(GPU_PROFILES)


@pytest.mark.parametrize("system", GPU_PROFILES)
def test_ranks_per_node_defaults_to_the_profiles_gpus(system: str, tmp_path: Path) -> None:
    plan = make_plan(spec(tmp_path, system), tmp_path / "results")
    gpus = plan.system.gpus_per_node
    assert [r.ranks_per_node for r in plan.runs] == [gpus, gpus]
    assert [r.world_size for r in plan.runs] == [gpus, 2 * gpus]
    script = render(plan.study, plan.system, plan.runs[1], tmp_path / "run")
    ranks = {"slurm": f"--ntasks-per-node={gpus}", "pbs": f"--ppn {gpus}",
             "flux": f"--nodes=2 --ntasks={2 * gpus}"}
    assert ranks[plan.system.scheduler] in script, script


def idle_warning(path: Path, system: str, gpus: int) -> str:
    """The warning for 1 rank per node on 1 and 2 nodes of `system`, walltime 1 h."""
    hours = round((gpus - 1) / gpus * 3, 3)  # (gpus - 1) / gpus x (1 + 2) nodes x 1 h
    return (f"{path}:3: grid.ranks_per_node: 1 rank(s) per node leave {gpus - 1} "
            f"of the {gpus} GPUs of each {system} node idle in 2 run(s) (on 1, 2 node(s)): "
            f"up to {hours:g} node-hours of idle GPUs (idle GPUs / GPUs per node x nodes x "
            f"walltime 01:00:00, summed); to use every GPU set ranks_per_node {gpus} (or "
            "leave grid.ranks_per_node out: that is the profile's default); keep it if the "
            "idle GPUs are meant")


@pytest.mark.parametrize("system", GPU_PROFILES)
def test_ranks_below_the_gpus_are_a_warning_with_the_node_hours(system: str,
                                                                tmp_path: Path) -> None:
    gpus = load_system(system).gpus_per_node
    path = spec(tmp_path, system, "ranks_per_node: [1], ")
    assert plan_warnings(make_plan(path, tmp_path / "results")) == [
        idle_warning(path, system, gpus)]
    full = make_plan(spec(tmp_path, system), tmp_path / "results")
    assert plan_warnings(full) == []


@pytest.mark.slow
def test_validate_and_plan_print_the_warning_and_succeed(tmp_path: Path) -> None:
    path = spec(tmp_path, "polaris", "ranks_per_node: [1], ")
    for command in ("validate", "plan"):
        done = run_cli(command, str(path), cwd=tmp_path)
        assert done.returncode == 0, done.stderr  # a warning, not an error
        lines = [ln for ln in done.stderr.splitlines() if ln.startswith("warning:")]
        assert lines == [f"warning: {idle_warning(path, 'polaris', 4)}"], done.stderr
    full = run_cli("validate", str(spec(tmp_path, "polaris")), cwd=tmp_path)
    assert full.returncode == 0 and not any(  # the queue's own limits may still warn
        ln.startswith("warning:") for ln in full.stderr.splitlines()), full.stderr


def test_the_warning_names_each_ranks_value_and_its_sum(tmp_path: Path) -> None:
    done = run_cli("plan", str(spec(tmp_path, "polaris", "ranks_per_node: [1, 2, 4], ")),
                   "--json", cwd=tmp_path)
    summary = json.loads(done.stdout)
    assert len(summary["warnings"]) == 2  # 1 and 2 ranks per node; 4 uses every GPU
    assert "up to 2.25 node-hours" in summary["warnings"][0]  # 3/4 x 3 nodes x 1 h
    assert "up to 1.5 node-hours" in summary["warnings"][1]  # 2/4 x 3 nodes x 1 h
    assert sum(ln.startswith("warning: ") for ln in done.stderr.splitlines()) == 2
    assert summary["limits"] and summary["limits"][0].startswith(  # one job per user
        "limits: warning: queue debug-scaling lets one user have 1 job(s)")


def test_a_cpu_profile_keeps_one_rank_per_node_and_a_profile_may_set_its_own(
        tmp_path: Path) -> None:
    plan = make_plan(spec(tmp_path, "local"), tmp_path / "results")
    assert {r.ranks_per_node for r in plan.runs} == {1}
    (tmp_path / "cpu.yaml").write_text(
        "name: cpu\nscheduler: slurm\nlauncher: srun\nmax_nodes: 8\ncores_per_node: 64\n"
        "default_ranks_per_node: 8\n")
    plan = make_plan(spec(tmp_path, "cpu.yaml"), tmp_path / "results")
    assert {r.ranks_per_node for r in plan.runs} == {8}
    values = json.loads(run_cli("plan", str(tmp_path / "study.yaml"), "--json",
                                cwd=tmp_path).stdout)["values"]
    assert values["grid.ranks_per_node"] == {
        "value": [8], "from": "profile", "where": "profile cpu: default_ranks_per_node"}


@pytest.mark.slow
def test_plan_says_where_each_value_comes_from(tmp_path: Path) -> None:
    path = tmp_path / "study.yaml"
    path.write_text("name: d\nsystem: polaris\ngrid: {nodes: [1, 2]}\njob: {account: A}\n")
    values = json.loads(run_cli("plan", str(path), "--json", cwd=tmp_path).stdout)["values"]
    assert values == {
        "grid.ranks_per_node": {"value": [4], "from": "profile",
                                "where": "profile polaris: gpus_per_node"},
        "grid.nodes": {"value": [1, 2], "from": "spec", "where": f"{path}:3: grid.nodes"},
        "grid.batch_size": {"value": [32], "from": "default", "where": "scalestudy's default"},
        "job.walltime": {"value": "00:30:00", "from": "default",
                         "where": "scalestudy's default"},
        "job.account": {"value": "A", "from": "spec", "where": f"{path}:4: job.account"},
        "job.pbs.queue": {"value": "debug-scaling", "from": "profile",
                      "where": "profile polaris: scheduler_options.queue"},
    }
    text = run_cli("plan", str(path), cwd=tmp_path, env_extra={"COLUMNS": "200"}).stdout
    assert "where the values come from:" in text
    assert "  grid.ranks_per_node 4: profile polaris: gpus_per_node" in text
    assert "  job.pbs.queue debug-scaling: profile polaris: scheduler_options.queue" in text
    slurm = tmp_path / "slurm.yaml"
    slurm.write_text("name: d\nsystem: perlmutter\nscaling: strong\n"
                     "grid: {global_batch: [64]}\njob: {account: A, qos: debug}\n")
    values = json.loads(run_cli("plan", str(slurm), "--json", cwd=tmp_path).stdout)["values"]
    assert values["grid.global_batch"]["from"] == "spec"
    assert values["job.slurm.partition"] == {"value": None, "from": "unset",
                                             "where": "not set: the scheduler's default"}
    assert values["job.slurm.qos"] == {"value": "debug", "from": "spec",  # the old form
                                       "where": f"{slurm}:5: job.qos"}


@pytest.mark.parametrize(("text", "ids"), [
    # ids computed before ranks_per_node could default to the profile
    ("system: polaris\ngrid: {nodes: [1, 2], ranks_per_node: [4], batch_size: [32]}\n"
     "job: {account: MyProject}\n", ["29072c43b9", "29c555a57c"]),
    ("grid: {nodes: [1, 2], batch_size: [8]}\n", ["2cfb4082cb", "a930103227"]),
    ("system: frontier\ngrid: {nodes: [2], ranks_per_node: [8, 4], batch_size: [16]}\n"
     "job: {account: ABC123}\n", ["aa6b05d38f", "cdaaf9540f"]),
])
def test_run_ids_of_specs_that_spelled_ranks_out_do_not_change(text: str, ids: list[str],
                                                               tmp_path: Path) -> None:
    path = tmp_path / "ids.yaml"
    path.write_text("name: ids\n" + text)
    assert [r.run_id for r in make_plan(path, tmp_path / "results").runs] == ids


def test_leaving_ranks_out_on_a_gpu_system_is_the_same_run_as_spelling_it(
        tmp_path: Path) -> None:
    left_out = make_plan(spec(tmp_path, "polaris"), tmp_path / "r").runs
    spelled = make_plan(spec(tmp_path, "polaris", "ranks_per_node: [4], "), tmp_path / "r").runs
    assert [r.run_id for r in left_out] == [r.run_id for r in spelled]
