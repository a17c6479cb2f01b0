"""PBS Pro: `#PBS` directives, `qsub`, `qstat -x -f -F json` (or `qstat -f`), `qdel`.

The text parser also reads the Torque-style `qstat -f` of Slurm's PBS wrappers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from scalestudy.site import queues
from scalestudy.site.schedulers import (
    JobRequest,
    JobState,
    JobStatus,
    Scheduler,
    SubmitError,
    check_token,
    register,
)

PENDING, RUNNING, COMPLETED, FAILED = (JobStatus.QUEUED, JobStatus.RUNNING,
                                       JobStatus.COMPLETED, JobStatus.FAILED)
CANCELLED, TIMEOUT, UNKNOWN = JobStatus.CANCELLED, JobStatus.TIMEOUT, JobStatus.UNKNOWN

# PBS Pro job_state letters (and Torque's C for completed).
STATES = {
    "Q": PENDING, "H": PENDING, "W": PENDING, "T": PENDING, "S": PENDING, "U": PENDING,
    "M": PENDING, "R": RUNNING, "E": RUNNING, "B": RUNNING,
    "F": COMPLETED, "X": COMPLETED, "C": COMPLETED,
}
# PBS Pro's negative Exit_status values are its own (JOB_EXEC_*), not the program's.
WALLTIME_EXCEEDED = -29  # JOB_EXEC_KILL_WALLTIME
# job substates of a finished (F) job: deleted (qdel, queued or running), ended
# normally (or never ran: an afterok child whose parent failed), failed
SUBSTATE_TERMINATED, SUBSTATE_FINISHED, SUBSTATE_FAILED = 91, 92, 93
# Exit codes of qstat and qdel that still answer for the other ids: an id the server
# does not know (purged from its history, or never existed), a job that has finished
# (qstat without -x, qdel), a job already exiting (qdel right after another qdel).
UNKNOWN_JOB_EXIT, FINISHED_JOB_EXIT, BAD_STATE_EXIT = 153, 35, 168
_ENDED = re.compile(r"Unknown Job Id|Job has finished|Request invalid for state of job")
_FINISHED = re.compile(r"^qstat: (\S+) Job has finished", re.M)
_JOB_ID = re.compile(r"^(\d+(?:\[\d*\])?)(\.[A-Za-z0-9_.-]+)?$")


def short_id(job_id: str) -> str:
    """`1234.polaris-pbs-01.hsn` -> `1234` (qstat may print the id longer or shorter)."""
    return job_id.split(".")[0]


def job_state(job_id: str, attrs: Mapping[str, Any]) -> JobState:
    """One job's state from its attributes (`qstat -F json` values or `qstat -f` text)."""
    raw = str(attrs.get("job_state", "")).strip()
    state = STATES.get(raw, UNKNOWN)
    comment = _text(attrs.get("comment")) or None
    if not state.done:  # a requeued job keeps its stale Exit_status (-4): not an end
        return JobState(job_id, state, raw, None, comment)
    exit_status = _int(attrs.get("Exit_status", attrs.get("exit_status")))
    substate = _int(attrs.get("substate"))
    text, reason = (comment or "").lower(), comment
    if exit_status == WALLTIME_EXCEEDED or ("walltime" in text and "exceed" in text):
        state = TIMEOUT
    # qdel: substate 91, and "... and terminated by user@host" when it ran (Exit_status
    # 271 = 256 + SIGTERM); Torque wrappers say "deleted"
    elif substate == SUBSTATE_TERMINATED or "terminated by" in text \
            or "deleted" in text or "qdel" in text:
        state = CANCELLED
    elif exit_status is None and raw == "F":  # ended without running (substate 92)
        state = CANCELLED
        after = str(attrs.get("depend", "")).startswith("after")
        reason = "never ran" + (": its dependency failed" if after else "") + (
            f"; {comment}" if comment else "")
    # an array whose sub-job failed: substate 93, "... and failed", Exit_status 0
    elif substate == SUBSTATE_FAILED or exit_status not in (None, 0):
        state = FAILED
    code = exit_status
    if code is not None and code < 0:
        reason = f"PBS exit status {code}" + (f"; {comment}" if comment else "")
    elif code is not None and code > 256:
        code = 128 + (code - 256)  # PBS Pro: 256 + signal -> the shell's 128 + signal
    return JobState(job_id, state, raw, code, reason)


def _int(value: Any) -> int | None:
    """A number qstat printed as a JSON number or as text (versions differ)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    text = str(value).strip() if value is not None else ""
    return int(text) if text.lstrip("-").isdigit() else None


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _unwrap(text: str) -> str:
    """`qstat -f` text with its wrapped values joined: PBS Pro wraps at 80 columns and
    continues on lines that start with a TAB, splitting anywhere (`(n2:n` / `\tcpus=2)`).
    Its attributes are indented with 4 spaces; Slurm's Torque-style qstat indents them
    with a TAB and does not wrap."""
    return text.replace("\n\t", "") if re.search(r"^    \S", text, re.M) else text


@register
class PBSPro(Scheduler):
    """PBS Pro (qsub/qstat/qdel), as at ALCF."""

    name = "pbs"
    prefix = "#PBS"
    template = "pbs.sh.j2"
    job_options = frozenset({"queue", "filesystems"})
    queue_key = "queue"
    log_name = "pbs.log"
    hostfile = '"$PBS_NODEFILE"'

    def directives(self, job: JobRequest) -> list[str]:
        """`#PBS` lines: name, select chunk, place, walltime, filesystems, account, queue."""
        chunk = [str(job.nodes)]
        if job.gpus_directive != "none":  # sites that schedule below whole nodes
            chunk.append(f"ncpus={job.cores_per_node or job.ranks_per_node}")
            if job.gpus_per_node:
                chunk.append(f"ngpus={job.gpus_per_node}")
            chunk.append(f"mpiprocs={job.ranks_per_node}")
        for key, value in job.select_terms.items():
            chunk.append(f"{check_token('select term', key)}={check_token('select term', value)}")
        d = [f"-N {check_token('job name', job.name)[:236]}", f"-l select={':'.join(chunk)}"]
        if job.place:
            d.append(f"-l place={check_token('place', job.place)}")
        d.append(f"-l walltime={check_token('walltime', job.walltime)}")
        if job.filesystems:
            d.append(f"-l filesystems={check_token('filesystems', job.filesystems)}")
        if job.account:
            d.append(f"-A {check_token('account', job.account)}")
        if job.queue:
            d.append(f"-q {check_token('queue', job.queue)}")
        d += ["-j oe", "-k doe"]
        if job.stdout:
            d.append(f"-o {check_token('output file', job.stdout)}")
        d.extend(job.extra)
        return [f"{self.prefix} {line}" for line in d]

    def submit_argv(self, script: str, extra: Sequence[str] | None = None) -> list[str]:
        """`qsub -f SCRIPT`: in the foreground. Without -f, PBS Pro's qsub forks a
        background daemon that keeps every file it inherited open for minutes, the study
        lock included, so a `run` killed mid-submission would leave the study locked.
        Torque-style qsub (Slurm's wrappers) has no -f: their profiles set
        `submit_args: []`."""
        return ["qsub", *(["-f"] if extra is None else extra), script]

    def parse_submit(self, exit_code: int, stdout: str, stderr: str) -> str:
        """`1234.server` (PBS Pro) or a bare `1234` (Torque wrappers) -> the id as printed."""
        lines = [ln.strip() for ln in stdout.strip().splitlines() if ln.strip()]
        job_id = lines[-1] if lines else ""
        if exit_code != 0 or not _JOB_ID.match(job_id):
            raise SubmitError(
                f"qsub failed (exit {exit_code}): {(stderr or stdout).strip() or 'no output'}"
            )
        return job_id

    def query_argvs(self, job_ids: Sequence[str]) -> list[list[str]]:
        """PBS Pro's JSON (finished jobs too, with -x); plain `qstat -f` as the fallback."""
        return [["qstat", "-x", "-f", "-F", "json", *job_ids], ["qstat", "-f", *job_ids]]

    def parse_states(self, argv: Sequence[str], exit_code: int, stdout: str,
                     stderr: str) -> dict[str, JobState]:
        """Job id (short form) -> state, from JSON or from `qstat -f` text. qstat still
        answers for the other ids when one is unknown (exit 153: purged from the
        history, or never queued) or, without -x, finished (exit 35, stdout empty): such
        a job's state is "finished", how it ended is the run directory's to say."""
        said = [ln for ln in stderr.splitlines() if ln.strip()]
        answered = exit_code in (UNKNOWN_JOB_EXIT, FINISHED_JOB_EXIT) and (
            bool(said) or bool(stdout.strip())) and all(_ENDED.search(ln) for ln in said)
        if exit_code != 0 and not answered:
            raise SubmitError(f"{' '.join(argv[:2])}: exit {exit_code}: "
                              f"{(stderr or stdout).strip()[:300]}")
        states = {short_id(job_id): JobState(
            job_id, COMPLETED, "F", None, "finished (qstat without -x does not say how)")
            for job_id in _FINISHED.findall(stderr)}
        if stdout.strip():
            states.update(self._parse_json(stdout) if "json" in argv
                          else self._parse_text(stdout))
        return states

    def _parse_json(self, stdout: str) -> dict[str, JobState]:
        try:
            data: Any = json.loads(stdout)
        except ValueError as exc:
            raise SubmitError(f"qstat -F json printed something that is not JSON: {exc}") from None
        # Only unknown ids: an object without "Jobs" (exit 153)
        jobs = data.get("Jobs", {}) if isinstance(data, dict) else {}
        return {short_id(full_id): job_state(full_id, attrs)
                for full_id, attrs in jobs.items() if isinstance(attrs, dict)}

    def _parse_text(self, stdout: str) -> dict[str, JobState]:
        states = {}
        for block in re.split(r"^(?=Job Id:)", _unwrap(stdout), flags=re.M):
            head = re.match(r"Job Id:\s*(\S+)", block)
            if head:
                attrs = dict(re.findall(r"^\s+([\w.]+) = (.*)$", block, flags=re.M))
                states[short_id(head.group(1))] = job_state(head.group(1), attrs)
        return states

    def cancel_argv(self, job_ids: Sequence[str]) -> list[str]:
        """`qdel ID...`."""
        return ["qdel", *job_ids]

    def cancel_failed(self, exit_code: int, stdout: str, stderr: str) -> str | None:
        """qdel exits 35 for a job that has finished, 153 for one the server no longer
        knows and 168 for one already exiting (deleted a moment ago): the others named
        are deleted, and none of these is a failure to cancel; any other complaint is."""
        if exit_code == 0:
            return None
        said = [ln for ln in (stderr or stdout).splitlines() if ln.strip()]
        left = [ln for ln in said if not _ENDED.search(ln)]
        if exit_code in (FINISHED_JOB_EXIT, UNKNOWN_JOB_EXIT, BAD_STATE_EXIT) and not left:
            return None
        return "\n".join(left) or f"exit {exit_code}"

    def find_argvs(self, names: Sequence[str]) -> list[list[str]]:
        """`qselect -x -N NAME` per name (PBS Pro, finished jobs too), then `qstat -f`
        (Torque-style qstat has no qselect). No `qstat -x -f`: it lists every user's
        history (3 MB for 3,000 jobs on the testbed), which qselect already searched,
        and Torque's -x means XML."""
        return [*(["qselect", "-x", "-N", name[:236]] for name in names), ["qstat", "-f"]]

    def parse_found(self, argv: Sequence[str], stdout: str) -> dict[str, set[str]]:
        """qselect: one job id per line, all with the name asked for; qstat -f: the
        `Job Id:` and `Job_Name =` of each job."""
        if argv[0] == "qselect":
            ids = {short_id(line.strip()) for line in stdout.splitlines() if line.strip()}
            return {argv[-1]: ids} if ids else {}
        found: dict[str, set[str]] = {}
        job_id = None
        for line in _unwrap(stdout).splitlines():
            head = re.match(r"\s*Job Id:\s*(\S+)", line)
            if head:
                job_id = short_id(head.group(1))
                continue
            name = re.match(r"\s*Job_Name\s*=\s*(\S+)", line)
            if name and job_id:
                found.setdefault(name.group(1), set()).add(job_id)
        return found

    def needed_commands(self) -> tuple[str, ...]:
        """qsub submits, qstat follows the jobs, qdel cancels them."""
        return ("qsub", "qstat", "qdel")

    def limits_argvs(self) -> list[list[str]]:
        """The queues (PBS Pro's JSON; qmgr's listing where qstat has no -F json) and
        the server's default queue. PBS keeps no account list to ask: a site checks -A
        in a hook of its own, so preflight leaves the account alone."""
        return [["qstat", "-Q", "-f", "-F", "json"], ["qmgr", "-c", "list queue @default"],
                ["qstat", "-B", "-f", "-F", "json"]]

    def parse_limits(self, argv: Sequence[str], exit_code: int, stdout: str,
                     stderr: str) -> queues.QueueAnswer | None:
        """qstat's queues or server (JSON), or qmgr's queue listing."""
        if exit_code != 0 or not stdout.strip():
            return None
        try:
            if argv[0] == "qmgr":
                return queues.parse_qmgr_queues(stdout)
            return (queues.parse_qstat_server if "-B" in argv else queues.parse_qstat_queues)(
                stdout)
        except ValueError:  # not JSON: a qstat without -F json
            return None
