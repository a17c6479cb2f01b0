"""The Flux engine of a packed allocation: a Flux instance nested in the Slurm job runs
each step as a Flux job, and Flux schedules them onto the nodes that are free.

The allocation's job script starts one Flux broker per node (`srun ... flux start`) with
this engine as the instance's first program: `python -m scalestudy.execute.allocation
DIR JOB_ID` with `"engine": "flux"` in DIR/allocation.json (execute.packing.engines).
Each step's script is the run's own Flux job script (templates/flux.sh.j2: `# flux:`
directives for its nodes, its time limit and its log, `flux run` to start its ranks).
The engine submits them all, in the allocation's order, with `flux batch`; Flux starts
each as soon as its nodes are free (first come, first served), kills one at its own
time limit, and says how each ended. The engine writes what Flux reports to
DIR/steps.jsonl, as the step runner does (execute.packing.runner): `started` once Flux
says the job runs (with its nodes and the time Flux started it), `ended` once it is
inactive (its return code; `timed_out` when Flux's time limit took it; `why` when Flux
could never start it). The submitting side reads nothing else. The standard library
alone, like the step runner.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from scalestudy.core.values import JSONObject, member
from scalestudy.execute.packing import allocfile
from scalestudy.execute.packing.allocfile import AllocationStep
from scalestudy.execute.packing.steplog import POLL_S, Event, StepEvent, append, ended_runs, now
from scalestudy.workload.env import expand_hostlist

#: Seconds a step cancelled by nobody here waits before it counts as ended: the
#: allocation's own end, which cancels it, signals the engine within them.
CUT_OFF_S = 2.0
#: Every id in the ASCII spelling (`f6q9bC2j`), whatever the locale.
ENV = {"FLUX_F58_FORCE_ASCII": "1"}


def expand(nodelist: str) -> list[str]:
    """`node[0-1],n4` -> ["node0", "node1", "n4"] (Flux's RFC 29 host list, the syntax
    of Slurm's, which the workload's rank discovery already reads)."""
    return expand_hostlist(nodelist)


def _at(stamp: object) -> str:
    """A Flux timestamp (seconds since the epoch) as the journal writes times."""
    if isinstance(stamp, (int, float)):
        return datetime.fromtimestamp(stamp, timezone.utc).isoformat(timespec="seconds")
    return now()


def _records(text: str) -> Iterator[JSONObject]:
    """Job records of `flux jobs --json` (one object for one id, else {"jobs": [...]})."""
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError:
        return
    jobs = data.get("jobs") if isinstance(data, dict) else None
    yield from (j for j in (jobs if isinstance(jobs, list) else [data]) if isinstance(j, dict)
                and "id" in j)


class FluxEngine:
    """Submits the allocation's steps to the nested Flux instance and journals them."""

    def __init__(self, directory: Path, job_id: str) -> None:
        self.dir = directory
        self.job_id = job_id
        spec = allocfile.read(directory)
        self.steps: list[AllocationStep] = spec["steps"]
        # One line per node, kept as they are: the nodes of a test instance may all
        # carry the machine's one host name (Flux tells its nodes apart by rank).
        nodefile = (directory / "nodefile").read_text(encoding="utf-8").splitlines()
        self.hosts = [line.split()[0] for line in nodefile if line.strip()]
        self.journal = directory / "steps.jsonl"
        self.ids: dict[str, str] = {}  # Flux job id -> run id, while it has not ended
        self.started: set[str] = set()

    def flux(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`flux ARGS` in the nested instance (FLUX_URI is its own)."""
        return subprocess.run(["flux", *args], capture_output=True, text=True, timeout=120,
                              env={**os.environ, **ENV}, stdin=subprocess.DEVNULL)

    def submit(self, step: AllocationStep) -> None:
        """Queue one step in the instance; a refusal ends it with Flux's words."""
        done = self.flux("batch", step["script"])
        job = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        if done.returncode != 0 or not job:
            said = (done.stderr or done.stdout).strip().splitlines()
            append(self.journal, StepEvent(
                Event.ENDED, now(), step["run_id"], rc=2,
                why=f"flux batch refused it: {said[-1] if said else ''}"))
            return
        self.ids[job] = step["run_id"]

    def poll(self) -> None:
        """Journal what Flux says of the steps that have not ended yet."""
        if not self.ids:
            return
        done = self.flux("jobs", "--json", *self.ids)
        for job in _records(done.stdout):
            flux_id = str(job.get("jobid") or job.get("id"))
            run_id = self.ids.get(flux_id)
            if run_id is None:
                continue
            state = job.get("state")
            if state in ("RUN", "CLEANUP", "INACTIVE") and run_id not in self.started \
                    and "t_run" in job:
                self.started.add(run_id)
                append(self.journal, StepEvent(
                    Event.STARTED, _at(job.get("t_run")), run_id,
                    tuple(expand(str(job.get("nodelist") or ""))),
                    extra={"flux_id": flux_id}))
            if state == "INACTIVE":
                if job.get("result") == "CANCELED":
                    # nobody here cancels a step: the allocation's end is what does, and
                    # its signal is a moment behind (the step is then cut off, not ended)
                    time.sleep(CUT_OFF_S)
                del self.ids[flux_id]
                append(self.journal, self._ended(run_id, job))

    @staticmethod
    def _ended(run_id: str, job: JSONObject) -> StepEvent:
        """The `ended` event of a job Flux says is inactive."""
        code = job.get("returncode")
        rc = code if isinstance(code, int) and code >= 0 else 128 + signal.SIGTERM
        exception = member(job, "exception")
        why = None
        if "t_run" not in job and exception.get("occurred"):  # never started
            why = (f"Flux could not start it ({exception.get('type')}: "
                   f"{exception.get('note') or ''})")
        return StepEvent(Event.ENDED, _at(job.get("t_inactive")), run_id, rc=rc,
                         timed_out=job.get("result") == "TIMEOUT", why=why,
                         extra={"flux_result": job.get("result")})

    def stop(self, signum: int, _frame: object) -> None:
        """The allocation is ending: cancel every step (each is cut off, not ended)."""
        if self.ids:
            self.flux("cancel", *self.ids)
        os._exit(128 + signum)

    def run(self) -> int:
        """Every step not ended yet, submitted in order; 0 once all have ended."""
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGHUP):
            signal.signal(signum, self.stop)
        append(self.journal, StepEvent(Event.ALLOCATION, now(), hosts=tuple(self.hosts),
                                       job_id=self.job_id, extra={"engine": "flux"}))
        done = ended_runs(self.journal)
        for step in self.steps:
            if step["run_id"] in done:
                continue
            if step["nodes"] > len(self.hosts):
                append(self.journal, StepEvent(
                    Event.ENDED, now(), step["run_id"], rc=2,
                    why=f"needs {step['nodes']} nodes, the allocation has {len(self.hosts)}"))
                continue
            self.submit(step)
        while self.ids:
            time.sleep(POLL_S)
            self.poll()
        append(self.journal, StepEvent(Event.DONE, now()))
        return 0
