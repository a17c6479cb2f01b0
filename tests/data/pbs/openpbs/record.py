"""Record real OpenPBS outputs for the parser tests, from the testbed (scripts/pbs-testbed).

    scripts/pbs-testbed start >/dev/null && .venv/bin/python tests/data/pbs/openpbs/record.py

Runs as root; every PBS command runs as pbsuser on the head host through
`scripts/pbs-testbed exec`. It submits jobs in each state of README.md's table, saves
each command's stdout under this directory and, next to it, `<file>.meta.json` with the
command line, exit code and stderr. --with-restart also records a job requeued by a
testbed stop/start (it stops the testbed's daemons for ~15 s). Takes about 3 minutes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[3]
TESTBED = ROOT / "scripts" / "pbs-testbed"

# Job names as scalestudy makes them: <study>-<run_id>, run_id = 10 hex characters.
NAMES = {
    "blocker": "study-b10c4e7001",
    "queued-waiting": "study-0a17000001",
    "queued-never": "study-0e7e700001",
    "held-dependency": "study-5e1d000001",
    "held-user": "study-5e1d000002",
    "deleted-queued": "study-de1e7e0001",
    "finished-exit0": "study-f000000000",
    "finished-exit3": "study-f000000003",
    "finished-walltime": "study-f0000000a1",
    "array": "study-a77a900001",
    "requeued": "study-4e90000001",
    "array-failed": "study-a77a900002",
    "killed": "study-4177000001",
    "values": "study-7a10e50001",
}
# The directives scalestudy renders for ALCF Polaris (queue scaled to the testbed).
POLARIS = """\
#PBS -l select={select}
#PBS -l place=scatter
#PBS -l walltime={walltime}
#PBS -l filesystems=home:eagle
#PBS -A SomeAccount
#PBS -q {queue}
#PBS -j oe
#PBS -k doe
"""


# A plain environment, so that the jobs' Variable_List (PBS_O_PATH, ...) says nothing
# of the machine that recorded them.
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


def run(argv: list[str], cwd: Path, root: bool = False,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    opts = ["--root"] if root else []
    return subprocess.run([str(TESTBED), "exec", *opts, "--", *argv], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=timeout)


def save(rel: str, argv: list[str], proc: subprocess.CompletedProcess[str],
         note: str = "") -> None:
    """stdout as `rel`, the rest as `rel.meta.json`."""
    path = HERE / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(proc.stdout, encoding="utf-8")
    meta: dict[str, Any] = {"argv": argv, "exit_code": proc.returncode, "stderr": proc.stderr}
    if note:
        meta["note"] = note
    Path(f"{path}.meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    print(f"  {rel}: exit {proc.returncode}", file=sys.stderr)


def job_script(work: Path, name: str, body: str, select: str = "1:system=polaris",
               walltime: str = "00:10:00", queue: str = "debug-scaling") -> Path:
    path = work / f"{name}.sh"
    path.write_text(f"#!/bin/bash\n#PBS -N {name}\n"
                    + POLARIS.format(select=select, walltime=walltime, queue=queue)
                    + body, encoding="utf-8")
    path.chmod(0o755)
    return path


def qsub(work: Path, *args: str) -> str:
    proc = run(["qsub", *args], work)
    if proc.returncode != 0:
        sys.exit(f"qsub {' '.join(args)} failed (exit {proc.returncode}): {proc.stderr}")
    return proc.stdout.strip()


def attrs(work: Path, job_id: str) -> dict[str, Any]:
    proc = run(["qstat", "-x", "-f", "-F", "json", job_id], work)
    jobs = json.loads(proc.stdout or "{}").get("Jobs", {})
    return next(iter(jobs.values()), {})


def wait(work: Path, job_id: str, what: str, test: Any, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        a = attrs(work, job_id)
        if a and test(a):
            return a
        if time.monotonic() > deadline:
            sys.exit(f"{job_id}: no {what} after {timeout} s: {a.get('job_state')} "
                     f"{a.get('comment')!r}")
        time.sleep(0.3)


def record_job(work: Path, case: str, job_id: str) -> None:
    """The three listings of one job: JSON with history, text with history, plain text."""
    for rel, argv in [
        (f"qstat-x-f-F-json/{case}.json", ["qstat", "-x", "-f", "-F", "json", job_id]),
        (f"qstat-x-f/{case}.txt", ["qstat", "-x", "-f", job_id]),
        (f"qstat-f/{case}.txt", ["qstat", "-f", job_id]),
    ]:
        save(rel, argv, run(argv, work))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--with-restart", action="store_true",
                        help="also record a job requeued by a testbed stop/start")
    opts = parser.parse_args()
    env = subprocess.run([str(TESTBED), "env"], capture_output=True, text=True, check=False)
    if env.returncode != 0:
        sys.exit(f"the testbed is not running: {TESTBED} start\n{env.stderr}")
    work = Path("/tmp/scalestudy-pbs-record")
    subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir(mode=0o755)
    subprocess.run(["chown", "pbsuser:pbsuser", str(work)], check=True)

    print("submitting", file=sys.stderr)
    # Occupies every CPU of the 4 nodes, so that the next jobs wait.
    blocker = job_script(work, NAMES["blocker"], "sleep 600\n",
                         select="4:ncpus=2:system=polaris", queue="prod")
    argv = ["qsub", blocker.name]
    proc = run(argv, work)
    save("qsub.txt", argv, proc)
    blocker_id = proc.stdout.strip()
    wait(work, blocker_id, "running", lambda a: a["job_state"] == "R")

    waiting = qsub(work, job_script(work, NAMES["queued-waiting"], "true\n").name)
    never = qsub(work, "-l", "select=5:ncpus=2", "-q", "workq",
                 job_script(work, NAMES["queued-never"], "true\n").name)
    held_dep = qsub(work, "-W", f"depend=afterok:{blocker_id}",
                    job_script(work, NAMES["held-dependency"], "true\n").name)
    held_user = qsub(work, "-h", job_script(work, NAMES["held-user"], "true\n").name)
    doomed = qsub(work, job_script(work, NAMES["deleted-queued"], "true\n").name)
    array_script = job_script(work, NAMES["array"], 'echo "index $PBS_ARRAY_INDEX"\nsleep 15\n')
    argv = ["qsub", "-J", "1-3", array_script.name]
    proc = run(argv, work)
    save("qsub-array.txt", argv, proc)
    array_id = proc.stdout.strip()
    for job_id in (waiting, never):
        wait(work, job_id, "a scheduler comment", lambda a: "comment" in a)

    print("recording queued, held and running jobs", file=sys.stderr)
    record_job(work, "running", blocker_id)
    record_job(work, "queued-waiting", waiting)
    record_job(work, "queued-never", never)
    record_job(work, "held-dependency", held_dep)
    record_job(work, "held-user", held_user)
    record_job(work, "array-queued", array_id)
    live = [waiting, never, held_dep, held_user, blocker_id, array_id]
    argv = ["qstat", "-x", "-f", "-F", "json", *live]
    save("qstat-x-f-F-json/multi-live.json", argv, run(argv, work))
    argv = ["qstat", "-f", *live]
    save("qstat-f/multi-live.txt", argv, run(argv, work))
    unknown = f"99999.{blocker_id.split('.', 1)[1]}"
    argv = ["qstat", "-x", "-f", "-F", "json", waiting, unknown, blocker_id]
    save("qstat-x-f-F-json/unknown-among-live.json", argv, run(argv, work),
         "an id the server never had, between two live jobs")
    argv = ["qstat", "-x", "-f", waiting, unknown, blocker_id]
    save("qstat-x-f/unknown-among-live.txt", argv, run(argv, work))
    argv = ["qstat", "-x", "-f", "-F", "json", unknown]
    save("qstat-x-f-F-json/unknown-only.json", argv, run(argv, work))

    print("deleting", file=sys.stderr)
    argv = ["qdel", doomed]
    save("qdel/queued.txt", argv, run(argv, work))
    wait(work, doomed, "finished", lambda a: a["job_state"] == "F")
    record_job(work, "deleted-queued", doomed)
    run(["qdel", never], work)
    wait(work, never, "finished", lambda a: a["job_state"] == "F")
    record_job(work, "deleted-never", never)
    run(["qdel", held_user], work)
    wait(work, held_user, "finished", lambda a: a["job_state"] == "F")
    record_job(work, "deleted-held-user", held_user)
    argv = ["qdel", blocker_id]
    save("qdel/running.txt", argv, run(argv, work))
    wait(work, array_id, "array running", lambda a: a["job_state"] == "B", timeout=60)
    record_job(work, "array-running", array_id)
    argv = ["qstat", "-x", "-f", "-F", "json", "-t", array_id]
    save("qstat-x-f-F-json/array-running-t.json", argv, run(argv, work),
         "-t: the array and each sub-job")
    wait(work, blocker_id, "finished", lambda a: a["job_state"] == "F")
    record_job(work, "deleted-running", blocker_id)
    argv = ["qstat", "-x", "-f", "-F", "json", blocker_id, held_dep, array_id, waiting]
    save("qstat-x-f-F-json/multi-mixed.json", argv, run(argv, work),
         "finished, held or finished, array running, running or finished: timing decides")
    wait(work, held_dep, "finished", lambda a: a["job_state"] == "F")
    record_job(work, "afterok-parent-deleted", held_dep)

    print("running jobs to their end", file=sys.stderr)
    exit0 = qsub(work, job_script(work, NAMES["finished-exit0"], "echo ok\n").name)
    exit3 = qsub(work, job_script(work, NAMES["finished-exit3"], "exit 3\n").name)
    walltime = qsub(work, job_script(work, NAMES["finished-walltime"], "sleep 120\n",
                                     walltime="00:00:05").name)
    for job_id in (waiting, exit0, exit3, array_id):
        wait(work, job_id, "finished", lambda a: a["job_state"] == "F")
    record_job(work, "finished-exit0", exit0)
    record_job(work, "finished-exit3", exit3)
    record_job(work, "finished-after-waiting", waiting)
    record_job(work, "array-finished", array_id)
    sub = array_id.replace("[]", "[2]")
    record_job(work, "array-subjob-finished", sub)
    argv = ["qstat", "-x", "-f", "-F", "json", "-t", array_id]
    save("qstat-x-f-F-json/array-finished-t.json", argv, run(argv, work))
    wait(work, walltime, "finished", lambda a: a["job_state"] == "F", timeout=240)
    record_job(work, "finished-walltime", walltime)
    finished = [exit0, exit3, walltime, blocker_id, doomed, array_id]
    argv = ["qstat", "-x", "-f", "-F", "json", *finished]
    save("qstat-x-f-F-json/multi-finished.json", argv, run(argv, work))
    argv = ["qstat", "-x", "-f", "-F", "json", exit0, unknown, exit3]
    save("qstat-x-f-F-json/unknown-among-finished.json", argv, run(argv, work))

    print("exit statuses and JSON value types", file=sys.stderr)
    failed_array = qsub(work, "-N", NAMES["array-failed"], "-J", "1-3", "--", "/bin/sh", "-c",
                        "exit $((PBS_ARRAY_INDEX == 2 ? 5 : 0))")
    killed = qsub(work, "-N", NAMES["killed"], "--", "/bin/sh", "-c", "kill -9 $$")
    # Job_Name "123" and -v values that look like numbers (JSON types differ).
    values = qsub(work, "-N", "123", "-v", "LEADING_ZERO=007,DECIMAL=1.50,EXPONENT=1e3,WORD=true",
                  "--", "/bin/true")
    backslash = qsub(work, "-N", NAMES["values"], "-v", "BACKSLASH=a\\b", "--", "/bin/true")
    for job_id in (failed_array, killed, values, backslash):
        wait(work, job_id, "finished", lambda a: a["job_state"] == "F")
    argv = ["qstat", "-x", "-f", "-F", "json", "-t", failed_array]
    save("qstat-x-f-F-json/array-one-subjob-failed-t.json", argv, run(argv, work),
         "sub-job 2 exits 5: the array says 'and failed', substate 93, Exit_status 0")
    record_job(work, "killed-by-sigkill", killed)
    argv = ["qstat", "-x", "-f", "-F", "json", values, backslash]
    save("qstat-x-f-F-json/value-types.json", argv, run(argv, work),
         "qsub -N 123 -v LEADING_ZERO=007,DECIMAL=1.50,EXPONENT=1e3,WORD=true; "
         "qsub -v 'BACKSLASH=a\\b'")
    for rel, argv in [
        ("qstat-f/finished-then-unknown.txt", ["qstat", "-f", exit0, unknown]),
        ("qstat-f/unknown-then-finished.txt", ["qstat", "-f", unknown, exit0]),
        ("qstat-x-f-F-json/other-server-suffix.json",
         ["qstat", "-x", "-f", "-F", "json", exit0.split(".")[0] + ".otherserver"]),
    ]:
        save(rel, argv, run(argv, work))

    print("qselect, qdel and qsub errors", file=sys.stderr)
    # A resubmitted run: two jobs with one name.
    again = qsub(work, job_script(work, NAMES["finished-exit0"], "echo ok\n").name)
    wait(work, again, "finished", lambda a: a["job_state"] == "F")
    for rel, argv in [
        ("qselect/x-N-one.txt", ["qselect", "-x", "-N", NAMES["finished-exit3"]]),
        ("qselect/x-N-two.txt", ["qselect", "-x", "-N", NAMES["finished-exit0"]]),
        ("qselect/x-N-none.txt", ["qselect", "-x", "-N", "study-ffffffffff"]),
        ("qselect/N-finished.txt", ["qselect", "-N", NAMES["finished-exit0"]]),
        ("qdel/finished.txt", ["qdel", exit0]),
        ("qdel/unknown.txt", ["qdel", unknown]),
    ]:
        save(rel, argv, run(argv, work))
    script = job_script(work, "study-e440000001", "true\n").name
    for rel, extra in [
        ("qsub-errors/unknown-queue.txt", ["-q", "nosuchqueue"]),
        ("qsub-errors/over-queue-node-limit.txt", ["-l", "select=3:system=polaris"]),
        ("qsub-errors/under-queue-node-minimum.txt", ["-q", "prod", "-l", "select=1"]),
        ("qsub-errors/over-queue-walltime.txt", ["-l", "walltime=02:00:00"]),
        ("qsub-errors/unknown-resource.txt", ["-l", "select=1:ngpus=4:gpu_model=a100"]),
        ("qsub-errors/bad-walltime.txt", ["-l", "walltime=ten"]),
    ]:
        argv = ["qsub", *extra, script]
        save(rel, argv, run(argv, work))
    argv = ["qsub", script]
    save("qsub-errors/as-root.txt", argv, run(argv, work, root=True), "submitted as root")

    if opts.with_restart:
        print("requeue by a testbed stop/start", file=sys.stderr)
        job_id = qsub(work, job_script(work, NAMES["requeued"], "sleep 20\n",
                                        select="2:system=polaris").name)
        wait(work, job_id, "running", lambda a: a["job_state"] == "R")
        time.sleep(2)
        subprocess.run([str(TESTBED), "stop"], check=True, capture_output=True)
        subprocess.run([str(TESTBED), "start"], check=True, capture_output=True)
        record_job(work, "requeued-after-start", job_id)
        wait(work, job_id, "running again", lambda a: a["job_state"] == "R"
             and a.get("run_count", 0) >= 2)
        record_job(work, "requeued-running-again", job_id)
        wait(work, job_id, "finished", lambda a: a["job_state"] == "F")
        record_job(work, "requeued-finished", job_id)

    version = run(["qstat", "--version"], work).stdout.strip()
    (HERE / "VERSION").write_text(version + "\n", encoding="utf-8")
    print(f"done: {version}", file=sys.stderr)


if __name__ == "__main__":
    main()
