"""scalestudy-lsf: its directives, bsub/bjobs/bkill parsers, jsrun's words and its golden
job scripts, rendered by scalestudy's own code.

The outputs below are synthetic, written from the formats IBM documents (the README says
where): no LSF runs here to record one.

Regenerate the golden files after an intended change with
    SCALESTUDY_UPDATE_GOLDEN=1 pytest plugins/scalestudy-lsf/tests
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from scalestudy_lsf.jsrun import jsrun
from scalestudy_lsf.scheduler import LSF, bsub_options, run_limit

from scalestudy.core.errors import ScalestudyError, SubmitError
from scalestudy.core.grid import expand
from scalestudy.core.load import parse_study
from scalestudy.core.states import Failure, JobStatus
from scalestudy.site import launchers, schedulers
from scalestudy.site.profiles import SystemProfile
from scalestudy.site.render import render
from scalestudy.site.schedulers import JobRequest

HERE = Path(__file__).parent
PROFILE = yaml.safe_load((HERE.parent / "examples" / "lassen.yaml").read_text())
# The golden cases: the example profile as it is, and torchrun's agents started by jsrun.
CASES: dict[str, dict[str, Any]] = {
    "lassen-2x4": {},
    "lassen-torchrun-2x4": {"launcher": "torchrun", "launcher_options": {
        "torchrun_via": "jsrun", "extra_args": ["--smpiargs=-disable_gpu_hooks"]}},
}
JOB = JobRequest(name="study-abc123", nodes=2, ranks_per_node=4, walltime="00:30:30",
                 gpus_per_node=4, account="proj", queue="pbatch",
                 stdout="/r/runs/abc123/lsf.log", stderr="/r/runs/abc123/stderr.log",
                 extra=("-alloc_flags gpumps",))


@pytest.fixture(autouse=True, scope="module")
def plugin() -> Iterator[None]:
    """The plugin's scheduler and starter, registered while this module runs, unless its
    installed entry points did it already (the registries are the process's)."""
    added = "lsf" not in schedulers.names(), "jsrun" not in launchers.names()
    if added[0]:
        schedulers._REGISTRY["lsf"] = LSF
    if added[1]:
        launchers._PLUGINS["jsrun"] = jsrun
    yield
    if added[0]:
        del schedulers._REGISTRY["lsf"]
    if added[1]:
        del launchers._PLUGINS["jsrun"]
    launchers.launcher.cache_clear()


def lsf_script(case: str, **changes: Any) -> str:
    """The job script of a 2-node, 4-rank run on the example profile (plus the case's
    changes, and `changes`), as scalestudy renders it."""
    system = SystemProfile.model_validate({**PROFILE, **CASES[case], **changes})
    spec = ("name: conv\nsystem: lassen.yaml\ngrid: {nodes: [2], ranks_per_node: [4]}\n"
            "job: {account: MyProject, walltime: '01:00:00'}\n")
    study = parse_study(spec, "/scratch/studies/conv.yaml")
    run = expand(study)[0]
    return render(study, system, run, Path("/scratch/results/conv/runs") / run.run_id,
                  python="python3")


@pytest.mark.parametrize("case", sorted(CASES))
def test_script_is_valid_bash_and_matches_its_golden_file(case: str) -> None:
    text = lsf_script(case)
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
    golden = HERE / "golden" / f"{case}.sh"
    if os.environ.get("SCALESTUDY_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.read_text() == text, f"rendered script differs from {golden}"


def test_directives_ask_for_whole_nodes_and_round_the_run_limit_up() -> None:
    assert LSF().directives(JOB) == [
        "#BSUB -J study-abc123", "#BSUB -nnodes 2", "#BSUB -W 0:31", "#BSUB -P proj",
        "#BSUB -q pbatch", "#BSUB -oo /r/runs/abc123/lsf.log", "#BSUB -alloc_flags gpumps"]
    assert run_limit("1-02:00:00") == "26:00"
    with pytest.raises(ScalestudyError, match="cannot go into a job directive"):
        LSF().directives(JobRequest(name="n", nodes=1, ranks_per_node=1,
                                    walltime="00:01:00", account="$(id)"))


def test_submit_puts_the_scripts_request_on_bsubs_command_line(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n" + "\n".join(LSF().directives(JOB)) +
                      "\n# a comment\nset -e\n#BSUB -q never-read\n")
    assert LSF().submit_argv(str(script), ["-env", "all"]) == [
        "bsub", "-J", "study-abc123", "-nnodes", "2", "-W", "0:31", "-P", "proj",
        "-q", "pbatch", "-oo", "/r/runs/abc123/lsf.log", "-alloc_flags", "gpumps",
        "-env", "all", str(script)]
    assert bsub_options('#!/bin/bash\n#BSUB -alloc_flags "gpumps smt4"\n') == [
        "-alloc_flags", "gpumps smt4"]
    with pytest.raises(SubmitError, match="cannot read the job script"):
        LSF().submit_argv(str(tmp_path / "missing.sh"))


def test_parse_submit() -> None:
    lsf = LSF()
    assert lsf.parse_submit(0, "Job <4242> is submitted to queue <pbatch>.\n", "") == "4242"
    assert lsf.parse_submit(0, "<<Waiting for dispatch ...>>\nJob <7> is submitted to "
                               "default queue <normal>.\n", "") == "7"
    with pytest.raises(SubmitError, match=r"bsub failed \(exit 255\): Project not specified"):
        lsf.parse_submit(255, "", "Project not specified. Job not submitted.\n")
    with pytest.raises(SubmitError, match="finds it by its name"):
        lsf.parse_submit(0, "submitted\n", "")


def _records(*records: dict[str, str]) -> str:
    return json.dumps({"COMMAND": "bjobs", "JOBS": len(records), "RECORDS": list(records)})


def test_parse_states_from_bjobs_json() -> None:
    lsf = LSF()
    argv = lsf.query_argvs(["1", "2", "3", "4", "5", "6", "7"])[0]
    out = _records(
        {"JOBID": "1", "STAT": "PEND", "EXIT_CODE": "", "EXIT_REASON": "",
         "PEND_REASON": "New job is waiting for scheduling;"},
        {"JOBID": "2", "STAT": "RUN", "EXIT_CODE": "", "EXIT_REASON": "", "PEND_REASON": ""},
        {"JOBID": "3", "STAT": "DONE", "EXIT_CODE": "", "EXIT_REASON": "", "PEND_REASON": ""},
        {"JOBID": "4", "STAT": "EXIT", "EXIT_CODE": "140", "PEND_REASON": "",
         "EXIT_REASON": "TERM_RUNLIMIT: job killed after reaching LSF run time limit"},
        {"JOBID": "5", "STAT": "EXIT", "EXIT_CODE": "130", "PEND_REASON": "",
         "EXIT_REASON": "TERM_OWNER: job killed by owner"},
        {"JOBID": "6", "STAT": "PSUSP", "EXIT_CODE": "", "EXIT_REASON": "",
         "PEND_REASON": "The job was suspended by the user while pending;"},
        {"JOBID": "7", "STAT": "EXIT", "EXIT_CODE": "1", "EXIT_REASON": "", "PEND_REASON": ""},
        {"JOBID": "8", "ERROR": "Job <8> is not found"})
    states = lsf.parse_states(argv, 255, out, "")
    assert {k: v.state for k, v in states.items()} == {
        "1": JobStatus.QUEUED, "2": JobStatus.RUNNING, "3": JobStatus.COMPLETED,
        "4": JobStatus.TIMEOUT, "5": JobStatus.CANCELLED, "6": JobStatus.HELD,
        "7": JobStatus.FAILED}
    assert states["1"].reason == "New job is waiting for scheduling"
    assert states["3"].exit_code == 0
    assert (states["4"].failure, states["4"].exit_code, states["4"].signalled) == (
        Failure.WALLTIME, 140, True)
    assert states["5"].failure is Failure.CANCELLED
    assert "`bresume 6`" in (states["6"].reason or "")
    assert (states["7"].exit_code, states["7"].failure) == (1, None)


def test_parse_states_text_form_and_unknown_ids() -> None:
    lsf = LSF()
    text = lsf.query_argvs(["11", "12"])[1]
    assert lsf.parse_states(text, 255, "11|RUN|-\n12|EXIT|2\n", "Job <13> is not found\n") \
        == {"11": lsf.parse_states(text, 0, "11|RUN|\n", "")["11"],
            "12": lsf.parse_states(text, 0, "12|EXIT|2\n", "")["12"]}
    assert lsf.parse_states(text, 255, "", "Job <13> is not found\n") == {}
    with pytest.raises(SubmitError, match="bjobs: exit 255: LSF is down"):
        lsf.parse_states(text, 255, "", "LSF is down. Please wait ...\n")


def test_cancel_and_find() -> None:
    lsf = LSF()
    assert lsf.cancel_argv(["5", "6"]) == ["bkill", "5", "6"]
    assert lsf.cancel_failed(255, "Job <5> is being terminated\n",
                             "Job <6>: Job has already finished\n") is None
    assert lsf.cancel_failed(255, "", "Job <9>: User permission denied\n") == (
        "Job <9>: User permission denied")
    found = _records({"JOBID": "21", "JOB_NAME": "conv-1"}, {"JOBID": "22", "JOB_NAME": "conv-1"})
    assert lsf.parse_found(lsf.find_argvs(["conv-1"])[0], found) == {"conv-1": {"21", "22"}}


def test_jsrun_gives_each_rank_a_resource_set_and_each_agent_a_node() -> None:
    ranks = lsf_script("lassen-2x4").splitlines()
    agents = lsf_script("lassen-torchrun-2x4").splitlines()
    assert any(ln.startswith("jsrun -n 8 -r 4 -a 1 -c 10 -g 1 -b packed:10 ") for ln in ranks)
    assert any(ln.startswith("jsrun -n 2 -r 1 -a 1 -c 40 -g 4 -b packed:40 ") for ln in agents)
    with pytest.raises(ScalestudyError, match="at most 2 ranks per node"):
        lsf_script("lassen-2x4", gpus_per_node=2)
