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
    Exclusion,
    Failure,
    InJob,
    JobLogs,
    JobRequest,
    JobState,
    JobStatus,
    Packing,
    Retry,
    Scheduler,
    SubmitError,
    check_token,
    options_of,
    register,
)
from scalestudy.site.schedulers.pbs import codes, limits
from scalestudy.site.schedulers.pbs.options import PBSOptions

PENDING, RUNNING, COMPLETED, FAILED = (JobStatus.QUEUED, JobStatus.RUNNING,
                                       JobStatus.COMPLETED, JobStatus.FAILED)
CANCELLED, TIMEOUT, UNKNOWN = JobStatus.CANCELLED, JobStatus.TIMEOUT, JobStatus.UNKNOWN
HELD, REQUEUED = JobStatus.HELD, JobStatus.REQUEUED

# PBS Pro job_state letters (and Torque's C for completed). H and S/U are read further
# by job_state: a hold or a suspension is HELD, with what to do.
STATES = {
    "Q": PENDING, "H": HELD, "W": PENDING, "T": PENDING, "S": HELD, "U": HELD,
    "M": PENDING, "R": RUNNING, "E": RUNNING, "B": RUNNING,
    "F": COMPLETED, "X": COMPLETED, "C": COMPLETED,
}
# job substates of a finished (F) job: deleted (qdel, queued or running), ended
# normally (or never ran: an afterok child whose parent failed), failed
SUBSTATE_TERMINATED, SUBSTATE_FINISHED, SUBSTATE_FAILED = 91, 92, 93
# A job held for its dependency (qsub -W depend=...) waits; it is no hold to release.
SUBSTATE_DEPEND_HOLD = 22
# Exit codes of qstat and qdel that still answer for the other ids: an id the server
# does not know (purged from its history, or never existed), a job that has finished
# (qstat without -x, qdel), a job already exiting (qdel right after another qdel).
UNKNOWN_JOB_EXIT, FINISHED_JOB_EXIT, BAD_STATE_EXIT = 153, 35, 168
_ENDED = re.compile(r"Unknown Job Id|Job has finished|Request invalid for state of job")
_FINISHED = re.compile(r"^qstat: (\S+) Job has finished", re.M)
_JOB_ID = re.compile(r"^(\d+(?:\[\d*\])?)(\.[A-Za-z0-9_.-]+)?$")
# A job id with its server inside a site wrapper's sentence ("Job 12.pbs01 submitted").
_ID_IN_TEXT = re.compile(r"\b(\d+(?:\[\d*\])?\.[A-Za-z][A-Za-z0-9_.-]*[A-Za-z0-9])")


def short_id(job_id: str) -> str:
    """`1234.polaris-pbs-01.hsn` -> `1234` (qstat may print the id longer or shorter)."""
    return job_id.split(".")[0]


def _waiting(job_id: str, attrs: Mapping[str, Any], raw: str, torque: bool,
             comment: str | None) -> JobState:
    """A job that has not ended: queued, held, suspended, requeued or running."""
    state = STATES.get(raw, UNKNOWN)
    short = short_id(job_id)
    if raw == "U" and torque:  # Slurm's qstat wrapper: a Slurm state it has no letter for
        return JobState(job_id, COMPLETED, raw, None, "Slurm's qstat wrapper says U: the job "
                        "ended in a state it has no letter for (NODE_FAIL, OUT_OF_MEMORY, "
                        "PREEMPTED, ...); its run directory says how; `sacct -j "
                        f"{short}` says why")
    if raw == "H":
        types = str(attrs.get("Hold_Types", "")).strip()
        if _int(attrs.get("substate")) == SUBSTATE_DEPEND_HOLD or (
                attrs.get("depend") and types in ("", "n", "s") and not comment):
            return JobState(job_id, PENDING, raw, None,
                            f"waiting for its dependency ({attrs.get('depend') or 'depend'})")
        held = next((codes.HOLDS[t] for t in "sopu" if t in types), None) or (
            "held (Hold_Types {types}): `qrls {id}` releases a user hold")
        said = f" ({comment})" if comment else ""
        text = held.format(id=short, comment=said, types=types or "?")
        return JobState(job_id, HELD, raw, None, text if "{comment}" in held or not comment
                        else f"{text}; {comment}")
    if raw in ("S", "U"):
        why = ("suspended (preempted by suspension, or `qsig -s suspend`): it resumes when "
               "the scheduler or an operator resumes it") if raw == "S" else (
               "suspended while its node's owner uses it (cycle harvesting, U)")
        return JobState(job_id, HELD, raw, None, why + (f"; {comment}" if comment else ""))
    runs = _int(attrs.get("run_count")) or 0
    if state is PENDING and runs > 0:  # a requeued job keeps its stale Exit_status
        stale = _int(attrs.get("Exit_status", attrs.get("exit_status")))
        meaning = (codes.TORQUE_EXITS if torque else codes.PBSPRO_EXITS).get(stale or 0)
        why = f"; its last start ended with {stale} ({meaning[1]})" if meaning else ""
        return JobState(job_id, REQUEUED, raw, None,
                        f"requeued by the server after {runs} start(s){why}"
                        + (f"; {comment}" if comment else ""))
    start = _estimated_start(attrs) if state is PENDING else None
    if start:
        comment = "; ".join(filter(None, (comment, f"expected start {start} (the server's "
                                                   "estimated.start_time)")))
    return JobState(job_id, state, raw, None, comment)


def _estimated_start(attrs: Mapping[str, Any]) -> str | None:
    """The start the server's scheduler expects for a queued job, where it computes one
    (PBS Pro's `estimated.start_time`: `qstat -f` text, or `qstat -F json`'s nested
    `estimated` object)."""
    nested = attrs.get("estimated")
    value = nested.get("start_time") if isinstance(nested, Mapping) else \
        attrs.get("estimated.start_time")
    return _text(value) or None


def job_state(job_id: str, attrs: Mapping[str, Any], torque: bool = False) -> JobState:
    """One job's state from its attributes (`qstat -F json` values or `qstat -f` text;
    `torque`: the Torque dialect, whose negative exit codes differ from PBS Pro's)."""
    raw = str(attrs.get("job_state", "")).strip()
    torque = torque or raw == "C" or "exit_status" in attrs
    comment = _text(attrs.get("comment")) or None
    if not STATES.get(raw, UNKNOWN).done:
        return _waiting(job_id, attrs, raw, torque, comment)
    state = COMPLETED
    exit_status = _int(attrs.get("Exit_status", attrs.get("exit_status")))
    substate = _int(attrs.get("substate"))
    text, reason, failure = (comment or "").lower(), comment, None
    exceeded = codes.COMMENT_EXCEEDED.search(text)
    code_of_comment = codes.EXCEEDED[exceeded.group(1)] if exceeded and not torque else None
    known = (codes.TORQUE_EXITS if torque else codes.PBSPRO_EXITS).get(
        exit_status if exit_status is not None and exit_status < 0 else code_of_comment or 0)
    limit = codes.at_limit(attrs) if exit_status in codes.KILLED else None
    if known is not None:
        failure = known[0]
        state = TIMEOUT if failure is Failure.WALLTIME else FAILED
    elif limit is not None:  # the kernel's RLIMIT_CPU/RLIMIT_AS on a one-node job
        state, failure, reason = FAILED, limit[0], limit[1] + (f"; {comment}" if comment else "")
    # qdel: substate 91, and "... and terminated by user@host" when it ran (Exit_status
    # 271 = 256 + SIGTERM); Torque wrappers say "deleted"
    elif substate == SUBSTATE_TERMINATED or "terminated by" in text \
            or "deleted" in text or "qdel" in text:
        state, failure = CANCELLED, Failure.CANCELLED
    elif exit_status is None and raw == "F":  # ended without running (substate 92)
        state, failure = CANCELLED, Failure.CANCELLED
        after = str(attrs.get("depend", "")).startswith("after")
        reason = "never ran" + (": its dependency failed" if after else "") + (
            f"; {comment}" if comment else "")
    # an array whose sub-job failed: substate 93, "... and failed", Exit_status 0
    elif substate == SUBSTATE_FAILED or exit_status not in (None, 0):
        state = FAILED
    elif exit_status is None and raw == "C":
        reason = "ended; the scheduler does not say how (no exit status): its run " \
                 "directory does" + (f"; {comment}" if comment else "")
    code = exit_status
    if known is not None:
        number = exit_status if exit_status is not None and exit_status < 0 else code_of_comment
        reason = f"PBS exit status {number} ({known[1]})" + (f"; {comment}" if comment else "")
        code = exit_status
    elif code is not None and code > 256:
        code = 128 + (code - 256)  # PBS Pro and Torque: 256 + signal -> 128 + signal
    return JobState(job_id, state, raw, code, reason, failure=failure)


def _int(value: object) -> int | None:
    """A number qstat printed as a JSON number or as text (versions differ)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    text = str(value).strip() if value is not None else ""
    return int(text) if text.lstrip("-").isdigit() else None


def _text(value: object) -> str | None:
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
    options = PBSOptions
    queue_key = "queue"
    launchers = frozenset({"mpiexec", "mpirun"})  # PALS or MPICH; Open MPI reads PBS (TM)
    in_job = InJob(hostfile='"$PBS_NODEFILE"', job_id_variable="PBS_JOBID",
                   env_prefixes=("PBS_",))
    # A packed allocation's node file: PBS_NODEFILE, one line per rank slot.
    packing = Packing(nodes_command='cat "$PBS_NODEFILE"')
    retry = Retry(
        # The server refused the connection or the request (pbs_iff: no credential; busy).
        transient=r"server is busy|cannot connect to server|pbs_iff|Server shutting down|"
                  r"Batch protocol error|No free connections",
        # qsub queued nothing: the server refused the connection or the request (shutting
        # down; out of connections). "Batch protocol error" may come after the job was
        # committed, so it is not among them.
        not_queued=r"cannot connect to server|Server shutting down|No free connections",
        # After an unclean restart pbs_server's job counter (saved every 1000 jobs) may be
        # behind numbers its history holds: each qsub is refused (exit 161) and uses one
        # up, 39 in a row on the testbed (dev/pbs-testbed.md).
        number_taken=r"Job with requested ID already exists")
    logs = JobLogs(name="pbs.log", joins_output=True, patterns={
        # the MoM: "=>> PBS: job killed: node 1 (n12) requested job terminate, 'EOF' ...
        # received SISTER_EOF attempting to communicate with sister MOM's"
        Failure.NODE_FAILURE: r"requested job (?:terminate|die)|SISTER_EOF",
        Failure.WALLTIME: r"walltime \S* ?exceeded|exceeded (?:resource )?walltime|"
                          r"job killed: walltime",
        Failure.CANCELLED: r"job deleted by|qdel",
        Failure.SCHEDULER: r"pbs_tmrsh|tm_init failed|cannot connect to server",
        Failure.OOM: r"job killed: v?mem\b",
        # "=>> PBS: job killed: cput 61 exceeded limit 60"
        Failure.RESOURCE_LIMIT: r"job killed: (?:cput|ncpus)\b",
    }, noise=r"=>> PBS")

    #: PBS Pro's select has no "not on this host" (its node_filter design was never
    #: built): with `job.exclude_nodes`, qsub gets `-l select` naming a host per chunk,
    #: chosen from pbsnodes' up hosts outside the list (it overrides the script's).
    exclusion = Exclusion(hosts_argv=("pbsnodes", "-a", "-F", "json"))

    @staticmethod
    def _terms(job: JobRequest) -> list[str]:
        """A chunk's resources (after its count): ncpus, ngpus, mpiprocs, the profile's."""
        terms, opts = [], options_of(job, PBSOptions)
        if opts.gpus_directive != "none":  # sites that schedule below whole nodes
            terms.append(f"ncpus={job.cores_per_node or job.ranks_per_node}")
            if job.gpus_per_node:
                terms.append(f"ngpus={job.gpus_per_node}")
            terms.append(f"mpiprocs={job.ranks_per_node}")
        for key, value in opts.select_terms.items():
            terms.append(f"{check_token('select term', key)}={check_token('select term', value)}")
        return terms

    def directives(self, job: JobRequest) -> list[str]:
        """`#PBS` lines: name, select chunk, place, walltime, filesystems, account, queue."""
        chunk = [str(job.nodes), *self._terms(job)]
        d = [f"-N {check_token('job name', job.name)[:236]}", f"-l select={':'.join(chunk)}"]
        opts = options_of(job, PBSOptions)
        if opts.place:
            d.append(f"-l place={check_token('place', opts.place)}")
        d.append(f"-l walltime={check_token('walltime', job.walltime)}")
        if opts.filesystems:
            d.append(f"-l filesystems={check_token('filesystems', opts.filesystems)}")
        if job.account:
            d.append(f"-A {check_token('account', job.account)}")
        if job.queue:
            d.append(f"-q {check_token('queue', job.queue)}")
        d += ["-j oe", "-k doe"]
        if job.stdout:
            d.append(f"-o {check_token('output file', job.stdout)}")
        d.extend(job.extra)
        lines = [f"{self.prefix} {line}" for line in d]
        if job.exclude_nodes:  # a comment: PBS reads on past it
            hosts = ",".join(check_token("node", n) for n in job.exclude_nodes)
            lines.append(f"# scalestudy: not on {hosts}: qsub is given -l select with a "
                         "host per chunk, chosen outside these when it is submitted")
        return lines

    def parse_hosts(self, stdout: str) -> list[str]:
        """`pbsnodes -a -F json`: the hosts whose state is free (first) or job-busy or
        job-exclusive (they take a job later), each once; down, offline and unknown ones
        never."""
        try:
            nodes = json.loads(stdout).get("nodes", {})
        except (ValueError, AttributeError) as exc:
            raise SubmitError(f"pbsnodes -a -F json printed no node list: {exc}") from None
        order: dict[str, int] = {}
        for name, node in sorted(nodes.items()):
            states = set(str(node.get("state", "")).split(","))
            if states & {"down", "offline", "unknown", "state-unknown", "stale"}:
                continue
            host = str((node.get("resources_available") or {}).get("host") or name)
            rank = 0 if states == {"free"} else 1
            order[host] = min(rank, order.get(host, rank))
        return sorted(order, key=lambda h: (order[h], h))

    def on_hosts(self, job: JobRequest, hosts: Sequence[str]) -> list[str]:
        """`-l select=1:TERMS:host=A+1:TERMS:host=B...`, one chunk per host."""
        terms = ":".join(self._terms(job))
        chunks = [f"1{':' + terms if terms else ''}:host={check_token('node', h)}"
                  for h in hosts]
        return ["-l", "select=" + "+".join(chunks)]

    def submit_argv(self, script: str, extra: Sequence[str] | None = None) -> list[str]:
        """`qsub -f SCRIPT`: in the foreground. Without -f, PBS Pro's qsub forks a
        background daemon that keeps every file it inherited open for minutes, the study
        lock included, so a `run` killed mid-submission would leave the study locked.
        Torque-style qsub (Slurm's wrappers) has no -f: their profiles set
        `submit_args: []`."""
        return ["qsub", *(["-f"] if extra is None else extra), script]

    def query_argvs(self, job_ids: Sequence[str]) -> list[list[str]]:
        """PBS Pro's JSON (finished jobs too, with -x); its text form with -x where the
        JSON is not JSON (OpenPBS escapes no control characters in values); plain
        `qstat -f` (Torque-style qstat, whose -x means XML) last."""
        return [["qstat", "-x", "-f", "-F", "json", *job_ids], ["qstat", "-x", "-f", *job_ids],
                ["qstat", "-f", *job_ids]]

    def parse_states(self, argv: Sequence[str], exit_code: int, stdout: str,
                     stderr: str) -> dict[str, JobState]:
        """Job id (short form) -> state, from JSON or from `qstat -f` text. qstat still
        answers for the other ids when one is unknown (exit 153: purged from the
        history, or never queued) or, without -x, finished (exit 35, stdout empty): such
        a job's state is "finished", how it ended is the run directory's to say. Slurm's
        qstat wrapper exits 153 without a word when it knows none of the ids."""
        said = [ln for ln in stderr.splitlines() if ln.strip()]
        answered = exit_code in (UNKNOWN_JOB_EXIT, FINISHED_JOB_EXIT) and (
            bool(said) or bool(stdout.strip()) or exit_code == UNKNOWN_JOB_EXIT) and all(
            _ENDED.search(ln) for ln in said)
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

    def parse_submit(self, exit_code: int, stdout: str, stderr: str) -> str:
        """`1234.server` (PBS Pro) or a bare `1234` (Torque wrappers) -> the id as
        printed; a site wrapper's sentence around it ("Job 1234.server submitted") too."""
        said = (stderr or stdout).strip() or "no output"
        if exit_code != 0:
            raise SubmitError(f"qsub failed (exit {exit_code}): {said}")
        lines = [ln.strip() for ln in stdout.strip().splitlines() if ln.strip()]
        if lines and _JOB_ID.match(lines[-1]):
            return lines[-1]
        found = [m.group(1) for line in lines for m in _ID_IN_TEXT.finditer(line)]
        if found:
            return found[-1]
        raise SubmitError(
            f"qsub exited 0, so the job is queued, but printed no job id scalestudy can "
            f"read ({said[:300]!r}); it is not submitted again: the next `scalestudy run` "
            "finds it by its name")

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
        """`qstat -f` blocks; output without one (Torque's `-x` prints XML) is no answer.
        Attributes indented with a TAB are Slurm's Torque-style wrapper's."""
        states = {}
        torque = bool(re.search(r"^\t\S", stdout, re.M)) and not re.search(
            r"^    \S", stdout, re.M)
        for block in re.split(r"^(?=Job Id:)", _unwrap(stdout), flags=re.M):
            head = re.match(r"Job Id:\s*(\S+)", block)
            if head:
                attrs = dict(re.findall(r"^\s+([\w.]+) = (.*)$", block, flags=re.M))
                states[short_id(head.group(1))] = job_state(head.group(1), attrs, torque)
        if not states:
            raise SubmitError(f"qstat printed no `Job Id:` block: {stdout.strip()[:200]!r}")
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
                return limits.parse_qmgr_queues(stdout)
            return (limits.parse_qstat_server if "-B" in argv else limits.parse_qstat_queues)(
                stdout)
        except ValueError:  # not JSON: a qstat without -F json
            return None
