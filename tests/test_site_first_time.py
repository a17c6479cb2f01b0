"""Right the first time on a real site: what a Polaris (and Aurora, Perlmutter) user
meets in a dry run, read from the rendered scripts and the messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalestudy.core.errors import SpecError
from scalestudy.core.grid import describe_run
from scalestudy.site import resolve
from scalestudy.site.plan import make_plan
from scalestudy.site.render import render
from scalestudy.site.schedulers.pbs import limits as pbs_limits
from scalestudy.site.schedulers.slurm import limits as slurm_limits

ACCOUNTS = "job: {account: MyProject}\n"


def workload_for(system: str) -> str:
    """The bundled benchmark runs on every shipped GPU profile (CUDA, and Aurora's xpu)."""
    return ""


def test_the_bundled_benchmark_runs_on_aurora_through_torch_xpu(tmp_path: Path) -> None:
    """Issue 46: Aurora's tiles are xpu devices; torch 2.8+ has torch.xpu and the xccl
    backend, so the bundled benchmark is no longer refused there: its job asks for
    --device xpu (set_device(local rank), xccl, bf16 autocast on xpu). What it cannot do
    on Intel GPUs (Horovod, DeepSpeed, fp16) is refused before anything is written."""
    plan = make_plan(spec(tmp_path, "name: s\nsystem: aurora\nworkload: {model: resnet50, "
                          f"precision: bf16}}\n{ACCOUNTS}"), tmp_path)
    script = render(plan.study, plan.system, plan.runs[0], tmp_path / "r", python="python3")
    [launch] = [ln for ln in script.splitlines() if ln.startswith("mpiexec ")]
    assert " --ppn 12 --cpu-bind list:1-8:" in launch and launch.endswith("--device xpu")
    assert "--precision bf16" in launch and "export ZE_FLAT_DEVICE_HIERARCHY=FLAT" in script
    with pytest.raises(SpecError) as raised:
        make_plan(spec(tmp_path, "name: s\nsystem: aurora\nworkload: {precision: fp16}\n"
                       "grid: {backend: [ddp, horovod, deepspeed]}\n" + ACCOUNTS), tmp_path)
    said = str(raised.value).splitlines()
    assert [ln.split(": ")[1] for ln in said] == [
        "grid.backend[1]", "grid.backend[2]", "workload"], said
    assert "backend horovod does not run on the Intel GPUs of system 'aurora'" in said[0]
    assert "use ddp or fsdp" in said[0] and "use bf16 (autocast on xpu) or fp32" in said[2]


def spec(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("system", "gpus"), [("polaris", 4), ("aurora", 12),
                                              ("perlmutter", 4)])
def test_more_ranks_than_gpus_is_an_error_unless_asked_for(tmp_path: Path, system: str,
                                                           gpus: int) -> None:
    text = (f"name: s\nsystem: {system}\ngrid: {{nodes: [1, 2], ranks_per_node: "
            f"[{2 * gpus}]}}\n{ACCOUNTS}{workload_for(system)}")
    with pytest.raises(SpecError) as raised:
        make_plan(spec(tmp_path, text), tmp_path)
    said = str(raised.value)
    assert f"s.yaml:3: grid.ranks_per_node: {2 * gpus} rank(s) per node on system " \
           f"'{system}', which has {gpus} GPUs per node: up to 2 ranks would share each " \
           "GPU" in said
    assert f"set ranks_per_node to {gpus} or fewer" in said and "job.share_gpus: true" in said
    shared = text.replace(ACCOUNTS, "job: {account: MyProject, share_gpus: true}\n")
    assert len(make_plan(spec(tmp_path, shared), tmp_path).runs) == 2


GPT = """name: gpt
system: polaris
workload: {model: gpt-125m, seq_len: 1024, precision: bf16}
grid: {nodes: [1], backend: [fsdp], tp: [1, 4]}
job: {account: MyProject}
"""


def test_a_transformer_job_shows_what_it_runs(tmp_path: Path) -> None:
    plan = make_plan(spec(tmp_path, GPT), tmp_path)
    by_tp = {dict(r.axes).get("tp"): r for r in plan.runs}
    script = render(plan.study, plan.system, by_tp[4], tmp_path / "run")
    assert "--image-size" not in script and "--num-classes" not in script
    assert ("# 1 node(s) x 4 rank(s)/node = 4 rank(s); dp 1 x tp 4 x pp 1; batch 32 "
            "sequences per data-parallel replica (32 global) of 1024 tokens; backend fsdp"
            ) in script
    assert describe_run(plan.study, by_tp[1], short=True) == "1x4 b32 dp4 tp1 pp1 fsdp"
    image = make_plan(spec(tmp_path, "name: r\nsystem: polaris\n" + ACCOUNTS), tmp_path)
    assert "--image-size 224" in render(image.study, image.system, image.runs[0],
                                        tmp_path / "r")


def test_a_default_is_named_as_a_default_not_a_line(tmp_path: Path) -> None:
    plan = make_plan(spec(tmp_path, GPT.replace("nodes: [1], ", "")), tmp_path)
    nodes = next(v for v in resolve.values(plan.study, plan.system) if v.key == "grid.nodes")
    assert (nodes.value, nodes.origin, nodes.where) == ([1], "default",
                                                         "scalestudy's default")


def test_a_spec_names_the_python_the_jobs_start(tmp_path: Path) -> None:
    text = GPT.replace("job: {account: MyProject}",
                       "job: {account: MyProject, python: /eagle/p/venv/bin/python}")
    plan = make_plan(spec(tmp_path, text), tmp_path)
    assert "/eagle/p/venv/bin/python -m scalestudy.workload" in render(
        plan.study, plan.system, plan.runs[0], tmp_path / "run")
    with pytest.raises(SpecError, match=r"job\.python"):
        make_plan(spec(tmp_path, text.replace("/eagle/p", "eagle/p")), tmp_path)


def test_the_profiles_queue_rules_bound_the_jobs_and_say_the_wall_time(
        tmp_path: Path) -> None:
    from scalestudy.site import preflight as pf

    # 16 runs into debug-scaling (Polaris' default queue): one job per user at a time.
    text = ("name: s\nsystem: polaris\ngrid: {nodes: [1, 2, 4, 8], batch_size: [32, 64]}\n"
            "repeats: 2\n" + ACCOUNTS)
    plan = make_plan(spec(tmp_path, text), tmp_path)
    facts = pf.Facts(user="u", host="polaris-login-01", queue_errors=["qstat: no answer"])
    found = pf.check(plan, facts)
    (line,) = [p.line() for p in found.problems if "lets one user" in p.text]
    assert line == (
        "preflight: warning: queue debug-scaling lets one user have 1 job(s) in it at once "
        "(profile polaris, from the site's docs: ALCF Polaris queue table, "
        "docs.alcf.anl.gov/polaris/running-jobs/): `run` keeps at most 1 of the study's 16 "
        "jobs there (its --max-jobs default), so they run 1 at a time: at least 16 × "
        "00:30:00 = 08:00:00 of walltime-long runs one after another, plus the queue waits; "
        "pack them into one allocation (`run --pack`: one job, one queue wait), use a queue "
        "that takes more jobs per user, or run fewer (--only)")
    assert found.job_limit is not None and found.job_limit[0] == 1
    assert pf.profile_job_limit(plan)[0] == 1  # without asking: the same default
    debug = make_plan(spec(tmp_path, text.replace(ACCOUNTS, "job: {account: A, queue: "
                                                  "debug}\n")), tmp_path)
    assert pf.profile_job_limit(debug)[0] == 2  # one running and one queued


def test_job_limits_the_scheduler_states() -> None:
    import json


    # PBS Pro: `qmgr -c "set queue q max_queued = [u:PBS_GENERIC=1]"` shows as
    qstat = {"Queue": {"debug-scaling": {"queue_type": "Execution",
                                         "max_queued": "[u:PBS_GENERIC=1]",
                                         "max_run": "[u:PBS_GENERIC=1]"},
                       "workq": {"queue_type": "Execution"}}}
    got = pbs_limits.parse_qstat_queues(json.dumps(qstat)).queues
    assert (got["debug-scaling"].max_jobs, got["debug-scaling"].max_running) == (1, 1)
    assert got["workq"].max_jobs is None
    # Slurm: MaxJobsPU (running) and MaxSubmitPU (queued + running) of each QOS
    qos = slurm_limits.parse_sacctmgr_qos(
        "debug|00:30:00|node=8||2|5\nregular|2-00:00:00|||\n").pools
    assert (qos["debug"].max_running, qos["debug"].max_jobs) == (2, 5)
    assert qos["regular"].max_jobs is None


def test_a_perlmutter_qos_limit_from_sacctmgr_bounds_the_jobs(tmp_path: Path) -> None:
    from scalestudy.site import preflight as pf

    text = ("name: s\nsystem: perlmutter\ngrid: {nodes: [1, 2, 4], batch_size: [32, 64]}\n"
            "job: {account: m1234, qos: debug}\n")
    plan = make_plan(spec(tmp_path, text), tmp_path)
    facts = pf.Facts(user="u", host="login01")
    facts.queues.merge(slurm_limits.parse_sacctmgr_qos("debug|00:30:00|node=8||2|5\n"))
    found = pf.check(plan, facts)
    assert found.job_limit == (5, "QOS debug's per-user limit (sacctmgr show qos)")
    (line,) = [p.text for p in found.problems if "lets one user" in p.text]
    assert "have 5 job(s) in it at once, 2 running (sacctmgr show qos)" in line
    assert "3 × 00:30:00 = 01:30:00" in line


def test_the_helpers_a_polaris_script_calls_are_looked_for(tmp_path: Path) -> None:
    from scalestudy.site import needs

    plan = make_plan(spec(tmp_path, "name: s\nsystem: polaris\n" + ACCOUNTS), tmp_path)
    assert needs.helper_names(plan) == ["mpiexec", "set_affinity_gpu_polaris.sh"]
    problems, checked = needs.helpers(
        plan, {"mpiexec": "/opt/cray/pals/bin/mpiexec", "set_affinity_gpu_polaris.sh": None},
        "polaris-login-01")
    ((severity, text),) = problems
    assert severity == "error" and text.startswith(
        "set_affinity_gpu_polaris.sh (the per-rank GPU wrapper; the job script calls it) is "
        "not on PATH on polaris-login-01: get it from ALCF's GettingStarted repository")
    assert checked == ["mpiexec on PATH"]
    # setup lines that extend PATH may bring it: a warning, not an error
    later = make_plan(spec(tmp_path, "name: s\nsystem: polaris\njob: {account: A, setup: "
                           "['export PATH=$HOME/bin:$PATH']}\n"), tmp_path)
    problems, _ = needs.helpers(later, {"set_affinity_gpu_polaris.sh": None}, "login")
    assert problems[0][0] == "warning" and "setup lines may add it" in problems[0][1]


@pytest.mark.parametrize(("python", "home", "severity", "words"), [
    ("/tmp/me/venv/bin/python", None, "error", "on a disk of this host only"),
    ("/usr/local/venv/bin/python", None, "warning", "not under a filesystem that system "
                                                    "polaris shares"),
    ("/eagle/p/venv/bin/python", "/usr/bin", "warning", "a venv built on /usr/bin, which is "
                                                        "not on a filesystem"),
    ("/eagle/p/venv/bin/python", "/soft/applications/conda/2024-04-29/mconda3/bin", None,
     "a venv built on /soft/applications"),
])
def test_the_jobs_python_must_be_one_the_compute_nodes_can_run(
        tmp_path: Path, python: str, home: str | None, severity: str | None,
        words: str) -> None:
    from scalestudy.site import needs

    plan = make_plan(spec(tmp_path, "name: s\nsystem: polaris\n" + ACCOUNTS), tmp_path)
    problems, checked = needs.shared(plan, python, "job.python", "polaris-login-01", home)
    if severity is None:
        assert problems == [] and words in checked[0]
    else:
        ((got, text),) = problems
        assert got == severity and words in text
    if home == "/usr/bin":
        assert "module load conda" in text  # the module the setup lines load


def test_a_profile_that_names_no_shared_filesystem_is_not_judged(tmp_path: Path) -> None:
    """A generic profile (or a one-host testbed, whose nodes see this host's /tmp) says
    nothing of what its nodes share: a venv under /tmp is not called node-local there."""
    from scalestudy.site import needs

    plan = make_plan(spec(tmp_path, "name: s\nsystem: generic-slurm\n"), tmp_path)
    assert plan.system.shared_filesystems == []
    assert needs.shared(plan, "/tmp/me/venv/bin/python", "job.python", "login",
                        None) == ([], [])


def test_a_venvs_base_is_read_from_its_pyvenv_cfg(tmp_path: Path) -> None:
    from scalestudy.execute.preflight import venv_home

    (tmp_path / "bin").mkdir()
    (tmp_path / "pyvenv.cfg").write_text("home = /soft/conda/bin\ninclude-system-site-"
                                         "packages = true\n")
    assert venv_home(str(tmp_path / "bin" / "python")) == "/soft/conda/bin"
    assert venv_home("/usr/bin/python3") is None


@pytest.mark.parametrize(("system", "python"), [
    ("aurora", "/lus/flare/projects/p/venv/bin/python"),
    ("perlmutter", "/global/common/software/m1234/venv/bin/python")])
def test_aurora_and_perlmutter_know_their_shared_filesystems(tmp_path: Path, system: str,
                                                             python: str) -> None:
    from scalestudy.site import needs

    plan = make_plan(spec(tmp_path, f"name: s\nsystem: {system}\n" + ACCOUNTS
                          + workload_for(system)), tmp_path)
    assert needs.shared(plan, python, "job.python", "login", None)[0] == []
    ((severity, _),) = needs.shared(plan, "/opt/me/venv/bin/python", "job.python", "login",
                                    None)[0]
    assert severity == "warning"
