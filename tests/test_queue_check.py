"""site.queue_check offline: validate, plan and run --dry-run hold a study against its
profile's documented queue limits with no scheduler at hand (a laptop), each problem one
line; the cases of issue 33's "Why", tried as a new Polaris user would."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from scalestudy.site.queue_check import offline
from scalestudy.study import make_plan
from tests.conftest import run_cli

#: No scheduler on PATH: only the interpreter's own directory.
NO_SCHEDULER = str(Path(sys.executable).parent)


def study(tmp_path: Path, system: str, nodes: str, job: str) -> Path:
    spec = tmp_path / "s.yaml"
    spec.write_text(f"name: s\nsystem: {system}\nworkload: {{model: resnet50}}\n"
                    f"grid: {{nodes: {nodes}, batch_size: [64]}}\njob: {{{job}}}\n")
    return spec


@pytest.mark.slow
@pytest.mark.parametrize(("system", "nodes", "job", "says"), [
    ("polaris", "[1, 2, 4, 8, 16]", "queue: debug-scaling, account: A",
     "16 node(s): queue debug-scaling takes at most 10 nodes"),
    ("polaris", "[1, 2]", "queue: debug-scaling, account: A, walltime: '02:00:00'",
     "02:00:00 is longer than queue debug-scaling allows (01:00:00"),
    ("polaris", "[1, 2, 4, 8]", "queue: prod, account: A",
     "1, 2, 4, 8 node(s): queue prod takes at least 10 nodes"),
    ("polaris", "[1, 2]", "queue: debug_scaling, account: A",
     "queue debug_scaling is not one of profile polaris's queues (debug, debug-scaling, "
     "prod): did you mean debug-scaling? set job.queue: debug-scaling"),
    ("frontier", "[16]", "account: A, walltime: '03:00:00'",
     "03:00:00 is longer than partition batch allows (02:00:00 for 16 node(s)"),
    ("el-capitan", "[64]", "queue: pdebug, account: A",
     "64 node(s): queue pdebug takes at most 32 nodes"),
    ("perlmutter", "[4, 16]", "qos: debug, account: A, walltime: '00:30:00'",
     "16 node(s): QOS debug takes at most 8 nodes"),
    ("perlmutter", "[4]", "qos: debug, account: A, walltime: '01:00:00'",
     "01:00:00 is longer than QOS debug allows (00:30:00"),
])
def test_the_sites_limits_are_known_offline(tmp_path: Path, system: str, nodes: str,
                                            job: str, says: str) -> None:
    spec = study(tmp_path, system, nodes, job)
    [error] = offline(make_plan(spec, tmp_path / "results")).errors
    assert says in error.text, error.text
    for command in (["validate"], ["plan"], ["run", "--dry-run"]):
        done = run_cli(*command, str(spec), cwd=tmp_path, path=NO_SCHEDULER)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        lines = [ln for ln in done.stderr.splitlines() if ln.startswith("limits: error:")]
        assert len(lines) == 1 and says in lines[0], done.stderr
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "results").exists()  # refused before anything is written


def test_within_the_limits_a_one_job_queue_proposes_packing(tmp_path: Path) -> None:
    spec = study(tmp_path, "polaris", "[1, 2, 4]", "queue: debug-scaling, account: A")
    found = offline(make_plan(spec, tmp_path / "results"))
    assert not found.errors
    [warning] = found.problems
    assert "lets one user have 1 job(s)" in warning.text and "`run --pack`" in warning.text
    done = run_cli("validate", str(spec), cwd=tmp_path, path=NO_SCHEDULER)
    assert done.returncode == 0 and "limits: warning: queue debug-scaling" in done.stderr


def test_a_packed_study_is_held_by_its_allocations_not_its_runs(tmp_path: Path) -> None:
    # 1-16 nodes cannot all go to one queue, but packed allocations can (prod takes 16)
    spec = study(tmp_path, "polaris", "[1, 2, 4, 8, 16]",
                 "queue: prod, account: A, pack: true")
    done = run_cli("validate", str(spec), cwd=tmp_path, path=NO_SCHEDULER)
    assert done.returncode == 0, done.stderr


def test_a_preflight_without_the_schedulers_commands_falls_back_to_the_profile(
        tmp_path: Path) -> None:
    from scalestudy.site import preflight as pf

    spec = study(tmp_path, "polaris", "[1, 16]", "queue: debug-scaling, account: A")
    facts = pf.Facts(user="u", host="laptop", missing=["qsub", "qstat"])
    lines = [p.line() for p in pf.check(make_plan(spec, tmp_path / "r"), facts).problems]
    assert lines[0].startswith("preflight: error: qsub, qstat: not found on PATH on laptop")
    assert ("preflight: warning: qsub, qstat not on PATH on laptop; checked against "
            "profile polaris's limits instead") in lines
    assert any("16 node(s): queue debug-scaling takes at most 10 nodes (profile polaris"
               in line for line in lines)


@pytest.mark.slow
@pytest.mark.parametrize("queue", ["", "queue: [debug-scaling, prod], "])
def test_one_study_across_queues(tmp_path: Path, queue: str) -> None:
    """Polaris 1-16 nodes: debug-scaling stops at 10, prod starts at 10. Naming both, or
    none, each run goes to a queue that takes it, and plan says which."""
    import json

    spec = study(tmp_path, "polaris", "[1, 2, 4, 8, 16]", f"{queue}account: A")
    done = run_cli("plan", str(spec), "--json", cwd=tmp_path, path=NO_SCHEDULER)
    assert done.returncode == 0, done.stderr
    runs = json.loads(done.stdout)["runs"]
    assert {r["nodes"]: r["queue"] for r in runs} == {
        1: "debug-scaling", 2: "debug-scaling", 4: "debug-scaling", 8: "debug-scaling",
        16: "prod"}
    shown = run_cli("plan", str(spec), cwd=tmp_path, path=NO_SCHEDULER,
                    env_extra={"COLUMNS": "200"})
    assert "queues: debug-scaling: 1, 2, 4, 8 node(s); prod: 16 node(s)" in shown.stdout
    dry = run_cli("run", "--dry-run", str(spec), cwd=tmp_path, path=NO_SCHEDULER)
    assert dry.returncode == 0, dry.stderr
    scripts = {r["nodes"]: (tmp_path / "results" / "s" / "runs" / r["run_id"] / "job.sh")
               .read_text() for r in runs}
    assert "#PBS -q prod" in scripts[16] and "#PBS -q debug-scaling" in scripts[8]


@pytest.mark.parametrize(("start", "nodes"), [
    ("[debug]", "[1, 2, 4, 8, 16]"), ("debug", "[1, 2, 4, 8, 16, 32, 128]"),
    ("[prod]", "[1, 16]"), ("[debug, debug-scaling]", "[1, 2, 4, 8, 16]"),
    ("[debug, prod]", "[1, 2, 4, 8, 16]")])
def test_following_the_queue_suggestions_reaches_a_plan_that_passes(
        tmp_path: Path, start: str, nodes: str) -> None:
    """Issue 46: from [debug], Polaris's suggestions went round ([debug] -> [debug,
    debug-scaling] -> [debug, prod] -> ...) and never offered [debug-scaling, prod].
    Do what each error says until the study passes; a queue set seen twice is a circle."""
    spec = study(tmp_path, "polaris", nodes, f"queue: {start}, account: A")
    seen: list[str] = []
    for _ in range(5):
        errors = offline(make_plan(spec, tmp_path / "results")).errors
        if not errors:
            break
        found = re.search(r"e\.g\. job\.queue: (\[[^]]+\]|[\w-]+) \(", errors[0].text)
        assert found, errors[0].text
        queues = found.group(1)
        assert queues not in seen, f"went round in a circle: {seen} then {queues}"
        seen.append(queues)
        spec.write_text(spec.read_text().replace(
            re.search(r"queue: (\[[^]]+\]|[\w-]+),", spec.read_text()).group(0),
            f"queue: {queues},"))
    assert not offline(make_plan(spec, tmp_path / "results")).errors, seen
    assert len(seen) == 1  # one suggestion, checked before it is offered, is enough
    done = run_cli("validate", str(spec), cwd=tmp_path, path=NO_SCHEDULER)
    assert done.returncode == 0, done.stderr


def test_no_set_of_queues_takes_the_study_so_none_is_suggested(tmp_path: Path) -> None:
    # 8 h: no queue the profile documents takes a 1-node (or 32-node) job that long
    spec = study(tmp_path, "polaris", "[1, 32]",
                 "queue: debug-scaling, account: A, walltime: '08:00:00'")
    errors = offline(make_plan(spec, tmp_path / "results")).errors
    assert errors and not any("e.g. job.queue: [" in e.text for e in errors), errors


@pytest.mark.slow
def test_perlmutters_72_hour_1024_node_plan_is_refused_offline(tmp_path: Path) -> None:
    """Issue 46: with no QOS limits in the profile, 72 h x 1,024 nodes (74,952
    node-hours over the grid) passed with exit 0; regular stops at 48 h."""
    spec = study(tmp_path, "perlmutter", "[1, 8, 64, 256, 1024]",
                 "account: m1_g, walltime: '72:00:00'")
    for command in (["validate"], ["plan"], ["run", "--dry-run"]):
        done = run_cli(*command, str(spec), cwd=tmp_path, path=NO_SCHEDULER)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert ("job.walltime: 72:00:00 is longer than system 'perlmutter' allows "
                "(48:00:00") in done.stderr and "lower job.walltime to 48:00:00" in done.stderr
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "results").exists()
    # at 48 h the profile's default QOS, regular, takes every size
    spec.write_text(spec.read_text().replace("72:00:00", "48:00:00"))
    found = offline(make_plan(spec, tmp_path / "results"))
    assert not found.errors and "QOS regular takes 1+ nodes and 2-00:00:00 (profile " \
        "perlmutter, from the site's docs)" in found.checked, found.checked


def test_aurora_documents_its_per_user_job_limits(tmp_path: Path) -> None:
    # ALCF's Aurora queue table: debug-scaling takes one job per user, queued or running
    spec = study(tmp_path, "aurora", "[2, 4, 8]", "queue: debug-scaling, account: A")
    found = offline(make_plan(spec, tmp_path / "results"))
    assert not found.errors
    [warning] = found.problems
    assert "queue debug-scaling lets one user have 1 job(s) in it at once" in warning.text
    assert "ALCF Aurora queue table" in warning.text
    short = study(tmp_path, "aurora", "[2]", "queue: debug, account: A, walltime: '00:04:00'")
    [error] = offline(make_plan(short, tmp_path / "results")).errors
    assert "00:04:00 is shorter than queue debug accepts (00:05:00" in error.text
