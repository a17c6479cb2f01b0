"""Record what the real Slurm prints for held, requeued, preempted, node-failed and
signalled jobs, for the parser tests. (OUT_OF_MEMORY needs memory as a consumable
resource or cgroups, which the testbed has not: its samples come from the manuals.)

    eval "$(scripts/slurm-testbed start)" && .venv/bin/python tests/data/slurm/record_states.py

Drives each case on the testbed (scripts/slurm-testbed: preempt/qos with
PreemptMode=CANCEL) and saves, per case, under states/: `CASE.sacct` (`sacct -X -n
-P -o JobIDRaw,State,ExitCode,Reason,ConsumedEnergyRaw,ElapsedRaw`), `CASE.squeue`
(`squeue -h -t all -o %i|%T|%r`), `CASE.scontrol` (`scontrol -o show job`) and, for the
jobs that ran, `CASE.err` (the job's stderr, where slurmstepd writes its `*** JOB ...`
lines). It takes a node down and back up, and adds then removes a QOS `urgent`. About
two minutes.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent / "states"
WORK = Path("/tmp/scalestudy-slurm-record")
FIELDS = "JobIDRaw,State,ExitCode,Reason,ConsumedEnergyRaw,ElapsedRaw"


def sh(*argv: str, check: bool = True) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=WORK)
    if check and done.returncode != 0:
        sys.exit(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr}")
    return done.stdout


def sbatch(name: str, *args: str, script: str = "sleep 120") -> str:
    return sh("sbatch", "--parsable", "-J", name, "-o", f"{name}.out", "-e", f"{name}.err",
              *args, "--wrap", script).strip()


def field(job_id: str, key: str) -> str:
    line = sh("scontrol", "-o", "show", "job", job_id, check=False)
    return next((w.split("=", 1)[1] for w in line.split() if w.startswith(f"{key}=")), "")


def wait(job_id: str, test: object, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not test(field(job_id, "JobState"), field(job_id, "Reason")):  # type: ignore[operator]
        if time.monotonic() > deadline:
            sys.exit(f"{job_id}: no {what} after {timeout} s ({field(job_id, 'JobState')})")
        time.sleep(0.5)


def record(case: str, job_id: str, name: str | None = None) -> None:
    time.sleep(2)  # slurmctld tells slurmdbd a moment later
    HERE.mkdir(exist_ok=True)
    (HERE / f"{case}.sacct").write_text(sh("sacct", "-X", "-n", "-P", "-j", job_id,
                                           "-o", FIELDS))
    (HERE / f"{case}.squeue").write_text(sh("squeue", "-h", "-t", "all", "-j", job_id,
                                            "-o", "%i|%T|%r", check=False))
    (HERE / f"{case}.scontrol").write_text(sh("scontrol", "-o", "show", "job", job_id,
                                              check=False))
    err = WORK / f"{name}.err" if name else None
    if err is not None and err.exists():
        (HERE / f"{case}.err").write_text(err.read_text())
    print(f"  {case}: {job_id} {field(job_id, 'JobState')} {field(job_id, 'Reason')}",
          file=sys.stderr)


def running(state: str, _reason: str) -> bool:
    return state == "RUNNING"


def main() -> None:
    subprocess.run(["rm", "-rf", str(WORK)], check=True)
    WORK.mkdir()
    print("holds", file=sys.stderr)
    held = sbatch("held-submit", "--hold")
    record("held-submit", held)
    admin = sbatch("held-admin", "--begin=now+1hour")
    sh("scontrol", "hold", admin)
    record("held-admin", admin)
    failed = sbatch("parent-failed", script="exit 3")
    wait(failed, lambda s, r: s == "FAILED", "failure")
    orphan = sbatch("dependency-never", f"--dependency=afterok:{failed}")
    wait(orphan, lambda s, r: r == "DependencyNeverSatisfied", "DependencyNeverSatisfied")
    record("dependency-never", orphan)

    print("requeue", file=sys.stderr)
    again = sbatch("requeued", "--requeue")
    wait(again, running, "start")
    sh("scontrol", "requeue", again)
    record("requeued", again, "requeued")
    stuck = sbatch("requeue-hold", "--requeue")
    wait(stuck, running, "start")
    sh("scontrol", "requeuehold", stuck)
    wait(stuck, lambda s, r: s == "PENDING", "requeue hold")
    record("requeue-hold", stuck, "requeue-hold")

    print("node failure, signal", file=sys.stderr)
    doomed = sbatch("node-fail", "--no-requeue", "-w", "n2")
    wait(doomed, running, "start")
    sh("scontrol", "update", "nodename=n2", "state=down", "reason=recording")
    wait(doomed, lambda s, r: s == "NODE_FAIL", "NODE_FAIL")
    record("node-fail", doomed, "node-fail")
    sh("scontrol", "update", "nodename=n2", "state=resume", check=False)  # ReturnToService
    shot = sbatch("batch-sigkill")
    wait(shot, running, "start")
    sh("scancel", "--batch", "--signal=KILL", shot)
    wait(shot, lambda s, r: s not in ("RUNNING", "COMPLETING"), "the end")
    record("batch-sigkill", shot, "batch-sigkill")

    print("preemption", file=sys.stderr)
    sh("sacctmgr", "-i", "add", "qos", "urgent", "Preempt=normal", "PreemptMode=cancel",
       "Priority=1000", check=False)
    user = sh("id", "-un").strip()
    sh("sacctmgr", "-i", "modify", "user", user, "set", "qos+=urgent", check=False)
    time.sleep(2)
    victim = sbatch("preempted", "-N4", "--exclusive")
    wait(victim, running, "start")
    bully = sbatch("preemptor", "-N4", "--exclusive", "--qos=urgent", script="sleep 2")
    wait(victim, lambda s, r: s not in ("RUNNING", "COMPLETING"), "preemption")
    record("preempted", victim, "preempted")
    wait(bully, lambda s, r: s == "COMPLETED", "the preemptor's end")
    sh("sacctmgr", "-i", "modify", "user", user, "set", "qos-=urgent", check=False)
    sh("sacctmgr", "-i", "delete", "qos", "urgent", check=False)
    for job_id in (held, admin, orphan, again, stuck):
        sh("scancel", job_id, check=False)


if __name__ == "__main__":
    main()
