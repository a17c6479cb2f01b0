"""Slurm: `#SBATCH` directives, `sbatch --parsable`, `sacct` (or `squeue`/`scontrol`), `scancel`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

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

# Slurm's job states (sacct/squeue long names) -> ours.
STATES = {
    "PENDING": PENDING, "CONFIGURING": PENDING, "REQUEUED": PENDING, "REQUEUE_HOLD": PENDING,
    "REQUEUE_FED": PENDING, "RESV_DEL_HOLD": PENDING, "SUSPENDED": PENDING,
    "RUNNING": RUNNING, "COMPLETING": RUNNING, "STAGE_OUT": RUNNING, "SIGNALING": RUNNING,
    "RESIZING": RUNNING, "STOPPED": RUNNING,
    "COMPLETED": COMPLETED,
    "FAILED": FAILED, "NODE_FAIL": FAILED, "OUT_OF_MEMORY": FAILED, "BOOT_FAIL": FAILED,
    "DEADLINE": FAILED, "PREEMPTED": FAILED, "REVOKED": FAILED, "SPECIAL_EXIT": FAILED,
    "CANCELLED": CANCELLED,
    "TIMEOUT": TIMEOUT,
}
# ConsumedEnergyRaw (J) and ElapsedRaw (s) are empty where the site has no energy
# accounting (AcctGatherEnergyType); where it has, they give the job's average power.
SACCT_FIELDS = "JobIDRaw,State,ExitCode,Reason,ConsumedEnergyRaw,ElapsedRaw"


def _state(raw: str) -> JobStatus:
    # sacct writes "CANCELLED by 0"; squeue may abbreviate nothing but add "+" markers.
    word = raw.split()[0].rstrip("+") if raw.strip() else ""
    return STATES.get(word, UNKNOWN)


def _exit_code(text: str) -> int | None:
    """`2:0` (code:signal) -> 2; a signal gives 128 + signal, as a shell reports it."""
    match = re.fullmatch(r"(\d+):(\d+)", text.strip())
    if not match:
        return None
    code, sig = int(match.group(1)), int(match.group(2))
    return 128 + sig if sig else code


def _positive(text: str) -> float | None:
    """A positive number of sacct's, or None (empty, 0, or garbled)."""
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if value > 0 else None


def _job_state(job_id: str, raw: str, exit_code: int | None, reason: str | None) -> JobState:
    """A JobState; COMPLETED with a non-zero exit code counts as failed."""
    state = _state(raw)
    if state == COMPLETED and exit_code not in (None, 0):
        state = FAILED
    return JobState(job_id, state, raw, exit_code, None if reason in (None, "", "None") else reason)


@register
class Slurm(Scheduler):
    """Slurm (sbatch/sacct/squeue/scontrol/scancel)."""

    name = "slurm"
    prefix = "#SBATCH"
    template = "slurm.sh.j2"
    job_options = frozenset({"partition", "qos", "constraint"})
    queue_key = "partition"
    submitit = True

    def directives(self, job: JobRequest) -> list[str]:
        """`#SBATCH` lines, short options where Slurm users write them."""
        d = [f"--job-name={check_token('job name', job.name)}", f"-N {job.nodes}",
             f"--ntasks-per-node={job.ranks_per_node}"]
        if job.gpus_per_node:
            if job.gpus_directive == "gpus-per-node":
                d.append(f"--gpus-per-node={job.gpus_per_node}")
            elif job.gpus_directive == "gres":
                d.append(f"--gres=gpu:{job.gpus_per_node}")
        if job.cpus_per_task:
            d.append(f"--cpus-per-task={job.cpus_per_task}")
        d.append(f"-t {check_token('walltime', job.walltime)}")
        for flag, what, value in (("-A", "account", job.account), ("-p", "partition", job.queue),
                                  ("-q", "qos", job.qos), ("-C", "constraint", job.constraint)):
            if value:
                d.append(f"{flag} {check_token(what, value)}")
        if job.stdout:
            d.append(f"--output={check_token('output file', job.stdout)}")
        if job.stderr:
            d.append(f"--error={check_token('error file', job.stderr)}")
        d.extend(job.extra)
        return [f"{self.prefix} {line}" for line in d]

    def submit_argv(self, script: str, extra: Sequence[str] | None = None) -> list[str]:
        """`sbatch --parsable [EXTRA] SCRIPT`."""
        return ["sbatch", "--parsable", *(extra or ()), script]

    def parse_submit(self, exit_code: int, stdout: str, stderr: str) -> str:
        """`12345` or `12345;cluster` -> `12345`."""
        first = stdout.strip().splitlines()[-1].strip() if stdout.strip() else ""
        job_id = first.split(";")[0]
        if exit_code != 0 or not job_id.isdigit():
            raise SubmitError(
                f"sbatch failed (exit {exit_code}): {(stderr or stdout).strip() or 'no output'}"
            )
        return job_id

    def query_argvs(self, job_ids: Sequence[str]) -> list[list[str]]:
        """sacct first (accounting); squeue -t all when accounting is off; then
        `scontrol -o show job` (every job slurmctld still holds, with exit codes)."""
        ids = ",".join(job_ids)
        return [
            ["sacct", "-X", "-n", "-P", "-j", ids, "-o", SACCT_FIELDS],
            ["squeue", "-h", "-t", "all", "-j", ids, "-o", "%i|%T|%r"],
            ["scontrol", "-o", "show", "job"],
        ]

    def find_argvs(self, names: Sequence[str]) -> list[list[str]]:
        """sacct (ended jobs, from the last 7 days) and squeue (what the controller holds)."""
        joined = ",".join(names)
        return [
            ["sacct", "-X", "-n", "-P", "-S", "now-7days", "--name", joined,
             "-o", "JobIDRaw,JobName"],
            ["squeue", "-h", "-t", "all", "--name", joined, "-o", "%i|%j"],
        ]

    def parse_found(self, argv: Sequence[str], stdout: str) -> dict[str, set[str]]:
        """Rows of `id|name`."""
        found: dict[str, set[str]] = {}
        for line in stdout.splitlines():
            job_id, _, name = line.strip().partition("|")
            if job_id.isdigit() and name:
                found.setdefault(name, set()).add(job_id)
        return found

    def parse_states(self, argv: Sequence[str], exit_code: int, stdout: str,
                     stderr: str) -> dict[str, JobState]:
        """Rows of `sacct -P` (id|state|exit|reason), `squeue -o %i|%T|%r`, or
        `scontrol -o show job` (one job per line); a failed command is no answer."""
        if exit_code != 0:
            raise SubmitError(f"{' '.join(argv[:2])}: exit {exit_code}: "
                              f"{(stderr or stdout).strip()[:300]}")
        if argv[0] == "scontrol":
            jobs = (self.parse_scontrol(line) for line in stdout.splitlines() if line.strip())
            return {job.job_id: job for job in jobs if job is not None}
        states: dict[str, JobState] = {}
        from_sacct = argv[0] == "sacct"
        for line in stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) < 3 or not parts[0]:
                continue
            job_id = parts[0].split(".")[0].split("_")[0] if from_sacct else parts[0]
            raw = parts[1].strip()
            exit_code = _exit_code(parts[2]) if from_sacct else None
            reason = (parts[3] if from_sacct and len(parts) > 3 else parts[2]).strip()
            job = _job_state(job_id, raw, exit_code, reason)
            if from_sacct and len(parts) > 5:
                job = replace(job, energy_j=_positive(parts[4]), elapsed_s=_positive(parts[5]))
            states[job_id] = job
        return states

    def parse_scontrol(self, stdout: str) -> JobState | None:
        """JobState from one line of `scontrol -o show job` (key=value pairs)."""
        fields = dict(re.findall(r"(\w+)=(\S*)", stdout))
        if "JobId" not in fields:
            return None
        return _job_state(fields["JobId"], fields.get("JobState", ""),
                          _exit_code(fields.get("ExitCode", "")), fields.get("Reason"))

    def cancel_argv(self, job_ids: Sequence[str]) -> list[str]:
        """`scancel ID...`."""
        return ["scancel", *job_ids]

    def needed_commands(self) -> tuple[str, ...]:
        """sbatch submits; squeue and sacct follow the jobs."""
        return ("sbatch", "squeue", "sacct")

    def accounts_argv(self, user: str) -> list[str] | None:
        """`sacctmgr -n -P show assoc user=U format=Account,Partition,QOS`."""
        return ["sacctmgr", "-n", "-P", "show", "assoc", f"user={user}",
                "format=Account,Partition,QOS"]

    def parse_accounts(self, exit_code: int, stdout: str, stderr: str
                       ) -> dict[str, set[str]] | None:
        """The user's associations; None when sacctmgr failed (no slurmdbd to ask)."""
        return queues.parse_sacctmgr_accounts(stdout) if exit_code == 0 else None

    def limits_argvs(self) -> list[list[str]]:
        """Every partition (hidden ones too), the nodes of each that take no job, and
        the QOSes with their limits."""
        return [["scontrol", "-a", "-o", "show", "partition"],
                ["sinfo", "-h", "-o", "%R|%T|%D"],
                ["sacctmgr", "-n", "-P", "show", "qos",
                 "format=Name,MaxWall,MaxTRESPerJob,MinTRESPerJob"]]

    def parse_limits(self, argv: Sequence[str], exit_code: int, stdout: str,
                     stderr: str) -> queues.QueueAnswer | None:
        """scontrol's partitions, sinfo's node states or sacctmgr's QOSes."""
        if exit_code != 0:
            return None
        parse = {"scontrol": queues.parse_scontrol_partitions,
                 "sinfo": queues.parse_sinfo_states}.get(argv[0], queues.parse_sacctmgr_qos)
        return parse(stdout)
