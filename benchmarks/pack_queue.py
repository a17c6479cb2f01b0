"""A study's wall time packed (`run --pack`) against one job per run, on the real Slurm
testbed while other users' jobs keep its queue busy.

    eval "$(scripts/slurm-testbed start)"
    python benchmarks/pack_queue.py [--trials 2] [--fillers 12] [--filler-s 8] [--json]

Each trial queues `--fillers` jobs of another "user" first (1 or 2 nodes, each sleeping
`--filler-s` seconds, from a seeded generator: every trial gets the same queue), and
that user goes on submitting one more every `--arrival-s` seconds while the study runs;
then the same study (a `command` workload of 1-, 2- and 4-node runs, two repeats, each
run sleeping 4 s) is submitted, one job per run with `--max-jobs` (a per-user limit of
jobs in the queue, as sites' debug queues have) or packed, and `scalestudy run --wait`
is timed from its start to the last run's end (its `exit_code` file; `--wait`'s polls
back off to a minute and would round the figure). The modes alternate (per-run, packed, per-run,
...) so that a slow period of the machine falls on both; the figure is their ratio,
trial by trial, with the queue waits the journals and step journals give (per-run: each
job's; packed: one per allocation).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from testbeds import slurm_profile

SCALESTUDY = str(Path(sys.executable).with_name("scalestudy")) \
    if Path(sys.executable).with_name("scalestudy").exists() else "scalestudy"
PROFILE = slurm_profile("testbed-pack-bench")
STUDY = """\
name: {name}
system: profile.yaml
workload:
  kind: command
  command: [python3, -c, "import time; time.sleep(4); print('Total img/sec on 1 GPU(s): 1.0')"]
grid: {{nodes: [1, 2, 4], ranks_per_node: [2], batch_size: [1]}}
repeats: 2
job: {{walltime: "00:02:00"}}
"""


def fillers(count: int, seconds: float, seed: int, env: dict[str, str], work: Path) -> None:
    """Queue another user's jobs: 1 or 2 nodes each, sleeping `seconds`."""
    rng = random.Random(seed)
    for i in range(count):
        nodes = rng.choice((1, 2))
        subprocess.run(["sbatch", "-N", str(nodes), "-J", f"other-{i}", "-o", "/dev/null",
                        "--wrap", f"sleep {seconds}"], env=env, check=True, cwd=work,
                       capture_output=True, timeout=30)


class Arrivals(threading.Thread):
    """The other user's new jobs, one every `every` seconds, until stopped."""

    def __init__(self, every: float, seconds: float, seed: int, env: dict[str, str],
                 work: Path) -> None:
        super().__init__(daemon=True)
        self.every, self.seconds, self.env, self.work = every, seconds, env, work
        self.rng = random.Random(seed + 1)
        self.halt = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.halt.wait(self.every):
            subprocess.run(["sbatch", "-N", str(self.rng.choice((1, 2))), "-J",
                            f"arrival-{i}", "-o", "/dev/null", "--wrap",
                            f"sleep {self.seconds}"], env=self.env, cwd=self.work,
                           capture_output=True, timeout=30)
            i += 1


def drain(env: dict[str, str]) -> None:
    """Wait for an empty queue."""
    while subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True,
                         timeout=30).stdout.strip():
        time.sleep(0.5)


def waits(directory: Path) -> list[float]:
    """Queue waits (s): each allocation's (packed), else each run's (submitted to the
    start its job script recorded in env.txt's mtime, which the job writes first)."""
    jobs = [json.loads(x) for x in (directory / "jobs.jsonl").read_text().splitlines()
            if '"job_id"' in x]
    out = []
    allocations = directory / "allocations"
    if allocations.is_dir():
        for a in sorted(allocations.iterdir()):
            events = [json.loads(x) for x in (a / "steps.jsonl").read_text().splitlines()]
            start = datetime.fromisoformat(events[0]["at"])
            sub = min(datetime.fromisoformat(j["submitted_at"]) for j in jobs
                      if j.get("allocation") == a.name)
            out.append((start - sub).total_seconds())
        return out
    for job in jobs:
        env_txt = directory / "runs" / job["run_id"] / "env.txt"
        sub = datetime.fromisoformat(job["submitted_at"]).timestamp()
        out.append(max(0.0, env_txt.stat().st_mtime - sub))
    return out


def trial(mode: str, index: int, args: argparse.Namespace, env: dict[str, str],
          work: Path) -> dict[str, Any]:
    drain(env)
    name = f"bench-{mode}-{index}-{os.getpid()}"
    (work / "profile.yaml").write_text(PROFILE)
    spec = work / f"{name}.yaml"
    spec.write_text(STUDY.format(name=name))
    fillers(args.fillers, args.filler_s, args.seed, env, work)
    arrivals = Arrivals(args.arrival_s, args.filler_s, args.seed, env, work)
    arrivals.start()
    started = time.time()
    mode_args = ["--pack"] if mode == "packed" else ["--max-jobs", str(args.max_jobs)]
    done = subprocess.run([SCALESTUDY, "run", str(spec), "--wait", "--no-preflight",
                           *mode_args], cwd=work, env=env,
                          capture_output=True, text=True, timeout=1800)
    # to the last run's end (its exit_code file), not to `run --wait`'s next poll
    ends = [p.stat().st_mtime for p in (work / "results" / name / "runs").glob("*/exit_code")]
    seconds = (max(ends) if ends else time.time()) - started
    arrivals.halt.set()
    arrivals.join()
    if done.returncode != 0:
        sys.exit(f"pack_queue: {mode} trial {index} failed:\n{done.stdout}\n{done.stderr}")
    queue = waits(work / "results" / name)
    return {"mode": mode, "trial": index, "wall_s": round(seconds, 1),
            "queue_waits": len(queue), "queue_wait_s_sum": round(sum(queue), 1),
            "queue_wait_s_max": round(max(queue), 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=2, help="trials of each mode")
    parser.add_argument("--fillers", type=int, default=12, help="other jobs queued first")
    parser.add_argument("--filler-s", type=float, default=8.0, help="each one's seconds")
    parser.add_argument("--arrival-s", type=float, default=4.0,
                        help="another job of the other user every this many seconds")
    parser.add_argument("--max-jobs", type=int, default=2,
                        help="per-run: the per-user limit of jobs in the queue")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    env = dict(os.environ)
    if "SLURM_CONF" not in env:
        sys.exit("pack_queue: no testbed: run `eval \"$(scripts/slurm-testbed start)\"`")
    work = Path(tempfile.mkdtemp(prefix="pack-queue-"))
    rows = []
    try:
        for index in range(args.trials):
            for mode in ("per-run", "packed"):
                rows.append(trial(mode, index, args, env, work))
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    finally:
        drain(env)
        shutil.rmtree(work, ignore_errors=True)
    ratios = [p["wall_s"] / r["wall_s"] for r, p in zip(rows[::2], rows[1::2], strict=True)]
    figures = {"trials": rows, "packed_over_per_run": [round(x, 3) for x in ratios],
               "median_ratio": round(statistics.median(ratios), 3),
               "conditions": {"fillers": args.fillers, "filler_s": args.filler_s,
                              "arrival_s": args.arrival_s, "max_jobs": args.max_jobs,
                              "runs": 6, "run_s": 4, "nodes": 4}}
    print(json.dumps(figures, indent=1) if args.json else
          "\n".join(f"{k}: {v}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
