"""What one poll cycle of a 1,000-run study costs scalestudy itself, on a real disk.

    python benchmarks/poll_cycle.py [--runs 1000] [--running 100] [--cycles 20] [--dir DIR]

A study of RUNS runs is submitted to a scheduler faked at the process boundary (its
sacct answers at once, so only scalestudy's own work is timed); all but RUNNING jobs
then complete. The benchmark times `Tracker.refresh` (what `run --wait` does each
cycle) and counts, per cycle, the status files written and the failure diagnoses run:
the first cycle settles the ended jobs; later cycles must write nothing and diagnose
nothing. For comparison it also times a fresh tracker per cycle (every run's files read
again, as `scalestudy status` does once). The study lives under --dir (default: a
directory next to this file, on the repository's disk, not /dev/shm).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scalestudy.execute import diagnose, tracking  # noqa: E402
from scalestudy.execute import workspace as ws  # noqa: E402
from scalestudy.site.plan import make_plan  # noqa: E402

PROFILE = "name: fake\nscheduler: slurm\nlauncher: srun\nmax_nodes: 8\n"
SPEC = """name: poll
system: {profile}
workload: {{model: small_cnn}}
grid: {{nodes: [1, 2, 4, 8], batch_size: [8, 16, 32, 64, 128]}}
repeats: {repeats}
"""


class FakeSlurm:
    """sbatch hands out ids; sacct answers from a table."""

    def __init__(self) -> None:
        self.next_id = 1000
        self.states: dict[str, str] = {}

    def __call__(self, argv: Sequence[str], cwd: Path | None = None) -> tuple[int, str, str]:
        if "--name" in argv:
            return 0, "", ""
        if argv[0] == "sbatch":
            self.next_id += 1
            self.states[str(self.next_id)] = "PENDING|0:0"
            return 0, f"{self.next_id}\n", ""
        ids = argv[argv.index("-j") + 1].split(",")
        return 0, "".join(f"{i}|{self.states[i]}|None\n" for i in ids if i in self.states), ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000, help="a multiple of 20")
    parser.add_argument("--running", type=int, default=100)
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--dir", type=Path, default=ROOT / "benchmarks")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix=".poll-", dir=args.dir))
    writes = diagnoses = 0
    real_write, real_tail = ws.write_atomic, diagnose._tail

    def counting_write(*a: object, **k: object) -> None:
        nonlocal writes
        writes += 1
        real_write(*a, **k)  # type: ignore[arg-type]

    def counting_tail(*a: object, **k: object) -> str:  # what every diagnosis reads
        nonlocal diagnoses
        diagnoses += 1
        return real_tail(*a, **k)  # type: ignore[arg-type]

    ws.write_atomic = counting_write  # type: ignore[assignment]
    diagnose._tail = counting_tail  # type: ignore[assignment]
    try:
        (work / "fake.yaml").write_text(PROFILE)
        (work / "study.yaml").write_text(SPEC.format(profile=work / "fake.yaml",
                                                     repeats=args.runs // 20))
        plan = make_plan(work / "study.yaml", work / "results")
        fake = FakeSlurm()
        started = time.perf_counter()
        tracking.submit_runs(plan, plan.runs, runner=fake)
        submit_s = time.perf_counter() - started
        for i, job_id in enumerate(sorted(fake.states)):
            if i >= args.running:
                fake.states[job_id] = "COMPLETED|0:0"
                run_id = next(e.run_id for e in tracking.journal(plan).entries()
                              if e.job_id == job_id)
                (plan.run_dir(next(r for r in plan.runs if r.run_id == run_id))
                 / ws.METRICS).write_text('{"throughput": 1.0}\n')
            else:
                fake.states[job_id] = "RUNNING|0:0"
        tracker = tracking.Tracker(plan, fake)
        cycles = []
        for _ in range(args.cycles):
            writes = diagnoses = 0
            t0 = time.perf_counter()
            tracker.refresh()
            cycles.append((time.perf_counter() - t0, writes, diagnoses))
        fresh = []
        for _ in range(5):
            t0 = time.perf_counter()
            tracking.Tracker(plan, fake).refresh()
            fresh.append(time.perf_counter() - t0)
    finally:
        ws.write_atomic, diagnose._tail = real_write, real_tail  # type: ignore[assignment]
        shutil.rmtree(work, ignore_errors=True)
    steady = cycles[2:]
    figures = {
        "runs": len(plan.runs), "running": args.running, "submit_s": round(submit_s, 2),
        "first_cycle_s": round(cycles[0][0], 4), "first_cycle_writes": cycles[0][1],
        "second_cycle_writes": cycles[1][1],
        "steady_cycle_s_median": round(statistics.median(c[0] for c in steady), 4),
        "steady_cycle_writes": sum(c[1] for c in steady),
        "steady_cycle_diagnoses": sum(c[2] for c in steady),
        "fresh_tracker_cycle_s_median": round(statistics.median(fresh), 4),
    }
    print(json.dumps(figures, indent=1))
    ok = figures["steady_cycle_writes"] == 0 and figures["steady_cycle_diagnoses"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
