"""Schedulers: directives, submit/query/cancel argv, and parsers over recorded outputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scalestudy.core.errors import ScalestudyError
from scalestudy.core.states import JobStatus
from scalestudy.execute import commands
from scalestudy.execute.tracking import settle
from scalestudy.site import schedulers
from scalestudy.site.schedulers import JobRequest, SubmitError
from scalestudy.site.schedulers.pbs import PBSOptions
from scalestudy.site.schedulers.slurm import SlurmOptions

PENDING, RUNNING, COMPLETED, FAILED = (JobStatus.QUEUED, JobStatus.RUNNING,
                                       JobStatus.COMPLETED, JobStatus.FAILED)
CANCELLED, TIMEOUT = JobStatus.CANCELLED, JobStatus.TIMEOUT

DATA = Path(__file__).parent / "data"
JOB = JobRequest(name="study-abc123", nodes=2, ranks_per_node=4, walltime="00:30:00",
                 gpus_per_node=4, cpus_per_task=8, cores_per_node=64, account="proj",
                 queue="debug", stdout="/r/runs/abc123/stdout.log",
                 stderr="/r/runs/abc123/stderr.log")


def test_registry_lists_backends_and_rejects_unknown_names() -> None:
    assert schedulers.names() == ["flux", "local", "pbs", "slurm"]
    with pytest.raises(ScalestudyError, match="valid schedulers: flux, local, pbs, slurm"):
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
        JobRequest(**{**JOB.__dict__, "options": SlurmOptions(qos="regular", constraint="gpu"),
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
        JobRequest(**{**JOB.__dict__, "options": SlurmOptions(gpus_directive="gres")}))
    assert "#SBATCH --gres=gpu:4" in lines


def test_pbs_header() -> None:
    lines = schedulers.get("pbs").directives(JobRequest(
        **{**JOB.__dict__, "options": PBSOptions(select_terms={"system": "polaris"},
                                                 place="scatter", filesystems="home:eagle")}))
    assert lines == [
        "#PBS -N study-abc123", "#PBS -l select=2:ncpus=64:ngpus=4:mpiprocs=4:system=polaris",
        "#PBS -l place=scatter", "#PBS -l walltime=00:30:00", "#PBS -l filesystems=home:eagle",
        "#PBS -A proj", "#PBS -q debug", "#PBS -j oe", "#PBS -k doe",
        "#PBS -o /r/runs/abc123/stdout.log",
    ]


@pytest.mark.parametrize(("name", "out", "job_id"), [
    ("slurm", "41001\n", "41001"),
    # A federation or `-M`: the cluster stays with the id, for every later command.
    ("slurm", "41001;perlmutter\n", "41001;perlmutter"),
    ("pbs", (DATA / "pbs" / "openpbs" / "qsub.txt").read_text(), "0.pbslab"),
    ("pbs", (DATA / "pbs" / "openpbs" / "qsub-array.txt").read_text(), "6[].pbslab"),
    ("pbs", "4109431.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov\n",
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
    assert argvs == [["qselect", "-x", "-N", "s-aa"], ["qstat", "-f"]]
    full = ("Job Id: 125.pbs01\n    Job_Name = s-aa\n    job_state = R\n\n"
            "Job Id: 126\n    Job_Name = other\n")
    assert pbs.parse_found(argvs[1], full) == {"s-aa": {"125"}, "other": {"126"}}


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


# --- PBS: outputs recorded from a real OpenPBS 23.06.06 (tests/data/pbs/openpbs/README.md)

OPENPBS = DATA / "pbs" / "openpbs"
# case -> (status, exit code, words of the reason): every job state of dev/pbs-testbed.md
CASES: dict[str, tuple[JobStatus, int | None, str | None]] = {
    "queued-waiting": (PENDING, None, "Not Running: Not enough free nodes available"),
    "queued-never": (PENDING, None, "Can Never Run: Not enough total nodes available"),
    "held-dependency": (PENDING, None, "waiting for its dependency (afterok:"),
    # A hold is shown, with how to release it, never "queued" for ever.
    "held-user": (JobStatus.HELD, None, "held by its user (Hold_Types u): release it with "
                  "`qrls "),
    "running": (RUNNING, None, "(n2:ncpus=2)+(n3:ncpus=2)"),  # wrapped in the text form
    "array-queued": (PENDING, None, "Not Running"),
    "array-running": (RUNNING, None, "Job Array Began"),
    "array-finished": (COMPLETED, 0, "and finished"),
    "array-subjob-finished": (COMPLETED, 0, "and finished"),
    "finished-exit0": (COMPLETED, 0, "and finished"),
    "finished-after-waiting": (COMPLETED, 0, "and finished"),
    "finished-exit3": (FAILED, 3, "and failed"),
    "killed-by-sigkill": (FAILED, 137, "and failed"),  # 256 + 9 -> 128 + 9
    "finished-walltime": (TIMEOUT, -29, "and exceeded resource walltime"),
    "deleted-running": (CANCELLED, 143, "and terminated by pbsuser@pbslab"),  # 271
    "deleted-queued": (CANCELLED, None, "Not enough free nodes available and terminated"),
    "deleted-never": (CANCELLED, None, "Can Never Run"),
    "deleted-held-user": (CANCELLED, None, None),
    "afterok-parent-deleted": (CANCELLED, None, "never ran: its dependency failed"),
    "requeued-after-start": (RUNNING, None, None),  # E, stale Exit_status -4
    "requeued-running-again": (RUNNING, None, "Job run at"),  # R, stale Exit_status -4
    "requeued-finished": (COMPLETED, 0, "and finished"),
    # record_limits.py: a one-node job at its cput dies by the kernel's RLIMIT_CPU
    # (Exit_status 137, no MoM line); over its mem, by the MoM ($enforce mem).
    "killed-cput": (FAILED, 137, "killed by SIGKILL at its cput limit (cput used 00:00:03"),
    "killed-mem": (FAILED, -27, "PBS exit status -27 (JOB_EXEC_KILL_MEM"),
    "system-hold": (JobStatus.HELD, None, "held by the system (Hold_Types s) (Job held by "),
    "operator-hold": (JobStatus.HELD, None, "held by an operator (Hold_Types o)"),
    "suspended": (JobStatus.HELD, None, "suspended (preempted by suspension"),
    "requeued-by-qrerun": (RUNNING, None, "Job run at"),  # running again, run_count 2
}


def recorded(rel: str) -> tuple[list[str], int, str, str]:
    """A recorded output: its argv, exit code, stdout and stderr."""
    meta = json.loads((OPENPBS / f"{rel}.meta.json").read_text())
    return meta["argv"], meta["exit_code"], (OPENPBS / rel).read_text(), meta["stderr"]


def parsed(rel: str) -> dict[str, Any]:
    """parse_states of a recorded qstat: short id -> (status, exit code, reason)."""
    states = schedulers.get("pbs").parse_states(*recorded(rel))
    return {k: (v.state, v.exit_code, v.reason) for k, v in states.items()}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("form", ["qstat-x-f-F-json/{}.json", "qstat-x-f/{}.txt"])
def test_every_recorded_job_state(form: str, case: str) -> None:
    ((state, code, reason),) = parsed(form.format(case)).values()
    want_state, want_code, words = CASES[case]
    assert (state, code) == (want_state, want_code)
    assert words in (reason or "") if words else reason is None


@pytest.mark.parametrize("case", sorted(CASES))
def test_qstat_without_x_says_only_finished(case: str) -> None:
    _, code, out, _ = recorded(f"qstat-f/{case}.txt")
    ((state, exit_code, reason),) = parsed(f"qstat-f/{case}.txt").values()
    if code == 35:  # stdout empty; stderr "qstat: 7.pbslab Job has finished, use -x ..."
        assert out == "" and (state, exit_code) == (COMPLETED, None)
        assert "does not say how" in (reason or "")
    else:
        assert (state, exit_code) == CASES[case][:2]


def test_a_job_finished_without_x_settles_from_its_run_directory(tmp_path: Path) -> None:
    # Not "lost" after the grace period: the job script's exit_code file decides.
    job = schedulers.get("pbs").parse_states(*recorded("qstat-f/finished-exit3.txt"))["8"]
    (tmp_path / "exit_code").write_text("3\n")
    status = settle(tmp_path, job, {})
    assert (status.state, status.exit_code) == ("failed", 3)
    assert status.reason.startswith("exit code 3")


def test_several_jobs_in_one_qstat() -> None:
    live = parsed("qstat-x-f-F-json/multi-live.json")
    assert list(live) == ["1", "2", "3", "4", "0", "6[]"]  # the order of the ids asked
    assert {k: v[0] for k, v in live.items()} == {
        "1": PENDING, "2": PENDING, "3": PENDING, "4": JobStatus.HELD, "0": RUNNING,
        "6[]": PENDING}
    assert parsed("qstat-f/multi-live.txt") == live
    done = parsed("qstat-x-f-F-json/multi-finished.json")
    assert {k: v[:2] for k, v in done.items()} == {
        "7": (COMPLETED, 0), "8": (FAILED, 3), "9": (TIMEOUT, -29), "0": (CANCELLED, 143),
        "5": (CANCELLED, None), "6[]": (COMPLETED, 0)}
    mixed = parsed("qstat-x-f-F-json/multi-mixed.json")
    assert mixed["3"][0] == CANCELLED and mixed["0"][0] == CANCELLED


def test_array_whose_sub_job_failed_is_failed_despite_exit_status_0() -> None:
    jobs = parsed("qstat-x-f-F-json/array-one-subjob-failed-t.json")
    assert jobs["10[]"][:2] == (FAILED, 0) and "and failed" in jobs["10[]"][2]
    assert jobs["10[2]"][:2] == (FAILED, 5) and jobs["10[1]"][:2] == (COMPLETED, 0)


def test_numbers_where_strings_were_expected() -> None:
    # -N 123 gives "Job_Name":123, -v DECIMAL=1.50 gives 1.5
    assert {k: v[:2] for k, v in parsed("qstat-x-f-F-json/value-types.json").items()} == {
        "12": (COMPLETED, 0), "13": (COMPLETED, 0)}


@pytest.mark.parametrize(("rel", "jobs"), [
    ("qstat-x-f-F-json/unknown-among-live.json", {"1": PENDING, "0": RUNNING}),
    ("qstat-x-f/unknown-among-live.txt", {"1": PENDING, "0": RUNNING}),
    ("qstat-x-f-F-json/unknown-among-finished.json", {"7": COMPLETED, "8": FAILED}),
    ("qstat-x-f-F-json/unknown-only.json", {}),  # exit 153, JSON without "Jobs"
    ("qstat-f/finished-then-unknown.txt", {"7": COMPLETED}),  # exit 153, stdout empty
    ("qstat-f/unknown-then-finished.txt", {"7": COMPLETED}),  # exit 35: the last error's
])
def test_unknown_ids_leave_the_others_answered(rel: str, jobs: dict[str, JobStatus]) -> None:
    assert recorded(rel)[1] in (35, 153)
    assert {k: v[0] for k, v in parsed(rel).items()} == jobs


@pytest.mark.parametrize(("rel", "words"), [
    ("qstat-x-f-F-json/other-server-suffix.json", "illegally formed job identifier"),
    ("qstat-x-f-F-json/server-down.json", "cannot connect to server"),  # exit 255, JSON
    ("qstat-f/server-down.txt", "cannot connect to server"),
])
def test_qstat_errors_are_no_answer(rel: str, words: str) -> None:
    with pytest.raises(SubmitError, match=words):
        parsed(rel)
    pbs = schedulers.get("pbs")
    with pytest.raises(SubmitError, match="cannot connect"):  # 153 is no excuse
        pbs.parse_states(["qstat", "-f", "1"], 153, "",
                         "qstat: Unknown Job Id 1.pbslab\nqstat: cannot connect to server")


def replay(rel: str) -> tuple[int, int]:
    """A recorded command run through run_retrying: (tries, exit code)."""
    argv, code, out, err = recorded(rel) if rel.endswith(".txt") else (
        ["qsub", "job.sh"], 161, "", rel)
    calls = []

    def runner(argv: list[str], cwd: Path | None = None) -> tuple[int, str, str]:
        calls.append(argv)
        return code, out, err

    idempotent = argv[0] != "qsub"
    got = commands.run_retrying(runner, argv, idempotent=idempotent, sleep=lambda s: None)
    return len(calls), got[0]


@pytest.mark.parametrize(("rel", "words", "tries"), [
    ("qsub-errors/unknown-queue.txt", "exit 170.*Unknown queue", 1),
    ("qsub-errors/over-queue-node-limit.txt", "exit 188.*violates queue", 1),
    ("qsub-errors/under-queue-node-minimum.txt", "exit 188.*violates queue", 1),
    ("qsub-errors/over-queue-walltime.txt", "exit 188.*violates queue", 1),
    ("qsub-errors/unknown-resource.txt", "exit 187.*Unknown resource: ngpus", 1),
    ("qsub-errors/bad-walltime.txt", "exit 166.*Resource_List.walltime", 1),
    ("qsub-errors/as-root.txt", "exit 175.*Bad UID", 1),
    # pbs_server down: nothing was queued, so qsub is tried again (4 tries in all)
    ("qsub-errors/server-down.txt", "(?s)exit 162.*cannot connect to server pbslab", 4),
    # after an unclean server death (dev/pbs-testbed.md: seen, not recorded): refused,
    # each refusal using up one job number, so trying again at once gets a fresh one, up
    # to the 1000 numbers the server may be behind
    ("qsub: Job with requested ID already exists", "Job with requested ID already",
     commands.NUMBERS_TAKEN_TRIES + 1),
])
def test_qsub_errors_carry_the_servers_words_and_retry_only_unqueued(
        rel: str, words: str, tries: int) -> None:
    pbs = schedulers.get("pbs")
    if rel.endswith(".txt"):
        _, code, out, err = recorded(rel)
        assert out == ""
    else:
        code, out, err = 161, "", rel
    with pytest.raises(SubmitError, match=words):
        pbs.parse_submit(code, out, err)
    assert replay(rel) == (tries, code)


@pytest.mark.parametrize(("rel", "problem"), [
    ("qdel/running.txt", None), ("qdel/queued.txt", None),
    ("qdel/finished.txt", None),  # 35 "qdel: Job has finished 7.pbslab"
    ("qdel/unknown.txt", None),  # 153
    ("qdel/being-deleted.txt", None),  # 168 "Request invalid for state of job"
    ("qdel/running-finished-running.txt", None),  # 35; the running two are deleted
    ("qdel/server-down.txt", "Couldn't connect to cluster: pbslab"),  # 162
])
def test_qdel_of_an_ended_job_is_no_cancel_failure(rel: str, problem: str | None) -> None:
    _, code, out, err = recorded(rel)
    failed = schedulers.get("pbs").cancel_failed(code, out, err)
    assert failed == problem if problem is None else problem in (failed or "")
    if problem:
        assert replay(rel)[0] == 4  # idempotent, "Connection refused": tried again


def test_recorded_qselect_finds_jobs_by_name() -> None:
    pbs = schedulers.get("pbs")
    for rel, want in [("qselect/x-N-one.txt", {"study-f000000003": {"8"}}),
                      ("qselect/x-N-two.txt", {"study-f000000000": {"7", "14"}}),
                      ("qselect/x-N-none.txt", {}), ("qselect/N-finished.txt", {})]:
        argv, code, out, _ = recorded(rel)
        assert code == 0 and pbs.parse_found(argv, out) == want
    argv, code, out, err = recorded("qselect/x-N-server-down.txt")
    assert code == 162 and "cannot connect to server" in err


def test_text_listing_by_name_joins_wrapped_lines() -> None:
    name = "study-" + "0123456789" * 7
    out = f"Job Id: 7.pbslab\n    Job_Name = {name[:74]}\n\t{name[74:]}\n"  # 80 columns
    assert schedulers.get("pbs").parse_found(["qstat", "-f"], out) == {name: {"7"}}


def test_submit_argv_pbs_in_the_foreground_unless_the_profile_says_otherwise() -> None:
    # Without -f PBS Pro's qsub forks a daemon that keeps the inherited study lock open.
    assert schedulers.get("pbs").submit_argv("/r/job.sh") == ["qsub", "-f", "/r/job.sh"]
    assert schedulers.get("pbs").submit_argv("/r/job.sh", []) == ["qsub", "/r/job.sh"]
    assert schedulers.get("slurm").submit_argv("/r/job.sh") == [
        "sbatch", "--parsable", "/r/job.sh"]


def test_slurm_estimates_a_start_with_the_jobs_own_directives() -> None:
    """`sbatch --test-only` with the job's shape (no output files: nothing is written),
    and the start it prints (a recorded answer of the Slurm testbed)."""
    slurm = schedulers.get("slurm")
    argv = slurm.estimate_argv(JobRequest(name="s-1", nodes=2, ranks_per_node=4,
                                          walltime="00:30:00", queue="debug", account="A",
                                          stdout="/r/out.log"))
    assert argv is not None
    assert argv[:2] == ["sbatch", "--test-only"] and argv[-2:] == ["--wrap", "true"]
    assert {"-N", "2", "-t", "00:30:00", "-p", "debug", "-A", "A"} <= set(argv)
    assert not any(w.startswith("--output") for w in argv)
    said = ("sbatch: Job 671 to start at 2026-11-26T21:39:06 using 2 processors on nodes "
            "n[1-2] in partition debug\n")
    assert slurm.parse_estimate(0, "", said) == "2026-11-26T21:39:06"
    assert slurm.parse_estimate(1, "", "sbatch: error: Invalid partition name") is None
    assert schedulers.get("pbs").estimate_argv(JobRequest(name="s", nodes=1, ranks_per_node=1,
                                                          walltime="00:10:00")) is None
    assert commands.estimate_start(slurm, JobRequest(
        name="s", nodes=1, ranks_per_node=1, walltime="00:10:00"),
        runner=lambda argv: (0, "", said)) == "2026-11-26T21:39:06"


def test_a_queued_jobs_expected_start_is_said_where_the_scheduler_computes_it() -> None:
    """PBS Pro's `estimated.start_time` (qstat -f text and -F json) and squeue's %S of a
    pending job (lines as the servers print them) join the job's reason; a job the
    scheduler has not planned (N/A) says nothing of a start."""
    pbs = schedulers.get("pbs")
    text = ("Job Id: 12.pbs\n    Job_Name = s-1\n    job_state = Q\n"
            "    comment = Not Running: Insufficient amount of resource: ncpus\n"
            "    estimated.start_time = Thu Nov 26 22:40:00 2026\n"
            "    estimated.exec_vnode = (n1:ncpus=2)\n")
    [job] = pbs.parse_states(["qstat", "-f", "12.pbs"], 0, text, "").values()
    assert job.state is JobStatus.QUEUED
    assert job.reason == ("Not Running: Insufficient amount of resource: ncpus; expected "
                          "start Thu Nov 26 22:40:00 2026 (the server's estimated.start_time)")
    data = {"Jobs": {"13.pbs": {"job_state": "Q", "estimated": {
        "start_time": "Thu Nov 26 23:00:00 2026", "exec_vnode": "(n2:ncpus=2)"}}}}
    [job] = pbs.parse_states(["qstat", "-f", "-F", "json", "13.pbs"], 0, json.dumps(data),
                             "").values()
    assert job.reason == ("expected start Thu Nov 26 23:00:00 2026 (the server's "
                          "estimated.start_time)")
    slurm = schedulers.get("slurm")
    argv = slurm.live_argv(["5", "6"])
    assert argv is not None and argv[-1].endswith("%S")
    got = slurm.parse_states(argv, 0, "5|PENDING|Resources|2026-11-26T22:41:07\n"
                             "6|PENDING|Priority|N/A\n", "")
    assert got["5"].reason == ("Resources; expected start 2026-11-26T22:41:07 (squeue: the "
                               "backfill plan)")
    assert got["6"].reason == "Priority"


def test_qsub_goes_past_job_numbers_its_server_still_holds() -> None:
    # 39 refusals in a row (the testbed's unclean restart, dev/pbs-testbed.md), then queued
    calls, slept = [], []

    def runner(argv: list[str], cwd: Path | None = None) -> tuple[int, str, str]:
        calls.append(argv)
        if len(calls) <= 39:
            return 161, "", "qsub: Job with requested ID already exists\n"
        return 0, f"{len(calls) + 100}.pbslab\n", ""

    code, out, _ = commands.run_retrying(runner, ["qsub", "job.sh"], idempotent=False,
                                         sleep=slept.append)
    assert (code, out, len(calls), slept) == (0, "140.pbslab\n", 40, [])
    assert schedulers.get("pbs").parse_submit(code, out, "") == "140.pbslab"
    # a query is idempotent: the words mean nothing there, it is not tried 1000 times
    calls.clear()
    commands.run_retrying(runner, ["qstat", "1"], sleep=slept.append)
    assert len(calls) == 1
