"""Slurm: `#SBATCH` directives, `sbatch --parsable`, `sacct` (or `squeue`/`scontrol`), `scancel`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from pydantic import Field

from scalestudy.core.spec import Token
from scalestudy.site import queues
from scalestudy.site.schedulers import (
    Accounts,
    Exclusion,
    Failure,
    InJob,
    JobLogs,
    JobRequest,
    JobState,
    JobStatus,
    Options,
    Packing,
    Retry,
    Scheduler,
    SubmitError,
    check_token,
    options_of,
    register,
)
from scalestudy.site.schedulers.slurm import limits

PENDING, RUNNING, COMPLETED, FAILED = (JobStatus.QUEUED, JobStatus.RUNNING,
                                       JobStatus.COMPLETED, JobStatus.FAILED)
CANCELLED, TIMEOUT, UNKNOWN = JobStatus.CANCELLED, JobStatus.TIMEOUT, JobStatus.UNKNOWN
HELD, REQUEUED, PREEMPTED = JobStatus.HELD, JobStatus.REQUEUED, JobStatus.PREEMPTED

# Slurm's job states (sacct/squeue/scontrol long names; slurm.h's job_states and
# JOB_REQUEUE*/JOB_SPECIAL_EXIT/... flags; man squeue "JOB STATE CODES") -> ours, with
# the failure class the state decides and what it means. docs/scheduler-states.md has the
# table with its sources.
STATES: dict[str, tuple[JobStatus, Failure | None, str | None]] = {
    "PENDING": (PENDING, None, None), "CONFIGURING": (PENDING, None, None),
    "REQUEUED": (REQUEUED, None, "requeued by Slurm; it runs again under the same id"),
    "REQUEUE_FED": (REQUEUED, None, "requeued by the federation"),
    "REQUEUE_HOLD": (HELD, None, "requeued and held: release it with `scontrol release {id}`"),
    "SPECIAL_EXIT": (HELD, None, "requeued in the special-exit state and held (a site epilog "
                     "asked for it): release it with `scontrol release {id}`"),
    "RESV_DEL_HOLD": (HELD, None, "held because its reservation was deleted: release it "
                      "with `scontrol release {id}`"),
    "SUSPENDED": (HELD, None, "suspended (preempted by suspension, or by an administrator); "
                  "it resumes when the site resumes it (`scontrol resume {id}`, an admin)"),
    "RUNNING": (RUNNING, None, None), "COMPLETING": (RUNNING, None, None),
    "STAGE_OUT": (RUNNING, None, None), "SIGNALING": (RUNNING, None, None),
    "RESIZING": (RUNNING, None, None), "STOPPED": (RUNNING, None, None),
    "COMPLETED": (COMPLETED, None, None),
    "FAILED": (FAILED, None, None),
    "NODE_FAIL": (FAILED, Failure.NODE_FAILURE, "a node of the job failed"),
    "BOOT_FAIL": (FAILED, Failure.NODE_FAILURE, "a node failed to boot"),
    "OUT_OF_MEMORY": (FAILED, Failure.OOM, "killed for memory (OUT_OF_MEMORY)"),
    "DEADLINE": (TIMEOUT, Failure.WALLTIME, "its --deadline passed"),
    "TIMEOUT": (TIMEOUT, Failure.WALLTIME, None),
    "PREEMPTED": (PREEMPTED, Failure.PREEMPTED, "the site took its nodes for another job: "
                  "run it again, nothing is wrong with the run"),
    "REVOKED": (CANCELLED, Failure.CANCELLED, "revoked: a sibling of this federated job ran "
                "on another cluster"),
    "CANCELLED": (CANCELLED, Failure.CANCELLED, None),
}
# Pending reasons (squeue %r, sacct Reason, scontrol Reason=) that keep a job from ever
# starting until someone acts: a hold, or a dependency that can never be met.
HOLDS = {
    "JobHeldUser": "held by its user: release it with `scontrol release {id}`",
    "JobHeldAdmin": "held by an administrator: ask the site's support to release it",
    "launch failed requeued held": "Slurm could not launch it, requeued it and held it: "
                                   "look at the node, then `scontrol release {id}`",
    "launch_failed_requeued_held": "Slurm could not launch it, requeued it and held it: "
                                   "look at the node, then `scontrol release {id}`",
    "DependencyNeverSatisfied": "its dependency can never be satisfied: cancel it "
                                "(`scancel {id}`) and submit again",
    # `scontrol requeuehold` (recorded): scontrol's and squeue's spellings
    "job_requeued_in_held_state": "requeued and held: release it with `scontrol release {id}`",
    "job requeued in held state": "requeued and held: release it with `scontrol release {id}`",
}
# ConsumedEnergyRaw (J) and ElapsedRaw (s) are empty where the site has no energy
# accounting (AcctGatherEnergyType); where it has, they give the job's average power.
SACCT_FIELDS = "JobIDRaw,State,ExitCode,Reason,ConsumedEnergyRaw,ElapsedRaw"
# scancel's complaints about a job that has ended already: it is no failure to cancel.
_GONE = re.compile(r"Invalid job id specified|already completing or completed|"
                   r"Job has already finished", re.I)
# A job id in what sbatch (or a site's wrapper around it) prints: `--parsable`'s
# `12345` or `12345;cluster`, or the sentence `Submitted batch job 12345 [on cluster x]`.
_TEST_ONLY = re.compile(r"to start at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)")
_PARSABLE = re.compile(r"^(\d+)(?:;([\w.-]+))?$")
_SENTENCE = re.compile(r"\bSubmitted batch job (\d+)(?: on cluster ([\w.-]+))?", re.I)


def _exit_code(text: str) -> tuple[int | None, bool]:
    """ExitCode `2:0` (code:signal) -> (2, False); `0:9`, the job's shell killed by a
    signal, -> (128 + 9, True), as a shell reports it."""
    match = re.fullmatch(r"(\d+):(\d+)", text.strip())
    if not match:
        return None, False
    code, sig = int(match.group(1)), int(match.group(2))
    return (128 + sig, True) if sig else (code, False)


def _positive(text: str) -> float | None:
    """A positive number of sacct's, or None (empty, 0, or garbled)."""
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if value > 0 else None


def _job_state(job_id: str, raw: str, exit_text: str, reason: str | None) -> JobState:
    """A JobState with the class its state decides; COMPLETED with a non-zero exit code
    counts as failed; a pending job on hold is HELD, with what to do."""
    word = raw.split()[0].rstrip("+") if raw.strip() else ""  # "CANCELLED by 1000"
    state, failure, meaning = STATES.get(word, (UNKNOWN, None, None))
    exit_code, signalled = _exit_code(exit_text)
    reason = None if reason in (None, "", "None", "(null)") else reason.strip()
    if state is COMPLETED and exit_code not in (None, 0):
        state = FAILED
    hold = HOLDS.get(reason or "")
    if state is PENDING and hold is not None:
        state, meaning = HELD, hold
    short = job_id.split(";")[0]
    if meaning is not None:
        text = meaning.format(id=short)
        reason = text if reason in (None, word) or reason in HOLDS else f"{text}; {reason}"
    return JobState(job_id, state, raw, exit_code, reason, failure=failure,
                    signalled=signalled)


def _clusters(job_ids: Sequence[str]) -> list[str]:
    """`-M c1,c2` for job ids that carry a cluster (`12345;c1`), else nothing."""
    names = sorted({i.partition(";")[2] for i in job_ids} - {""})
    return ["-M", ",".join(names)] if names else []

#: The job's hosts, one per line (the job script's, and a packed allocation's node file).
_NODES = 'scontrol show hostnames "$SLURM_JOB_NODELIST"'


class SlurmOptions(Options):
    """`job.slurm:` (over the profile's `scheduler_options` of the same names)."""

    partition: Token | list[Token] | None = Field(
        default=None, description="partition (-p); several: each run goes to the first "
        "whose documented limits take its node count and walltime")
    qos: Token | None = Field(default=None, description="quality of service (-q)")
    constraint: Token | None = Field(default=None, description="node features (-C), e.g. gpu")
    gpus_directive: Literal["gpus-per-node", "gres", "none"] = Field(
        default="gpus-per-node", description="how the GPUs are asked: --gpus-per-node=N, "
        "--gres=gpu:N, or not at all")


class SlurmSite(Options):
    """Slurm settings of a site's profile (`scheduler_options`), beside job defaults."""

    qos_names: list[Token] = Field(
        default_factory=list, description="names that are a QOS (job.slurm.qos, -q) at "
        "this site, not a partition (e.g. Frontier's debug): job.slurm.partition naming "
        "one is an error that says so")


@register
class Slurm(Scheduler):
    """Slurm (sbatch/sacct/squeue/scontrol/scancel)."""

    name = "slurm"
    prefix = "#SBATCH"
    template = "slurm.sh.j2"
    options = SlurmOptions
    queue_key = "partition"
    limited_option = ("qos", "QOS")
    launchers = frozenset({"srun", "mpirun"})  # Open MPI's mpirun asks Slurm for the hosts
    site_options = SlurmSite
    submitit = True
    exclusion = Exclusion()  # --exclude
    in_job = InJob(nodes_command=_NODES, job_id_variable="SLURM_JOB_ID",
                   env_prefixes=("SLURM_", "SRUN_"))
    accounts = Accounts(source="sacctmgr show assoc", unknown=(
        "Slurm refuses such jobs where it enforces associations and charges your default "
        "account elsewhere"))
    packing = Packing(
        nodes_command=_NODES, slots_lines=True,
        # srun started as the allocation was cancelled or ran out (seen on the testbed:
        # "srun: error: Slurm job 101 has expired")
        allocation_gone=(r"srun: error: (?:Slurm job \d+ has expired|Unable to create step "
                         r"for job \d+: Job/step already completing or completed)"),
        # Flux's guide to running under Slurm: one broker per node, bootstrapped through
        # Slurm's PMI-2; each broker gets its node's CPUs (a step otherwise gets one per
        # task) and, as every step does, all of the job's GPUs. --ntasks: srun would take
        # the job's SLURM_NTASKS (its ranks) otherwise.
        starts_flux=('srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" '
                     '--ntasks-per-node=1 --cpus-per-task="$SLURM_CPUS_ON_NODE" --mpi=pmi2 '
                     'flux start'))
    retry = Retry(transient=r"slurm_load_jobs error")
    logs = JobLogs(patterns={
        Failure.NODE_FAILURE: r"NODE[ _]FAIL|DUE TO NODE FAILURE",
        Failure.WALLTIME: r"DUE TO TIME LIMIT",
        # slurmstepd: "*** JOB 12 ON n1 CANCELLED AT ... DUE TO PREEMPTION ***"
        Failure.PREEMPTED: r"DUE TO PREEMPTION",
        Failure.REQUEUED: r"DUE TO JOB REQUEUE",
        Failure.CANCELLED: r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT",
        Failure.SCHEDULER: r"Unable to create step|Unable to contact slurm controller|"
                           r"Job step creation temporarily disabled",
        # the cgroup: "...killed by the cgroup out-of-memory handler", "oom-kill event"
        Failure.OOM: r"Exceeded job memory limit",
        Failure.NOT_FOUND: r"execve\(\).*No such file",  # slurmstepd
    }, noise=r"srun|slurmstepd|salloc|sbatch")

    def misnamed_queue(self, site: Options, name: str) -> str | None:
        """A name the site lists as a QOS, given as the partition."""
        if isinstance(site, SlurmSite) and name in site.qos_names:
            return (f"{name} is a QOS, not a partition: write `qos: {name}` instead of "
                    f"`partition: {name}`")
        return None

    def directives(self, job: JobRequest) -> list[str]:
        """`#SBATCH` lines, short options where Slurm users write them."""
        d = [f"--job-name={check_token('job name', job.name)}", f"-N {job.nodes}",
             f"--ntasks-per-node={job.ranks_per_node}"]
        opts = options_of(job, SlurmOptions)
        if job.gpus_per_node:
            if opts.gpus_directive == "gpus-per-node":
                d.append(f"--gpus-per-node={job.gpus_per_node}")
            elif opts.gpus_directive == "gres":
                d.append(f"--gres=gpu:{job.gpus_per_node}")
        if job.cpus_per_task:
            d.append(f"--cpus-per-task={job.cpus_per_task}")
        d.append(f"-t {check_token('walltime', job.walltime)}")
        for flag, what, value in (("-A", "account", job.account), ("-p", "partition", job.queue),
                                  ("-q", "qos", opts.qos), ("-C", "constraint", opts.constraint)):
            if value:
                d.append(f"{flag} {check_token(what, value)}")
        if job.exclude_nodes:
            d.append("--exclude=" + ",".join(check_token("node", n) for n in job.exclude_nodes))
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
        """`12345` -> `12345`; `12345;cluster` (a federation or `-M`) -> `12345;cluster`,
        so that every later command of that job says `-M cluster`; a site wrapper's
        `Submitted batch job 12345 [on cluster x]` alike."""
        said = (stderr or stdout).strip() or "no output"
        if exit_code != 0:
            raise SubmitError(f"sbatch failed (exit {exit_code}): {said}")
        lines = [ln.strip() for ln in stdout.splitlines() if ln.strip()]
        for line in reversed(lines):
            match = _PARSABLE.match(line) or _SENTENCE.search(line)
            if match:
                return match.group(1) + (f";{match.group(2)}" if match.group(2) else "")
        raise SubmitError(
            f"sbatch exited 0, so the job is queued, but printed no job id scalestudy can "
            f"read ({said[:300]!r}); it is not submitted again: the next `scalestudy run` "
            "finds it by its name")

    @staticmethod
    def short_id(job_id: str) -> str:
        """`12345;cluster` -> `12345` (what sacct and squeue print)."""
        return job_id.split(";")[0].split(".")[0]

    def query_argvs(self, job_ids: Sequence[str]) -> list[list[str]]:
        """sacct first (accounting); squeue -t all when accounting is off; then
        `scontrol -o show job` (every job slurmctld still holds, with exit codes)."""
        ids, clusters = ",".join(self.short_id(i) for i in job_ids), _clusters(job_ids)
        return [
            ["sacct", *clusters, "-X", "-n", "-P", "-j", ids, "-o", SACCT_FIELDS],
            ["squeue", *clusters, "-h", "-t", "all", "-j", ids, "-o", "%i|%T|%r|%S"],
            ["scontrol", *clusters, "-o", "show", "job"],
        ]

    def live_argv(self, job_ids: Sequence[str]) -> list[str] | None:
        """squeue for jobs accounting says are pending or requeued: sacct keeps no pending
        reason, so a hold (`scontrol requeuehold` shows REQUEUED in sacct) shows only
        there."""
        return self.query_argvs(job_ids)[1]

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
            exit_text = parts[2] if from_sacct else ""
            reason = (parts[3] if from_sacct and len(parts) > 3 else parts[2]).strip()
            job = _job_state(job_id, raw, exit_text, reason)
            start = parts[3].strip() if not from_sacct and len(parts) > 3 else ""
            if job.state is PENDING and start[:1].isdigit():  # squeue's %S: expected
                job = replace(job, reason="; ".join(filter(None, (
                    job.reason, f"expected start {start} (squeue: the backfill plan)"))))
            if from_sacct and len(parts) > 5:
                job = replace(job, energy_j=_positive(parts[4]), elapsed_s=_positive(parts[5]))
            states[job_id] = job
        return states

    def estimate_argv(self, job: JobRequest) -> list[str] | None:
        """`sbatch --test-only` with the job's own directives: the backfill scheduler's
        plan for it, nothing queued."""
        words = [w for line in self.directives(replace(job, stdout=None, stderr=None))
                 for w in line[len(self.prefix):].split()]
        return ["sbatch", "--test-only", *words, "--wrap", "true"]

    def parse_estimate(self, exit_code: int, stdout: str, stderr: str) -> str | None:
        """`sbatch: Job 671 to start at 2026-11-26T21:39:06 using 2 processors on nodes
        n[1-2] in partition debug` -> `2026-11-26T21:39:06`."""
        found = _TEST_ONLY.search(f"{stderr}\n{stdout}") if exit_code == 0 else None
        return found.group(1) if found else None

    def parse_scontrol(self, stdout: str) -> JobState | None:
        """JobState from one line of `scontrol -o show job` (key=value pairs)."""
        fields = dict(re.findall(r"(\w+)=(\S*)", stdout))
        if "JobId" not in fields:
            return None
        return _job_state(fields["JobId"], fields.get("JobState", ""),
                          fields.get("ExitCode", ""), fields.get("Reason"))

    def cancel_argv(self, job_ids: Sequence[str]) -> list[str]:
        """`scancel [-M CLUSTER] ID...`."""
        return ["scancel", *_clusters(job_ids), *(self.short_id(i) for i in job_ids)]

    def cancel_failed(self, exit_code: int, stdout: str, stderr: str) -> str | None:
        """scancel exits 0 even when it refused ("Access/permission denied"): its error
        lines decide. A job that has ended already is no failure to cancel."""
        said = [ln.strip() for ln in f"{stderr}\n{stdout}".splitlines() if ln.strip()]
        refused = [ln for ln in said if "error" in ln.lower() and not _GONE.search(ln)]
        if refused:
            return "\n".join(refused)
        if exit_code != 0 and not any(_GONE.search(ln) for ln in said):
            return "\n".join(said) or f"exit {exit_code}"
        return None

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
        return limits.parse_sacctmgr_accounts(stdout) if exit_code == 0 else None

    def limits_argvs(self) -> list[list[str]]:
        """Every partition (hidden ones too), the nodes of each that take no job, and
        the QOSes with their limits."""
        return [["scontrol", "-a", "-o", "show", "partition"],
                ["sinfo", "-h", "-o", "%R|%T|%D"],
                ["sacctmgr", "-n", "-P", "show", "qos",
                 "format=Name,MaxWall,MaxTRESPerJob,MinTRESPerJob,MaxJobsPU,MaxSubmitPU"]]

    def parse_limits(self, argv: Sequence[str], exit_code: int, stdout: str,
                     stderr: str) -> queues.QueueAnswer | None:
        """scontrol's partitions, sinfo's node states or sacctmgr's QOSes."""
        if exit_code != 0:
            return None
        parse = {"scontrol": limits.parse_scontrol_partitions,
                 "sinfo": limits.parse_sinfo_states}.get(argv[0], limits.parse_sacctmgr_qos)
        return parse(stdout)
