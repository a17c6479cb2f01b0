"""Schedulers: directives, submit/query/cancel argv, and parsers over recorded outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalestudy.core.errors import ScalestudyError
from scalestudy.core.states import JobStatus
from scalestudy.site import schedulers
from scalestudy.site.schedulers import JobRequest, SubmitError

PENDING, RUNNING, COMPLETED, FAILED = (JobStatus.QUEUED, JobStatus.RUNNING,
                                       JobStatus.COMPLETED, JobStatus.FAILED)
CANCELLED, TIMEOUT = JobStatus.CANCELLED, JobStatus.TIMEOUT

DATA = Path(__file__).parent / "data"
JOB = JobRequest(name="study-abc123", nodes=2, ranks_per_node=4, walltime="00:30:00",
                 gpus_per_node=4, cpus_per_task=8, cores_per_node=64, account="proj",
                 queue="debug", stdout="/r/runs/abc123/stdout.log",
                 stderr="/r/runs/abc123/stderr.log")


def test_registry_lists_backends_and_rejects_unknown_names() -> None:
    assert schedulers.names() == ["local", "pbs", "slurm"]
    with pytest.raises(ScalestudyError, match="valid schedulers: local, pbs, slurm"):
        schedulers.get("lsf")


def test_registering_a_name_twice_is_an_error() -> None:
    slurm = type(schedulers.get("slurm"))
    with pytest.raises(ValueError, match="registered twice"):
        schedulers.register(type("Again", (slurm,), {}))


@pytest.mark.parametrize("name", ["slurm", "pbs"])
def test_directives_reject_values_that_could_break_the_header(name: str) -> None:
    sched = schedulers.get(name)
    for bad in ("a b", "x\n#SBATCH --wrap=evil", "p'q", "$(id)"):
        with pytest.raises(ScalestudyError, match="cannot go into a job directive"):
            sched.directives(JobRequest(name="n", nodes=1, ranks_per_node=1,
                                        walltime="00:01:00", account=bad))


def test_slurm_header() -> None:
    lines = schedulers.get("slurm").directives(
        JobRequest(**{**JOB.__dict__, "qos": "regular", "constraint": "gpu",
                      "extra": ("--mail-type=END",)}))
    assert lines == [
        "#SBATCH --job-name=study-abc123", "#SBATCH -N 2", "#SBATCH --ntasks-per-node=4",
        "#SBATCH --gpus-per-node=4", "#SBATCH --cpus-per-task=8", "#SBATCH -t 00:30:00",
        "#SBATCH -A proj", "#SBATCH -p debug", "#SBATCH -q regular", "#SBATCH -C gpu",
        "#SBATCH --output=/r/runs/abc123/stdout.log",
        "#SBATCH --error=/r/runs/abc123/stderr.log", "#SBATCH --mail-type=END",
    ]


def test_slurm_gres_form() -> None:
    lines = schedulers.get("slurm").directives(
        JobRequest(**{**JOB.__dict__, "gpus_directive": "gres"}))
    assert "#SBATCH --gres=gpu:4" in lines


def test_pbs_header() -> None:
    lines = schedulers.get("pbs").directives(JobRequest(
        **{**JOB.__dict__, "select_terms": {"system": "polaris"}, "place": "scatter",
           "filesystems": "home:eagle"}))
    assert lines == [
        "#PBS -N study-abc123", "#PBS -l select=2:ncpus=64:ngpus=4:mpiprocs=4:system=polaris",
        "#PBS -l place=scatter", "#PBS -l walltime=00:30:00", "#PBS -l filesystems=home:eagle",
        "#PBS -A proj", "#PBS -q debug", "#PBS -j oe", "#PBS -k doe",
        "#PBS -o /r/runs/abc123/stdout.log",
    ]


@pytest.mark.parametrize(("name", "out", "job_id"), [
    ("slurm", "41001\n", "41001"), ("slurm", "41001;perlmutter\n", "41001"),
    ("pbs", (DATA / "pbs" / "qsub.txt").read_text(),
     "4109431.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov"),
    ("pbs", "77\n", "77"),
])
def test_parse_submit(name: str, out: str, job_id: str) -> None:
    assert schedulers.get(name).parse_submit(0, out, "") == job_id


@pytest.mark.parametrize("name", ["slurm", "pbs"])
def test_failed_submit_carries_the_schedulers_words(name: str) -> None:
    sched = schedulers.get(name)
    with pytest.raises(SubmitError, match="Invalid account"):
        sched.parse_submit(1, "", "sbatch: error: Batch job submission failed: Invalid account")
    with pytest.raises(SubmitError, match="no output"):
        sched.parse_submit(0, "", "")


def test_sacct_states() -> None:
    slurm = schedulers.get("slurm")
    argv = slurm.query_argvs(["41001", "41002"])[0]
    assert argv[:2] == ["sacct", "-X"] and "41001,41002" in argv
    states = slurm.parse_states(argv, 0, (DATA / "slurm" / "sacct.txt").read_text(), "")
    got = {k: (v.state, v.exit_code) for k, v in states.items()}
    assert got == {
        "41001": (COMPLETED, 0), "41002": (FAILED, 1), "41003": (TIMEOUT, 143),
        "41004": (CANCELLED, 143), "41005": (RUNNING, 0), "41006": (PENDING, 0),
        "41007": (FAILED, 253), "41008": (FAILED, 0),
    }
    assert states["41003"].reason == "TimeLimit" and states["41001"].reason is None


def test_squeue_fallback_states() -> None:
    slurm = schedulers.get("slurm")
    argv = slurm.query_argvs(["41005"])[1]
    assert argv[0] == "squeue" and "all" in argv
    states = slurm.parse_states(argv, 0, (DATA / "slurm" / "squeue.txt").read_text(), "")
    assert {k: v.state for k, v in states.items()} == {
        "41005": RUNNING, "41006": PENDING, "41001": COMPLETED, "41002": FAILED}


def test_scontrol_is_the_last_fallback_and_gives_the_exit_code() -> None:
    slurm = schedulers.get("slurm")
    argv = slurm.query_argvs(["41002"])[2]
    assert argv == ["scontrol", "-o", "show", "job"]
    states = slurm.parse_states(argv, 0, (DATA / "slurm" / "scontrol-show-job.txt").read_text(), "")
    job = states["41002"]
    assert (job.job_id, job.state, job.exit_code) == ("41002", FAILED, 2)


def test_pbs_json_states() -> None:
    pbs = schedulers.get("pbs")
    argv = pbs.query_argvs(["4109431.polaris-pbs-01"])[0]
    assert argv[:5] == ["qstat", "-x", "-f", "-F", "json"]
    states = pbs.parse_states(argv, 0, (DATA / "pbs" / "qstat-x-f-F-json.json").read_text(), "")
    got = {k: (v.state, v.exit_code) for k, v in states.items()}
    assert got == {
        "4109431": (COMPLETED, 0), "4109432": (FAILED, 1), "4109433": (TIMEOUT, -29),
        "4109434": (RUNNING, None), "4109435": (PENDING, None), "4109436": (FAILED, 143),
    }
    assert "Insufficient amount of resource" in (states["4109435"].reason or "")


def test_pbs_text_states() -> None:
    pbs = schedulers.get("pbs")
    argv = pbs.query_argvs(["4109434"])[1]
    assert argv == ["qstat", "-f", "4109434"]
    states = pbs.parse_states(argv, 0, (DATA / "pbs" / "qstat-f.txt").read_text(), "")
    assert {k: v.state for k, v in states.items()} == {"4109434": RUNNING, "4109435": PENDING}


def test_pbs_json_that_is_not_json_is_a_clean_error() -> None:
    pbs = schedulers.get("pbs")
    with pytest.raises(SubmitError, match="not JSON"):
        pbs.parse_states(pbs.query_argvs(["1"])[0], 0, "qstat: illegally formed job identifier", "")


@pytest.mark.parametrize(("name", "argv"), [("slurm", ["scancel", "1", "2"]),
                                            ("pbs", ["qdel", "1", "2"])])
def test_cancel_argv(name: str, argv: list[str]) -> None:
    assert schedulers.get(name).cancel_argv(["1", "2"]) == argv


def test_local_has_no_queue_and_every_scheduler_has_a_template() -> None:
    local = schedulers.get("local")
    assert local.directives(JOB) == [] and not local.queued and local.one_host
    for name in schedulers.names():
        assert (Path(__file__).parents[1] / "templates" / schedulers.get(name).template
                ).is_file()


def test_torque_style_qstat_of_slurms_wrapper() -> None:
    pbs = schedulers.get("pbs")
    states = pbs.parse_states(["qstat", "-f", "18"], 0,
                              (DATA / "pbs" / "torque-qstat-f.txt").read_text(), "")
    assert {k: (v.state, v.raw) for k, v in states.items()} == {"18": (COMPLETED, "C")}


def test_jobs_found_by_name_slurm_and_pbs() -> None:
    slurm = schedulers.get("slurm")
    argvs = slurm.find_argvs(["s-aa", "s-bb"])
    assert [a[0] for a in argvs] == ["sacct", "squeue"] and "s-aa,s-bb" in argvs[0]
    found = slurm.parse_found(argvs[0], "41|s-aa\n42|s-bb\n43|s-aa\n\n")
    assert found == {"s-aa": {"41", "43"}, "s-bb": {"42"}}
    pbs = schedulers.get("pbs")
    argvs = pbs.find_argvs(["s-aa"])
    assert argvs == [["qselect", "-x", "-N", "s-aa"], ["qstat", "-x", "-f"], ["qstat", "-f"]]
    assert pbs.parse_found(argvs[0], "123.pbs01\n124.pbs01\n") == {"s-aa": {"123", "124"}}
    assert pbs.parse_found(argvs[0], "") == {}
    full = ("Job Id: 125.pbs01\n    Job_Name = s-aa\n    job_state = R\n\n"
            "Job Id: 126\n    Job_Name = other\n")
    assert pbs.parse_found(argvs[2], full) == {"s-aa": {"125"}, "other": {"126"}}


def test_sacct_energy_fields_recorded_and_with_accounting() -> None:
    slurm = schedulers.get("slurm")
    argv = slurm.query_argvs(["333"])[0]
    assert argv[-1].endswith(",ConsumedEnergyRaw,ElapsedRaw")
    # recorded from the testbed's Slurm, which has no energy plugin: no energy
    recorded = slurm.parse_states(argv, 0, (DATA / "slurm" / "sacct-energy-fields.txt")
                                  .read_text(), "")
    assert (recorded["333"].state, recorded["333"].exit_code) == (FAILED, 3)
    assert recorded["334"].energy_j is None and recorded["334"].state == COMPLETED
    # a site with AcctGatherEnergyType: the same columns carry joules and seconds
    measured = slurm.parse_states(argv, 0, "335|COMPLETED|0:0|None|8640000|3600\n", "")
    assert (measured["335"].energy_j, measured["335"].elapsed_s) == (8640000.0, 3600.0)
