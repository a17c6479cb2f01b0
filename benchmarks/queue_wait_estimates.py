"""Expected starts against actual ones on the Slurm testbed with a synthetic backlog: is
the wait `plan` gives (Slurm's `sbatch --test-only` for the run's own shape, taken by
execute.commands.estimate_start) within ±20 % of the wait the job then has?

A filler job holds every node for a minute; then N jobs of 1, 2 or 4 whole nodes are
submitted one after the other, each asked for first. Every job asks for one minute and
sleeps a little less (`--sleep`), so the walltimes Slurm plans with are close to the
truth; a backlog of jobs that end early makes any walltime-based estimate an upper
bound. Waits are from each submission to its job's start (sacct's Start).

    eval "$(scripts/slurm-testbed start)"
    python benchmarks/queue_wait_estimates.py [--jobs 32] [--sleep 57] [--json]

Exit 0 when at least 30 waits are within ±20 % (waits under --min-wait seconds are
scored by their absolute error, at most 20 % of --min-wait), 1 when not, 2 when the
testbed is not running.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scalestudy.execute.commands import estimate_start  # noqa: E402
from scalestudy.site import schedulers  # noqa: E402
from scalestudy.site.schedulers import JobRequest  # noqa: E402

SIZES = (1, 2, 1, 1, 2, 4)
CPUS_PER_NODE = 2
TOLERANCE = 0.20


def sbatch(*args: str) -> str:
    done = subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", *args],
                          capture_output=True, text=True,
                          check=True)
    return done.stdout.strip().split(";")[0]


def started(job_id: str) -> datetime | None:
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "Start"],
                         capture_output=True, text=True).stdout.strip()
    try:
        return datetime.fromisoformat(out.splitlines()[0])
    except (ValueError, IndexError):
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=32)
    parser.add_argument("--sleep", type=float, default=57.0)
    parser.add_argument("--min-wait", type=float, default=60.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not os.environ.get("SLURM_CONF"):
        print('the Slurm testbed is not running: eval "$(scripts/slurm-testbed start)"',
              file=sys.stderr)
        return 2
    slurm = schedulers.get("slurm")
    script = f"sleep {args.sleep}"
    filler = sbatch("-J", "backlog-filler", "-N", "4", f"--ntasks-per-node={CPUS_PER_NODE}",
                    "-t", "1", "--wrap", script)
    time.sleep(2)
    asked = []
    for i in range(args.jobs):
        nodes = SIZES[i % len(SIZES)]
        job = JobRequest(name=f"backlog-{i}", nodes=nodes, ranks_per_node=CPUS_PER_NODE,
                         walltime="00:01:00")
        expected = estimate_start(slurm, job)
        submitted = datetime.now()
        job_id = sbatch(f"--job-name=backlog-{i}", "-N", str(nodes),
                        f"--ntasks-per-node={CPUS_PER_NODE}", "-t", "00:01:00",
                        "--wrap", script)
        asked.append((job_id, nodes, submitted, expected))
    last = asked[-1][0]
    while started(last) is None or subprocess.run(
            ["squeue", "-h", "-j", last], capture_output=True, text=True).stdout.strip():
        time.sleep(5)
    rows = []
    for job_id, nodes, submitted, expected in asked:
        start = started(job_id)
        if expected is None or start is None:
            rows.append({"job": job_id, "nodes": nodes, "ok": False, "why": "no estimate"})
            continue
        want = max(0.0, (datetime.fromisoformat(expected) - submitted).total_seconds())
        got = max(0.0, (start - submitted).total_seconds())
        error = (got - want) / want if want >= args.min_wait else (got - want) / args.min_wait
        rows.append({"job": job_id, "nodes": nodes, "expected_wait_s": round(want, 1),
                     "actual_wait_s": round(got, 1), "error": round(error, 4),
                     "ok": abs(error) <= TOLERANCE})
    held = sum(r["ok"] for r in rows)
    errors = sorted(abs(r["error"]) for r in rows if "error" in r)
    summary = {"jobs": len(rows), "within_20pct": held, "filler": filler,
               "median_abs_error": errors[len(errors) // 2] if errors else None,
               "max_abs_error": errors[-1] if errors else None,
               "mean_expected_wait_s": round(sum(r.get("expected_wait_s", 0) for r in rows)
                                             / max(len(rows), 1), 1)}
    if args.json:
        print(json.dumps({"summary": summary, "jobs": rows}))
    else:
        for r in rows:
            print(r)
        print(summary)
    return 0 if held >= 30 else 1


if __name__ == "__main__":
    sys.exit(main())
