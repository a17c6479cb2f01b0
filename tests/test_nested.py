"""The Flux engine of a packed allocation (execute.packing.nested) and what a study with
`pack_engine: flux` writes: Flux's host lists and outcomes in the step journal's words,
each step the run's own Flux job script, the allocation starting Flux under srun, and
the clear refusals. The engine against a real Flux nested in a real Slurm job is in
tests/test_e2e_flux.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scalestudy.core.errors import ScalestudyError
from scalestudy.execute.packing.allocations import check_engine
from scalestudy.execute.packing.nested import FluxEngine, expand
from scalestudy.study import RunRequest, make_plan, run
from tests.test_packing_execute import Quiet
from tests.test_tracking import PROFILE

FLUX = Path(__file__).parent / "data" / "flux"
SPEC = """
name: t
system: {profile}
grid: {{nodes: [1, 2], batch_size: [8]}}
job: {{walltime: "00:10:00", pack: true, pack_engine: flux, account: proj1,
       partition: short}}
"""


def record(name: str) -> dict:
    return json.loads((FLUX / "jobs" / name).read_text(encoding="utf-8"))


def test_flux_host_lists_expand_in_order() -> None:
    assert expand("node[0-1],n4") == ["node0", "node1", "n4"]
    assert expand("nid[008-010,012]") == ["nid008", "nid009", "nid010", "nid012"]
    assert expand("vm,vm") == ["vm", "vm"] and expand("") == []


@pytest.mark.parametrize(("name", "rc", "timed_out", "why"), [
    ("exit0.json", 0, False, None),
    ("exit3.json", 3, False, None),
    ("timeout.json", 142, True, None),  # Flux's time limit: the step's own walltime
    ("pending.json", 143, False, "Flux could not start it (cancel"),  # -128: never ran
    ("unsatisfiable.json", 1, False, "unsatisfiable request"),
])
def test_what_flux_says_of_an_ended_job_is_journalled(name: str, rc: int, timed_out: bool,
                                                     why: str | None) -> None:
    entry = FluxEngine._ended("r1", record(name))
    assert (entry.event, entry.rc, entry.timed_out) == ("ended", rc, timed_out)
    if why is None:
        assert entry.why is None and "why" not in entry.line()
    else:
        assert entry.why is not None and why in entry.why


def test_each_step_is_the_runs_own_flux_job_and_flux_starts_under_srun(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "fake.yaml").write_text(PROFILE)
    (tmp_path / "study.yaml").write_text(SPEC.format(profile=tmp_path / "fake.yaml"))
    flux = tmp_path / "bin" / "flux"
    flux.parent.mkdir()
    flux.write_text("#!/bin/sh\nexit 0\n")
    flux.chmod(0o755)
    monkeypatch.setenv("PATH", f"{flux.parent}:/usr/bin:/bin")
    plan = make_plan(tmp_path / "study.yaml", tmp_path / "results")
    run(plan, RunRequest(dry_run=True, pack=True), Quiet())
    alloc = plan.directory / "allocations" / "dry-run-1"
    script = (alloc / "job.sh").read_text()
    assert "#SBATCH -A proj1" in script and "#SBATCH -p short" in script  # the allocation's
    assert ('exec srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" '
            '--ntasks-per-node=1 --cpus-per-task="$SLURM_CPUS_ON_NODE" --mpi=pmi2 flux start '
            ) in script and "-m scalestudy.execute.allocation" in script
    spec = json.loads((alloc / "allocation.json").read_text())
    assert spec["engine"] == "flux" and {s["log"] for s in spec["steps"]} == {"flux.log"}
    for r in plan.runs:
        step = (plan.run_dir(r) / "job.sh").read_text()
        assert f"# flux: --nodes={r.nodes}" in step and "# flux: --time-limit=600s" in step
        assert "--queue" not in step and "--bank" not in step and "#SBATCH" not in step
        assert f"flux run --nodes={r.nodes} --ntasks={r.world_size}" in step
        assert "-o cpu-affinity=per-task" in step and "SCALESTUDY_STEP" not in step


def test_the_flux_engine_is_refused_where_it_cannot_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "fake.yaml").write_text(PROFILE)
    (tmp_path / "study.yaml").write_text(SPEC.format(profile=tmp_path / "fake.yaml"))
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ScalestudyError, match="no `flux` command on PATH"):
        check_engine(make_plan(tmp_path / "study.yaml", tmp_path / "results"))
    (tmp_path / "pbs.yaml").write_text(PROFILE.replace("slurm", "pbs").replace(
        "srun", "mpirun"))
    (tmp_path / "study.yaml").write_text(
        SPEC.format(profile=tmp_path / "pbs.yaml").replace("partition", "queue"))
    with pytest.raises(ScalestudyError, match=r"inside a pbs job .* set job\.pack_engine: steps"):
        check_engine(make_plan(tmp_path / "study.yaml", tmp_path / "results"))
