"""The step runner inside a packed allocation: starts each run's step script on nodes of
its own as they free up, journals every step before it starts and when it ends, stops a
step at its own time limit, and stops them all when the allocation is ending.

Run by the allocation's job script as `python -m scalestudy.execute.allocation DIR
JOB_ID` (engine "steps" of execute.packing.engines), on the allocation's first node, with
the standard library alone. DIR (on the shared filesystem) holds `allocation.json`
(written by execute.packing.allocations) and `nodefile` (the allocation's nodes, one
line per node or per rank slot); the runner appends to DIR/steps.jsonl (steplog), one
fsynced JSON line per event:

    {"event": "allocation", "at", "hosts", "job_id"}           the runner started
    {"event": "started", "run_id", "at", "hosts", "port"}      before a step starts
    {"event": "ended", "run_id", "at", "rc", "timed_out"}      after it ended
    {"event": "done", "at"}                                    every step has ended

A step that was started and never ended was cut off by the allocation's end: the next
`run` starts it again. A restarted runner (a requeued allocation) skips ended steps.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from scalestudy.execute.packing import allocfile
from scalestudy.execute.packing.allocfile import AllocationStep
from scalestudy.execute.packing.steplog import (
    POLL_S,
    Event,
    StepEvent,
    append,
    ended_runs,
    hosts_of,
    now,
)
from scalestudy.site import ports

#: Seconds a step is given to end after SIGTERM before it is killed.
GRACE_S = 10.0


@dataclass
class Running:
    """A step that was started: its process group, deadline and the files it writes to."""

    run_id: str
    proc: subprocess.Popen[bytes]
    hosts: list[str]
    deadline: float
    logs: tuple[TextIO, ...]
    timed_out: bool = False
    killed_at: float | None = None


def step_hostfile(nodefile: list[str], hosts: list[str], slots: int | None) -> str:
    """A step's host file: its hosts' lines of the allocation's node file (PBS: one line
    per rank slot), or `host slots=N` lines where the node file names each node once."""
    if slots is not None:
        return "".join(f"{h} slots={slots}\n" for h in hosts)
    chosen = set(hosts)
    return "".join(f"{ln.strip()}\n" for ln in nodefile if ln.split() and ln.split()[0] in chosen)


class Runner:
    """Runs the allocation's steps in their order, each when its nodes are free."""

    def __init__(self, directory: Path, job_id: str) -> None:
        self.dir = directory
        self.job_id = job_id
        spec = allocfile.read(directory)
        self.steps: list[AllocationStep] = spec["steps"]
        self.slots_lines: bool = bool(spec.get("slots_lines"))
        self.nodefile = (directory / "nodefile").read_text(encoding="utf-8").splitlines()
        self.hosts = hosts_of(self.nodefile)
        self.journal = directory / "steps.jsonl"
        self.running: list[Running] = []
        self.stopping = False
        self.started = 0

    def ended_before(self) -> set[str]:
        """Steps an earlier runner of this allocation saw end (a requeue restarts it)."""
        return ended_runs(self.journal)

    def free_hosts(self) -> list[str]:
        busy = {h for r in self.running for h in r.hosts}
        return [h for h in self.hosts if h not in busy]

    def start(self, step: AllocationStep, hosts: list[str]) -> None:
        run_dir = Path(step["run_dir"])
        hostfile = self.dir / f"hosts-{step['run_id']}"
        slots = step["ranks_per_node"] if self.slots_lines else None
        hostfile.write_text(step_hostfile(self.nodefile, hosts, slots), encoding="utf-8")
        port = ports.step_port(self.job_id, self.started)
        self.started += 1
        append(self.journal, StepEvent(Event.STARTED, now(), step["run_id"], tuple(hosts),
                                       port=port))
        env = {**os.environ, "SCALESTUDY_STEP_HOSTS": ",".join(hosts),
               "SCALESTUDY_STEP_HOSTFILE": str(hostfile), "SCALESTUDY_STEP_PORT": str(port)}
        out = open(run_dir / step["log"], "w")  # noqa: SIM115 (closed when the step ends)
        err = out if step["err"] == step["log"] else open(run_dir / step["err"], "w")  # noqa: SIM115
        proc = subprocess.Popen(["bash", step["script"]], stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        logs = (out,) if err is out else (out, err)
        self.running.append(Running(step["run_id"], proc, hosts,
                                    time.monotonic() + float(step["limit_s"]), logs))

    def reap(self) -> None:
        """Record the steps that ended; stop those past their own limit."""
        for r in list(self.running):
            rc = r.proc.poll()
            if rc is None:
                self._limit(r)
                continue
            if not r.timed_out and (rc < 0 or rc >= 128) and not self.stopping:
                time.sleep(1.0)  # the allocation's own end may be what killed it
            if self.stopping and not r.timed_out:
                continue  # cut off by the allocation's end: not an end of the step
            for f in r.logs:
                f.close()
            self.running.remove(r)
            append(self.journal, StepEvent(Event.ENDED, now(), r.run_id,
                                           rc=128 - rc if rc < 0 else rc,
                                           timed_out=r.timed_out))

    def _limit(self, r: Running) -> None:
        moment = time.monotonic()
        if r.killed_at is None and moment > r.deadline:
            r.timed_out, r.killed_at = True, moment
            _signal(r.proc, signal.SIGTERM)
        elif r.killed_at is not None and moment > r.killed_at + GRACE_S:
            _signal(r.proc, signal.SIGKILL)

    def stop(self, signum: int, _frame: object) -> None:
        """The allocation is ending (walltime, cancel, preemption): stop every step."""
        self.stopping = True
        for r in self.running:
            _signal(r.proc, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        while any(r.proc.poll() is None for r in self.running) and time.monotonic() < deadline:
            time.sleep(0.2)
        for r in self.running:
            _signal(r.proc, signal.SIGKILL)
        os._exit(128 + signum)

    def run(self) -> int:
        """Every step not ended yet, in order; 0 once all have ended."""
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGHUP):
            signal.signal(signum, self.stop)
        append(self.journal, StepEvent(Event.ALLOCATION, now(), hosts=tuple(self.hosts),
                                       job_id=self.job_id))
        done = self.ended_before()
        todo = [s for s in self.steps if s["run_id"] not in done]
        for step in todo:
            if step["nodes"] > len(self.hosts):
                append(self.journal, StepEvent(
                    Event.ENDED, now(), step["run_id"], rc=2,
                    why=f"needs {step['nodes']} nodes, the allocation has {len(self.hosts)}"))
                continue
            while len(self.free_hosts()) < step["nodes"]:
                time.sleep(POLL_S)
                self.reap()
            self.start(step, self.free_hosts()[:step["nodes"]])
        while self.running:
            time.sleep(POLL_S)
            self.reap()
        append(self.journal, StepEvent(Event.DONE, now()))
        return 0


def _signal(proc: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)
