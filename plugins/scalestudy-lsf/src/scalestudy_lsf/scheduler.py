"""IBM Spectrum LSF with CSM (`bsub -nnodes`), as on LLNL's Lassen and OLCF's Summit.

`#BSUB` directives (whole nodes, `-nnodes`), `bsub` with the request on its command line,
`bjobs -o ... -json` (or its text form) for states, `bkill` to cancel. Pure: functions
over strings; the one file it reads is the job script it is asked to submit.

Under CSM the job script runs on a launch node, not on a compute node: the launch node
is the first host LSF lists for the job, and `jsrun` (scalestudy_lsf.jsrun) starts the
ranks on the compute nodes. What each answer looks like, and where each fact comes from,
is in the package's README.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from scalestudy.core.spec import Token, walltime_seconds
from scalestudy.site.schedulers import (
    Failure,
    InJob,
    JobLogs,
    JobRequest,
    JobState,
    JobStatus,
    Options,
    Retry,
    Scheduler,
    SubmitError,
    check_token,
)

QUEUED, RUNNING, COMPLETED, FAILED = (JobStatus.QUEUED, JobStatus.RUNNING,
                                      JobStatus.COMPLETED, JobStatus.FAILED)
HELD, CANCELLED, TIMEOUT = JobStatus.HELD, JobStatus.CANCELLED, JobStatus.TIMEOUT

# bjobs' STAT -> ours, with the failure class it decides and what it means ({id}: the job).
STATES: dict[str, tuple[JobStatus, Failure | None, str | None]] = {
    "PEND": (QUEUED, None, None),
    "WAIT": (QUEUED, None, None),  # a chunk job's member, waiting for its turn
    "PROV": (QUEUED, None, None),  # dispatched, its hosts being provisioned
    "PSUSP": (HELD, None, "held while pending (bstop, by its owner or an administrator): "
              "`bresume {id}` releases it"),
    "RUN": (RUNNING, None, None),
    "USUSP": (HELD, None, "suspended while running (bstop): `bresume {id}` resumes it"),
    "SSUSP": (HELD, None, "suspended by LSF (host load, or preempted by suspension); it "
              "resumes when LSF resumes it"),
    # mbatchd lost contact with the job's first host: the job may still be running.
    "UNKWN": (RUNNING, None, "LSF lost contact with the job's host (UNKWN)"),
    "DONE": (COMPLETED, None, None),
    "EXIT": (FAILED, None, None),
    "ZOMBI": (FAILED, Failure.NODE_FAILURE, "its host became unreachable and LSF killed "
              "or requeued it (ZOMBI)"),
}
# Why an EXIT job ended (bjobs' exit_reason starts with the keyword of IBM's table
# "Termination reasons displayed by bacct, bhist, and bjobs") -> state, class, meaning.
REASONS: dict[str, tuple[JobStatus, Failure, str]] = {
    "TERM_RUNLIMIT": (TIMEOUT, Failure.WALLTIME, "killed at its run limit (-W)"),
    "TERM_DEADLINE": (TIMEOUT, Failure.WALLTIME, "killed when its deadline passed"),
    "TERM_OWNER": (CANCELLED, Failure.CANCELLED, "killed by its owner (bkill)"),
    "TERM_FORCE_OWNER": (CANCELLED, Failure.CANCELLED, "killed by its owner (bkill -r)"),
    "TERM_ADMIN": (CANCELLED, Failure.CANCELLED, "killed by an LSF administrator"),
    "TERM_FORCE_ADMIN": (CANCELLED, Failure.CANCELLED, "killed by an LSF administrator"),
    "TERM_BUCKET_KILL": (CANCELLED, Failure.CANCELLED, "killed with bkill -b"),
    "TERM_PREEMPT": (JobStatus.PREEMPTED, Failure.PREEMPTED, "preempted: the site took "
                     "its nodes for another job; run it again, nothing is wrong with the run"),
    "TERM_MEMLIMIT": (FAILED, Failure.OOM, "killed at its memory limit"),
    "TERM_SWAP": (FAILED, Failure.OOM, "killed at its swap limit"),
    "TERM_CPULIMIT": (FAILED, Failure.RESOURCE_LIMIT, "killed at its CPU time limit"),
    "TERM_PROCESSLIMIT": (FAILED, Failure.RESOURCE_LIMIT, "killed at its process limit"),
    "TERM_THREADLIMIT": (FAILED, Failure.RESOURCE_LIMIT, "killed at its thread limit"),
    "TERM_CSM_ALLOC": (FAILED, Failure.SCHEDULER, "CSM could not allocate its nodes"),
    "TERM_CWD_NOTEXIST": (FAILED, Failure.SCHEDULER, "its working directory does not "
                          "exist on the execution host"),
    "TERM_REMOVE_HUNG_JOB": (FAILED, Failure.NODE_FAILURE, "removed by LSF: its host "
                             "stopped answering"),
}
# bsub's answer: "Job <123> is submitted to queue <pbatch>." (or "to default queue").
_SUBMITTED = re.compile(r"Job <(\d+)> is submitted to (?:default )?queue")
# What bjobs and bkill say of a job they do not know (purged, or never queued), and
# what bkill says of one that has ended: no answer for it, and no failure to cancel.
_UNKNOWN = re.compile(r"Job <[\d\[\]]+> is not found|No matching job found|"
                      r"Job has already finished", re.I)
# The fields of a state query, in this order (the text form adds the delimiter).
FIELDS = "jobid stat exit_code exit_reason pend_reason"
TEXT_FIELDS = "jobid stat exit_code delimiter='|'"

TEMPLATE = """{% extends "_job.sh.j2" %}
{% block submit_hint %}
# Submit by hand with: bsub < {{ (run_dir ~ "/job.sh") | q }}
# (bsub reads #BSUB lines from its standard input; from a file it is given by name only
# where lsf.conf sets LSB_BSUB_PARSE_SCRIPT=Y: scalestudy passes them as options.)
{% endblock %}
{% block output %}
# The job's output goes next to its record; LSF's report of the job goes to its -oo file.
exec > {{ (run_dir ~ "/stdout.log") | q }} 2> {{ (run_dir ~ "/stderr.log") | q }}
{% endblock %}
{% block hosts %}
# The job's compute nodes, each once, in LSF's order: this script runs on the launch
# node, the first host LSF lists (LSB_DJOB_HOSTFILE, one line per slot; else
# LSB_MCPU_HOSTS, "host slots ..."), where no rank runs.
if [ -r "${LSB_DJOB_HOSTFILE:-}" ]; then
    cat "$LSB_DJOB_HOSTFILE"
else
    awk '{for (i = 1; i < NF; i += 2) for (j = 0; j < $(i + 1); j++) print $i}' \\
        <<< "${LSB_MCPU_HOSTS:-}"
fi | awk 'NR == 1 {launch = $0; next} $0 != launch && !seen[$0]++' \\
    > {{ (run_dir ~ "/hosts.txt") | q }}
{% endblock %}
{% block port_note %}where jsrun and MPI take theirs.{% endblock %}
{% block job_number_value %}LSB_JOBID{% endblock %}
"""


def run_limit(walltime: str) -> str:
    """`01:30:00` -> `1:30`: bsub -W takes [hour:]minute; seconds round up to a minute."""
    minutes = -(-walltime_seconds(walltime) // 60)
    return f"{minutes // 60}:{minutes % 60:02d}"


def bsub_options(script: str) -> list[str]:
    """The options of a job script's `#BSUB` lines (before its first command), as words."""
    words: list[str] = []
    for line in script.splitlines()[1:]:
        text = line.strip()
        if text.startswith("#BSUB"):
            words += shlex.split(text[len("#BSUB"):])
        elif text and not text.startswith("#"):
            break
    return words


def _exit_code(text: object) -> int | None:
    """bjobs' exit_code: empty (or `-`) when the job exited 0 or has not ended."""
    value = str(text or "").strip()
    return int(value) if value.isdigit() else None


def job_state(job_id: str, stat: str, exit_text: object = "", reason: str = "",
              pending: str = "") -> JobState:
    """One job's state from bjobs' STAT, EXIT_CODE, EXIT_REASON and PEND_REASON."""
    state, failure, meaning = STATES.get(stat, (JobStatus.UNKNOWN, None, None))
    code = _exit_code(exit_text)
    if state is COMPLETED:
        return JobState(job_id, COMPLETED, stat, code if code is not None else 0)
    said = reason.strip() if state is FAILED else pending.strip().rstrip(";")
    known = REASONS.get(said.split(":")[0].strip()) if state is FAILED else None
    if known is not None:
        state, failure, meaning = known
    if state is QUEUED and "never satisfied" in said:
        state, meaning = HELD, ("its dependency can never be satisfied: `bkill {id}` it "
                                "and submit again")
    text = "; ".join(filter(None, (meaning.format(id=job_id) if meaning else None, said)))
    # a job killed by a signal exits 128 + the signal (LSF's, or its own): the run's
    # exit_code file says more
    return JobState(job_id, state, stat, code, text or None, failure=failure,
                    signalled=code is not None and code > 128)


def _records(data: Any) -> Iterator[Mapping[str, Any]]:
    """The job records of a `bjobs -json` answer (those that say ERROR are unknown jobs)."""
    records = data.get("RECORDS") if isinstance(data, Mapping) else None
    for record in records if isinstance(records, list) else ():
        if isinstance(record, Mapping) and "ERROR" not in record and record.get("JOBID"):
            yield record


class LSFOptions(Options):
    """`job.lsf:` (over the profile's `scheduler_options.queue`)."""

    queue: Token | list[Token] | None = Field(
        default=None, description="queue (-q), e.g. pbatch or pdebug; several: each run goes "
        "to the first whose documented limits take its node count and walltime")


class LSF(Scheduler):
    """IBM Spectrum LSF with CSM (bsub -nnodes, bjobs, bkill), jobs started with jsrun."""

    name = "lsf"
    prefix = "#BSUB"
    template = "lsf.sh.j2"
    template_source = TEMPLATE
    options = LSFOptions
    queue_key = "queue"
    # jsrun (this package's starter) places ranks by resource sets; mpirun from Spectrum
    # MPI also starts them; srun, mpiexec (PALS) and flux have no place in an LSF job.
    launchers = frozenset({"jsrun", "mpirun"})
    in_job = InJob(job_id_variable="LSB_JOBID", env_prefixes=("LSB_",))
    # No packing (`run --pack`): jsrun places a job step by resource sets, never on
    # named hosts.
    packing = None
    retry = Retry(
        # mbatchd busy, restarting or out of reach (bsub and bjobs say so, and wait).
        transient=(r"LSF is processing your request|Cannot connect to LSF|"
                   r"batch system daemon not responding|LSF is down|"
                   r"Failed in an LSF library call"),
        not_queued=r"Cannot connect to LSF|LSF is down|batch system daemon not responding")
    # LSF's own report of the job (its state, TERM_* reason, resource usage) and anything
    # before the script's own redirection land here (-oo: each attempt writes it anew).
    logs = JobLogs(name="lsf.log", joins_output=True, patterns={
        Failure.WALLTIME: r"TERM_RUNLIMIT|TERM_DEADLINE",
        Failure.CANCELLED: r"TERM_(?:FORCE_)?(?:OWNER|ADMIN)",
        Failure.PREEMPTED: r"TERM_PREEMPT",
        Failure.OOM: r"TERM_MEMLIMIT|TERM_SWAP",
        Failure.RESOURCE_LIMIT: r"TERM_(?:CPU|PROCESS|THREAD)LIMIT",
        Failure.SCHEDULER: r"TERM_CSM_ALLOC",
    }, noise=r"jsrun")

    def directives(self, job: JobRequest) -> list[str]:
        """`#BSUB` lines: name, whole nodes (-nnodes), run limit, project, queue, log."""
        d = [f"-J {check_token('job name', job.name)}", f"-nnodes {job.nodes}",
             f"-W {run_limit(check_token('walltime', job.walltime))}"]
        if job.account:
            d.append(f"-P {check_token('account', job.account)}")
        if job.queue:
            d.append(f"-q {check_token('queue', job.queue)}")
        if job.stdout:  # both streams (no -e), overwritten; the script redirects its own
            d.append(f"-oo {check_token('output file', job.stdout)}")
        d.extend(job.extra)
        return [f"{self.prefix} {line}" for line in d]

    def submit_argv(self, script: str, extra: Sequence[str] | None = None) -> list[str]:
        """`bsub OPTIONS [EXTRA] SCRIPT`, the options read from the script's `#BSUB`
        lines. bsub parses those lines only from its standard input (`bsub < job.sh`), or
        from a file where lsf.conf sets LSB_BSUB_PARSE_SCRIPT=Y; scalestudy runs every
        scheduler command with stdin closed (execute.commands), so the request goes on
        bsub's command line, and the script (executable) is the job's command."""
        try:
            text = Path(script).read_text(encoding="utf-8")
        except OSError as exc:
            raise SubmitError(f"{script}: cannot read the job script to submit: "
                              f"{exc.strerror}") from None
        return ["bsub", *bsub_options(text), *(extra or ()), script]

    def parse_submit(self, exit_code: int, stdout: str, stderr: str) -> str:
        """`Job <123> is submitted to queue <pbatch>.` -> `123`."""
        said = (stderr or stdout).strip() or "no output"
        if exit_code != 0:
            raise SubmitError(f"bsub failed (exit {exit_code}): {said[:600]}")
        found = _SUBMITTED.search(stdout)
        if found:
            return found.group(1)
        raise SubmitError(
            f"bsub exited 0, so the job is queued, but printed no job id scalestudy can "
            f"read ({said[:300]!r}); it is not submitted again: the next `scalestudy run` "
            "finds it by its name")

    def query_argvs(self, job_ids: Sequence[str]) -> list[list[str]]:
        """bjobs' JSON (LSF 10.1), then its text form with a delimiter; `-a`: ended
        jobs too, while mbatchd keeps them (CLEAN_PERIOD)."""
        ids = [self.short_id(i) for i in job_ids]
        return [["bjobs", "-a", "-o", FIELDS, "-json", *ids],
                ["bjobs", "-a", "-noheader", "-o", TEXT_FIELDS, *ids]]

    def parse_states(self, argv: Sequence[str], exit_code: int, stdout: str,
                     stderr: str) -> dict[str, JobState]:
        """Job id -> state. bjobs exits non-zero when an id is unknown ("Job <N> is not
        found"); the others are still answered."""
        said = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
        unknown_only = bool(said) and all(_UNKNOWN.search(ln) for ln in said)
        json_answer = "-json" in argv and stdout.lstrip().startswith("{")
        if exit_code != 0 and not (unknown_only or json_answer):
            raise SubmitError(f"bjobs: exit {exit_code}: {(stderr or stdout).strip()[:300]}")
        if "-json" in argv:
            if not stdout.strip():
                return {}
            try:
                data = json.loads(stdout)
            except ValueError as exc:
                raise SubmitError(f"bjobs -json printed something that is not JSON: "
                                  f"{exc}") from None
            return {str(r["JOBID"]): job_state(
                str(r["JOBID"]), str(r.get("STAT", "")), r.get("EXIT_CODE"),
                str(r.get("EXIT_REASON") or ""), str(r.get("PEND_REASON") or ""))
                for r in _records(data)}
        states = {}
        for line in stdout.splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) >= 2 and parts[0].isdigit():
                states[parts[0]] = job_state(parts[0], parts[1], parts[2] if len(parts) > 2
                                             else "")
        return states

    def cancel_argv(self, job_ids: Sequence[str]) -> list[str]:
        """`bkill ID...`."""
        return ["bkill", *(self.short_id(i) for i in job_ids)]

    def cancel_failed(self, exit_code: int, stdout: str, stderr: str) -> str | None:
        """bkill exits non-zero when a job named has ended or is not known: neither is a
        failure to cancel; anything else it says (permission denied) is."""
        if exit_code == 0:
            return None
        said = [ln.strip() for ln in f"{stderr}\n{stdout}".splitlines() if ln.strip()]
        left = [ln for ln in said if not _UNKNOWN.search(ln) and "is being terminated" not in ln]
        return "\n".join(left) or (None if said else f"exit {exit_code}")

    def find_argvs(self, names: Sequence[str]) -> list[list[str]]:
        """`bjobs -a -J NAME -o "jobid job_name" -json` per name (bjobs takes one)."""
        return [["bjobs", "-a", "-J", name, "-o", "jobid job_name", "-json"] for name in names]

    def parse_found(self, argv: Sequence[str], stdout: str) -> dict[str, set[str]]:
        """Job name -> the ids of one `find_argvs` answer."""
        try:
            data = json.loads(stdout) if stdout.strip() else {}
        except ValueError:
            return {}
        found: dict[str, set[str]] = {}
        for record in _records(data):
            found.setdefault(str(record.get("JOB_NAME")), set()).add(str(record["JOBID"]))
        return found

    def needed_commands(self) -> tuple[str, ...]:
        """bsub submits, bjobs follows, bkill cancels."""
        return ("bsub", "bjobs", "bkill")
