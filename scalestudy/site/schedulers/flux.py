"""Flux (flux-core): `# flux:` directives, `flux batch`, `flux jobs --json`, `flux cancel`.

Flux is LLNL's workload manager (El Capitan and its sister systems), and what runs
inside a Slurm or PBS allocation as a nested instance. scalestudy drives it through the
`flux` command with JSON output, not through its Python bindings: the bindings are
built for the one CPython that built Flux (a site's system Python, rarely the one a
study's venv has), while the command is on every Flux system's PATH and its JSON keys
are stable (RFC 27/RFC 33). What each answer looks like, measured on flux-core 0.88.0,
is in dev/flux-notes.md; the recorded outputs are in tests/data/flux.

The outcome of an ended job is read from its `result` and `exception.type`, never from
its return code alone: a cancelled job's return code was 143 once and 1 another time,
and a job cancelled before it started has -128.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pydantic import Field

from scalestudy.core.spec import Token, walltime_seconds
from scalestudy.site import queues
from scalestudy.site.schedulers import (
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
    register,
)

PENDING, RUNNING, COMPLETED, FAILED = (JobStatus.QUEUED, JobStatus.RUNNING,
                                       JobStatus.COMPLETED, JobStatus.FAILED)
CANCELLED, TIMEOUT, HELD = JobStatus.CANCELLED, JobStatus.TIMEOUT, JobStatus.HELD

# RFC 21 job states while a job is active -> ours (INACTIVE: its `result` decides).
ACTIVE = {"NEW": PENDING, "DEPEND": PENDING, "PRIORITY": PENDING, "SCHED": PENDING,
          "RUN": RUNNING, "CLEANUP": RUNNING}
# Exception types of a job that ended with one (the job manager's and the exec
# system's words) -> the class, the state, and what it means for the run.
EXCEPTIONS: dict[str, tuple[Failure, JobStatus, str]] = {
    "timeout": (Failure.WALLTIME, TIMEOUT, "killed at its time limit"),
    "cancel": (Failure.CANCELLED, CANCELLED, "cancelled (flux cancel)"),
    "exec": (Failure.NOT_FOUND, FAILED, "Flux could not start the job's program"),
    "alloc": (Failure.SCHEDULER, FAILED, "Flux can never give the job what it asks for: "
              "ask for fewer nodes, or for a queue whose nodes have it"),
    "dependency": (Failure.SCHEDULER, CANCELLED, "never ran: its dependency can never be met"),
    "node-failure": (Failure.NODE_FAILURE, FAILED, "a node of the job was lost"),
    "lost-node": (Failure.NODE_FAILURE, FAILED, "a node of the job was lost"),
    "preempt": (Failure.PREEMPTED, JobStatus.PREEMPTED, "preempted: the site took its nodes "
                "for another job; run it again, nothing is wrong with the run"),
}
# A job id as Flux prints it: f58 (with `ƒ` in a UTF-8 locale, `f` in ASCII), decimal,
# dothex (`0000.0033.0000.0000`) or words; only the first two come from our commands.
_F58 = re.compile(r"^[ƒf]([1-9A-HJ-NP-Za-km-z]+)$")
_UNKNOWN = re.compile(r"^JobID \S+ unknown$|unknown job id|job is inactive")
# The fields `flux queue list` prints for preflight, `|`-separated (seconds; inf: none).
QUEUE_FIELDS = ("{queue}|{queuem}|{enabled.ascii}|{started.ascii}|{defaults.timelimit}|"
                "{limits.timelimit}|{limits.min.nnodes}|{limits.max.nnodes}")


def ascii_id(job_id: str) -> str:
    """`ƒ6q9bC2j` -> `f6q9bC2j`: the f58 id in the spelling every locale can print and
    every `flux` command reads; other spellings pass through unchanged."""
    text = job_id.strip()
    match = _F58.match(text)
    return f"f{match.group(1)}" if match else text


def _jobs(data: Any) -> Iterator[Mapping[str, Any]]:
    """The job records of a `flux jobs --json` answer: one object for one id, else
    `{"jobs": [...]}`."""
    if isinstance(data, Mapping) and isinstance(data.get("jobs"), list):
        yield from (job for job in data["jobs"] if isinstance(job, Mapping))
    elif isinstance(data, Mapping) and "id" in data:
        yield data


def job_state(job: Mapping[str, Any]) -> JobState:
    """One job's state from its `flux jobs --json` record."""
    job_id = ascii_id(str(job.get("jobid") or job.get("id")))
    raw = str(job.get("state", ""))
    exception = job.get("exception") or {}
    kind = str(exception.get("type") or "") if exception.get("occurred") else ""
    note = str(exception.get("note") or "").strip()
    if raw != "INACTIVE":
        state = ACTIVE.get(raw, JobStatus.UNKNOWN)
        if raw == "SCHED" and job.get("urgency") == 0:
            return JobState(job_id, HELD, raw, None,
                            f"held (urgency 0): `flux job urgency {job_id} default` releases it")
        if raw == "DEPEND":
            after = ", ".join(map(str, job.get("dependencies") or [])) or "a dependency"
            return JobState(job_id, PENDING, raw, None, f"waiting for its dependency ({after})")
        return JobState(job_id, state, raw, None, None)
    result = str(job.get("result", ""))
    code = job.get("returncode")
    code = code if isinstance(code, int) and not isinstance(code, bool) else None
    raw = f"INACTIVE/{result}" + (f"/{kind}" if kind else "")
    if result == "COMPLETED":
        return JobState(job_id, COMPLETED, raw, code if code is not None else 0, None)
    if kind in EXCEPTIONS:
        failure, state, meaning = EXCEPTIONS[kind]
        if kind == "cancel" and code is not None and code < 0:
            meaning = "cancelled before it started (flux cancel)"
        reason: str | None = meaning + (f": {note}" if note else "")
        # A cancel or a time limit kills the job's shell with a signal; its number is
        # Flux's, not the program's: the run's own exit_code file says more.
        return JobState(job_id, state, raw, code if code is None or code >= 0 else None,
                        reason, failure=failure, signalled=bool(code and code > 128))
    if result == "TIMEOUT":
        return JobState(job_id, TIMEOUT, raw, code, "killed at its time limit",
                        failure=Failure.WALLTIME)
    if result == "CANCELED":
        return JobState(job_id, CANCELLED, raw, None, "cancelled", failure=Failure.CANCELLED)
    reason = f"{kind}: {note}" if kind else None
    return JobState(job_id, FAILED, raw, code, reason, signalled=bool(code and code > 128))


class FluxOptions(Options):
    """`job.flux:` (over the profile's `scheduler_options.queue`)."""

    queue: Token | list[Token] | None = Field(
        default=None, description="queue (--queue); several: each run goes to the first "
        "whose documented limits take its node count and walltime")


#: The job's hosts, one per line (the job script's, and a packed allocation's node file).
_NODES = "flux hostlist --expand --delimiter='\\n' local"
#: The broker's socket is gone or refuses (its instance restarting).
_GONE = r"Unable to connect to Flux: (?:broker socket .* was not found|Connection refused)"


@register
class Flux(Scheduler):
    """Flux (flux batch/jobs/cancel), as on LLNL's El Capitan."""

    name = "flux"
    prefix = "# flux:"
    template = "flux.sh.j2"
    options = FluxOptions
    queue_key = "queue"
    launchers = frozenset({"flux"})
    exclusion = Exclusion()  # --requires=-host:
    in_job = InJob(nodes_command=_NODES, job_id_variable="FLUX_ENCLOSING_ID",
                   env_prefixes=("FLUX_",))
    # A batch job is a Flux instance of its own: a packed allocation's steps are Flux
    # jobs in it (engine flux), no step runner handing out nodes.
    packing = Packing(nodes_command=_NODES, job_is_flux_instance=True)
    # The broker's socket is gone or refuses (its instance restarting).
    retry = Retry(transient=_GONE, not_queued=_GONE)
    # What `flux run` (the job's shell) writes when its job ends otherwise than well.
    logs = JobLogs(name="flux.log", joins_output=True, patterns={
        Failure.WALLTIME: r"job\.exception \S+ type=timeout",
        Failure.CANCELLED: r"job\.exception \S+ type=cancel",
        Failure.SCHEDULER: r"Unable to connect to Flux|job\.exception \S+ type=alloc",
        Failure.NOT_FOUND: r"start failed: .*No such file or directory",
    })

    def directives(self, job: JobRequest) -> list[str]:
        """`# flux:` lines (RFC 36): whole nodes (`-N` alone is node-exclusive), the time
        limit in seconds, the job's log; values are shell-quoted, as flux batch reads
        them with shell rules. All before the script's first command, one sentinel."""
        seconds = walltime_seconds(check_token("walltime", job.walltime))
        d = [f"--job-name={shlex.quote(check_token('job name', job.name))}",
             f"--nodes={job.nodes}", "--exclusive", f"--time-limit={seconds}s"]
        if job.queue:
            d.append(f"--queue={shlex.quote(check_token('queue', job.queue))}")
        if job.account:  # flux-accounting's bank
            d.append(f"--bank={shlex.quote(check_token('account', job.account))}")
        if job.exclude_nodes:  # an RFC 35 constraint: not on these hosts
            hosts = ",".join(check_token("node", n) for n in job.exclude_nodes)
            d.append(f"--requires={shlex.quote('-host:' + hosts)}")
        if job.stdout:  # always: Flux's default log name has a non-ASCII `ƒ`
            d.append(f"--output={shlex.quote(job.stdout)}")
        d.extend(job.extra)
        return [f"{self.prefix} {line}" for line in d]

    def submit_argv(self, script: str, extra: Sequence[str] | None = None) -> list[str]:
        """`flux batch [EXTRA] SCRIPT` (the directives say the size, time and log)."""
        return ["flux", "batch", *(extra or ()), script]

    def parse_submit(self, exit_code: int, stdout: str, stderr: str) -> str:
        """The job id flux batch prints (f58), in its ASCII spelling."""
        said = (stderr or stdout).strip() or "no output"
        if exit_code != 0:
            raise SubmitError(f"flux batch failed (exit {exit_code}): {said[:600]}")
        for line in reversed([ln.strip() for ln in stdout.splitlines() if ln.strip()]):
            if _F58.match(line) or line.isdigit():
                return ascii_id(line)
        raise SubmitError(
            f"flux batch exited 0, so the job is queued, but printed no job id scalestudy "
            f"can read ({said[:300]!r}); it is not submitted again: the next `scalestudy "
            "run` finds it by its name")

    @staticmethod
    def short_id(job_id: str) -> str:
        """The ASCII f58 id (what our queries print back)."""
        return ascii_id(job_id)

    def query_argvs(self, job_ids: Sequence[str]) -> list[list[str]]:
        """`flux jobs --json ID...` (ended jobs too, while the instance keeps them)."""
        return [["flux", "jobs", "--json", *(ascii_id(i) for i in job_ids)]]

    def parse_states(self, argv: Sequence[str], exit_code: int, stdout: str,
                     stderr: str) -> dict[str, JobState]:
        """Job id -> state. An id Flux no longer knows (purged, or never queued) gets a
        `JobID X unknown` line and no record; the exit is 1 only when no id was known."""
        said = [ln for ln in stderr.splitlines() if ln.strip()]
        if exit_code != 0 and not (exit_code == 1 and said and all(
                _UNKNOWN.search(ln) for ln in said)):
            raise SubmitError(f"flux jobs: exit {exit_code}: {(stderr or stdout).strip()[:300]}")
        if not stdout.strip():
            return {}
        try:
            data = json.loads(stdout)
        except ValueError as exc:
            raise SubmitError(f"flux jobs --json printed something that is not JSON: "
                              f"{exc}") from None
        return {state.job_id: state for state in map(job_state, _jobs(data))}

    def refused(self, exit_code: int, stdout: str, stderr: str) -> str | None:
        """A Flux instance accepts only the user who started it (or its guests, on a
        system instance): anyone else's command ends `Unable to connect to Flux:
        Operation not permitted`, and so would `flux batch`."""
        said = stderr or stdout
        if exit_code != 0 and "Operation not permitted" in said:
            line = next(ln.strip() for ln in said.splitlines() if "not permitted" in ln)
            return (f"the Flux instance at $FLUX_URI does not accept this user ({line}): it "
                    "belongs to someone else. Run scalestudy inside your own allocation "
                    "(`flux alloc`, or the system instance), or point FLUX_URI at an instance "
                    "you started")
        return None

    def cancel_argv(self, job_ids: Sequence[str]) -> list[str]:
        """`flux cancel ID...`."""
        return ["flux", "cancel", *(ascii_id(i) for i in job_ids)]

    def cancel_failed(self, exit_code: int, stdout: str, stderr: str) -> str | None:
        """flux cancel exits 1 when a job named had ended ("job is inactive") or is not
        known (purged): the others are cancelled, and neither is a failure to cancel."""
        if exit_code == 0:
            return None
        said = [ln for ln in (stderr or stdout).splitlines() if ln.strip()]
        left = [ln for ln in said if not _UNKNOWN.search(ln)]
        return None if exit_code == 1 and not left else "\n".join(left) or f"exit {exit_code}"

    def find_argvs(self, names: Sequence[str]) -> list[list[str]]:
        """`flux jobs -a -c 0 --name=NAME --json` per name: every job of this user with
        that name, ended ones too (one name per command: flux keeps only the last)."""
        return [["flux", "jobs", "-a", "-c", "0", f"--name={name}", "--json"]
                for name in names]

    def parse_found(self, argv: Sequence[str], stdout: str) -> dict[str, set[str]]:
        """Job name -> the ids of one `find_argvs` answer."""
        try:
            data = json.loads(stdout) if stdout.strip() else {}
        except ValueError:
            return {}
        found: dict[str, set[str]] = {}
        for job in _jobs(data):
            found.setdefault(str(job.get("name")), set()).add(
                ascii_id(str(job.get("jobid") or job.get("id"))))
        return found

    def needed_commands(self) -> tuple[str, ...]:
        """One command does it all."""
        return ("flux",)

    def limits_argvs(self) -> list[list[str]]:
        """The queues with their limits, the default marked (`flux queue list`); an
        instance without named queues answers with none."""
        return [["flux", "queue", "list", "-n", "-o", QUEUE_FIELDS]]

    def parse_limits(self, argv: Sequence[str], exit_code: int, stdout: str,
                     stderr: str) -> queues.QueueAnswer | None:
        """`flux queue list` fields -> the queues' limits."""
        if exit_code != 0:
            return None
        return parse_queue_list(stdout)


def _seconds(text: str) -> int | None:
    """`3600.0` -> 3600; `inf` or 0 (no limit) -> None."""
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if 0 < value < float("inf") else None


def parse_queue_list(stdout: str) -> queues.QueueAnswer:
    """`flux queue list -n -o QUEUE_FIELDS` -> limits of each queue, the default one
    (marked `*`), and why a queue takes or runs no job (disabled, stopped)."""
    answer = queues.QueueAnswer()
    for line in stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 8:  # more fields (ncores, ngpus) are read no further
            continue
        name, marked, enabled, started, _default, limit, low, high = parts[:8]
        closed = ("submission is disabled (`flux queue status`)" if enabled != "y" else
                  "scheduling is stopped: jobs are accepted but none starts "
                  "(`flux queue status`)" if started != "y" else None)
        answer.queues[name] = queues.QueueLimits(
            name=name, source="flux queue list",
            min_nodes=int(low) if low.isdigit() and int(low) > 0 else None,
            max_nodes=int(high) if high.isdigit() else None,
            max_walltime_s=_seconds(limit), closed=closed)
        if marked.endswith("*"):
            answer.default = name
    return answer
