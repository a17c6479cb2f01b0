"""Record what the real OpenPBS prints when it kills, holds, suspends or requeues a job.

    scripts/pbs-testbed start >/dev/null && .venv/bin/python tests/data/pbs/openpbs/record_limits.py

Drives each case on the testbed (MoMs with `$enforce mem` and `$check_poll_time 5`):
a job killed for its cput, one killed for its mem, a system and an operator hold
(`qhold -h s|o` as the manager), a suspended job (`qsig -s suspend`) and a requeued one
(`qrerun`). Saves each job's `qstat -x -f -F json` and `qstat -x -f` like record.py, and
for the killed jobs the job's joined output file (`-j oe`), where the MoM writes its
`=>> PBS: job killed: ...` line, as `output/CASE.txt`. Takes about a minute.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from record import NAMES, job_script, qsub, record_job, run, save, wait

NAMES.update({"cput": "study-c9070000001", "mem": "study-3e3000000001",
              "system-hold": "study-5e1d000003", "operator-hold": "study-5e1d000004",
              "suspended": "study-5059000001", "requeued": "study-4e90000002"})
BUSY = "python3 -c 'while True: pass'\n"
# Grows to ~400 MB and holds it; the job asks for 64 MB.
HOG = "python3 -c 'import time; b = [bytearray(1 << 20) for _ in range(400)]; time.sleep(60)'\n"


def killed(work: Path, case: str, body: str, *resources: str) -> None:
    """Submit a job that a MoM will kill for a resource, wait for its end, record it."""
    name = NAMES[case]
    job_id = qsub(work, *resources, job_script(work, name, body, walltime="00:02:00").name)
    wait(work, job_id, "the end", lambda a: a["job_state"] == "F", timeout=150)
    record_job(work, f"killed-{case}", job_id)
    output = work / f"{name}.o{job_id.split('.')[0]}"
    for _ in range(20):  # the MoM copies the output file back a moment after the end
        if output.exists():
            break
        time.sleep(0.5)
    target = Path(__file__).resolve().parent / "output" / f"killed-{case}.txt"
    target.parent.mkdir(exist_ok=True)
    target.write_text(output.read_text(encoding="utf-8") if output.exists() else "",
                      encoding="utf-8")
    print(f"  output/killed-{case}.txt", file=sys.stderr)


def main() -> None:
    work = Path("/tmp/scalestudy-pbs-record-limits")
    run(["rm", "-rf", str(work)], Path("/"), root=True)
    work.mkdir(mode=0o755, exist_ok=True)
    run(["chown", "pbsuser:pbsuser", str(work)], Path("/"), root=True)

    print("resource kills", file=sys.stderr)
    killed(work, "cput", BUSY, "-l", "cput=00:00:03")
    killed(work, "mem", HOG, "-l", "select=1:system=polaris:mem=64mb")

    print("holds, suspension, requeue", file=sys.stderr)
    jobs = {case: qsub(work, job_script(work, NAMES[case], "sleep 120\n").name)
            for case in ("system-hold", "operator-hold", "suspended", "requeued")}
    for job_id in jobs.values():
        wait(work, job_id, "running", lambda a: a["job_state"] == "R", timeout=60)
    for case, flag in (("system-hold", "s"), ("operator-hold", "o")):
        save(f"qhold/{case}.txt", ["qhold", "-h", flag, jobs[case]],
             run(["qhold", "-h", flag, jobs[case]], work, root=True))
        # A hold on a running job takes effect when it is requeued: requeue it too.
        run(["qrerun", jobs[case]], work, root=True)
        wait(work, jobs[case], "held", lambda a: a["job_state"] == "H", timeout=60)
        record_job(work, case, jobs[case])
    run(["qsig", "-s", "suspend", jobs["suspended"]], work, root=True)
    wait(work, jobs["suspended"], "suspended", lambda a: a["job_state"] == "S", timeout=60)
    record_job(work, "suspended", jobs["suspended"])
    run(["qrerun", jobs["requeued"]], work, root=True)
    wait(work, jobs["requeued"], "requeued", lambda a: a.get("run_count", 0) >= 1
         and a["job_state"] in ("Q", "R"), timeout=60)
    record_job(work, "requeued-by-qrerun", jobs["requeued"])
    for job_id in jobs.values():
        run(["qdel", "-W", "force", job_id], work, root=True)


if __name__ == "__main__":
    main()
