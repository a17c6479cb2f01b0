"""PBS Pro: `#PBS` directives, `qsub`, `qstat -x -f -F json` (or `qstat -f`), `qdel`.

The text parser also reads the Torque-style `qstat -f` of Slurm's PBS wrappers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

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
# job substate of a finished job that was deleted (qdel), queued or running
SUBSTATE_TERMINATED = 91
# qstat's exit code when one of the ids asked for is unknown (purged from history, or
# never existed); it still prints the jobs it knows.
UNKNOWN_JOB_EXIT = 153
_JOB_ID = re.compile(r"^(\d+(?:\[\d*\])?)(\.[A-Za-z0-9_.-]+)?$")


def short_id(job_id: str) -> str:
    """`1234.polaris-pbs-01.hsn` -> `1234` (qstat may print the id longer or shorter)."""
    return job_id.split(".")[0]


def _finished(job_id: str, raw: str, exit_status: int | None, comment: str | None,
              substate: int | None = None) -> JobState:
    state = STATES.get(raw, UNKNOWN)
    reason = comment or None
    if state == COMPLETED:
        text = (comment or "").lower()
        if exit_status == WALLTIME_EXCEEDED or ("walltime" in text and "exceed" in text):
            state = TIMEOUT
        # qdel: substate 91 (terminated), and "... and terminated by user@host" when it
        # ran (Exit_status 271 = 256 + SIGTERM); Torque wrappers say "deleted"
        elif substate == SUBSTATE_TERMINATED or "terminated by" in text \
                or "deleted" in text or "qdel" in text:
            state = CANCELLED
        elif exit_status is not None and exit_status != 0:
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

    def submit_argv(self, script: str) -> list[str]:
        """`qsub SCRIPT`."""
        return ["qsub", script]

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
        """Job id (short form) -> state, from JSON or from `qstat -f` text. Exit 153 (an
        id qstat does not know, e.g. purged from its history) still lists the others."""
        if exit_code not in (0, UNKNOWN_JOB_EXIT) or (
                exit_code == UNKNOWN_JOB_EXIT and not stdout.strip() and
                "Unknown Job Id" not in stderr):
            raise SubmitError(f"{' '.join(argv[:2])}: exit {exit_code}: "
                              f"{(stderr or stdout).strip()[:300]}")
        if not stdout.strip():
            return {}
        if "json" in argv:
            return self._parse_json(stdout)
        return self._parse_text(stdout)

    def _parse_json(self, stdout: str) -> dict[str, JobState]:
        try:
            data: Any = json.loads(stdout)
        except ValueError as exc:
            raise SubmitError(f"qstat -F json printed something that is not JSON: {exc}") from None
        jobs = data.get("Jobs", {}) if isinstance(data, dict) else {}
        states = {}
        for full_id, attrs in jobs.items():
            if not isinstance(attrs, dict):
                continue
            states[short_id(full_id)] = _finished(
                full_id, str(attrs.get("job_state", "")), _int(attrs.get("Exit_status")),
                _text(attrs.get("comment")), _int(attrs.get("substate")))
        return states

    def _parse_text(self, stdout: str) -> dict[str, JobState]:
        states = {}
        for block in re.split(r"^(?=Job Id:)", stdout, flags=re.M):
            head = re.match(r"Job Id:\s*(\S+)", block)
            if not head:
                continue
            attrs = dict(re.findall(r"^\s+([\w.]+) = (.*)$", block, flags=re.M))
            exit_text = attrs.get("Exit_status", attrs.get("exit_status", ""))
            exit_status = int(exit_text) if exit_text.lstrip("-").isdigit() else None
            states[short_id(head.group(1))] = _finished(
                head.group(1), attrs.get("job_state", "").strip(), exit_status,
                attrs.get("comment"), _int(attrs.get("substate")))
        return states

    def cancel_argv(self, job_ids: Sequence[str]) -> list[str]:
        """`qdel ID...`."""
        return ["qdel", *job_ids]

    def cancel_failed(self, exit_code: int, stdout: str, stderr: str) -> str | None:
        """qdel of a job that has just finished exits 35 ("Job has finished"): not a
        failure to cancel; any other complaint is."""
        if exit_code == 0:
            return None
        left = [ln for ln in (stderr or stdout).splitlines() if ln.strip()
                and "has finished" not in ln and "Unknown Job Id" not in ln]
        return "\n".join(left) or None if exit_code in (35, UNKNOWN_JOB_EXIT) else (
            (stderr or stdout).strip() or f"exit {exit_code}")

    def find_argvs(self, names: Sequence[str]) -> list[list[str]]:
        """`qselect -x -N NAME` per name (PBS Pro, finished jobs too), then the full
        listings `qstat -x -f` and `qstat -f` (Torque-style qstat has no qselect)."""
        return [*(["qselect", "-x", "-N", name[:236]] for name in names),
                ["qstat", "-x", "-f"], ["qstat", "-f"]]

    def parse_found(self, argv: Sequence[str], stdout: str) -> dict[str, set[str]]:
        """qselect: one job id per line, all with the name asked for; qstat -f: the
        `Job Id:` and `Job_Name =` of each job."""
        if argv[0] == "qselect":
            ids = {short_id(line.strip()) for line in stdout.splitlines() if line.strip()}
            return {argv[-1]: ids} if ids else {}
        found: dict[str, set[str]] = {}
        job_id = None
        for line in stdout.splitlines():
            head = re.match(r"\s*Job Id:\s*(\S+)", line)
            if head:
                job_id = short_id(head.group(1))
                continue
            name = re.match(r"\s*Job_Name\s*=\s*(\S+)", line)
            if name and job_id:
                found.setdefault(name.group(1), set()).add(job_id)
        return found
