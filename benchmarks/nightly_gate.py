"""The nightly gate over weeks, without a testbed: real run directories written night by
night, a real store file, and the real `history check` as a nightly CI job runs it.

    python benchmarks/nightly_gate.py [--nights 19] [--repeats 3] [--json]

Each night is one campaign of the same study (small_cnn at 1 and 2 nodes, batch 16,
`--repeats` repeats): every run's previous attempt is archived under attempts/<n>/ the
way `run --rerun all` does, the new one is written with the night's time, its env.txt
and its campaign, then `history ingest` and `history check --junit` run (in a fresh
interpreter each, as CI would). The scenario is the one users ran on a Slurm testbed
(benchmarks/nightly_series.py, `--change threads`): OMP_NUM_THREADS 1 -> 2 on nights
9-12 (per-GPU throughput --drop lower), reverted on 13-18, the batch size 16 -> 32 on
night 19; the noise is --cv within a night and --tau between nights. Nights are
numbered from 1. Prints per night the exit status, what the gate named and, from night
14, the exit status with `--baseline-tag night-13`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from scalestudy.execute import workspace as ws  # noqa: E402

START = datetime(2026, 6, 1, 2, 0, tzinfo=timezone.utc)


def params(nodes: int, batch: int, repeat: int) -> dict[str, Any]:
    """One run's parameters (as run.json holds them)."""
    return {"run_id": f"r{nodes}x1b{batch}n{repeat}", "study": "nightly", "system": "lab",
            "scaling": "weak", "nodes": nodes, "ranks_per_node": 1, "world_size": nodes,
            "batch_size": batch, "global_batch": batch * nodes, "backend": "ddp",
            "tuning": "default", "repeat": repeat, "workload": "synthetic",
            "model": "small_cnn", "image_size": 32, "precision": "fp32"}


def write_night(study: Path, night: int, levels: dict[tuple[int, int], float],
                env: dict[str, str], repeats: int, rng: random.Random,
                cv: float = 0.02, tau: float = 0.01) -> str:
    """One campaign: every (nodes, batch) point of `levels` at its per-GPU level, with
    the night's shift and each repeat's noise; its campaign id."""
    when = START + timedelta(days=night - 1)
    campaign = f"{when:%Y%m%dT%H%M%S}-{night:04x}"
    shift = rng.gauss(0, tau)
    tags = f"night-{night}"
    for (nodes, batch), level in levels.items():
        for repeat in range(repeats):
            p = params(nodes, batch, repeat)
            d = study / "runs" / p["run_id"]
            if d.is_dir():
                ws.archive_attempt(d, campaign)
            else:
                d.mkdir(parents=True)
                ws.write_run(d, p)
                (d / ws.CAMPAIGN).write_text(campaign + "\n")
            per_gpu = level * math.exp(shift + rng.gauss(0, cv))
            record = {"schema": "scalestudy.metrics/1", "source": "workload",
                      "throughput": per_gpu * nodes, "world_size": nodes, "batch_size": batch,
                      "global_batch": batch * nodes, "hosts": [f"n{i}" for i in range(nodes)]}
            (d / "metrics.jsonl").write_text(json.dumps(record) + "\n")
            (d / "env.txt").write_text("".join(f"{k}={v}\n" for k, v in sorted(
                {**env, "SCALESTUDY_TAGS": tags, "SCALESTUDY_SYSTEM": "lab"}.items())))
            (d / "status.json").write_text(json.dumps({"state": "completed", "exit_code": 0}))
            ended = (when + timedelta(minutes=repeat + 2 * nodes)).timestamp()
            for name in ("env.txt", "status.json", "metrics.jsonl", ws.CAMPAIGN):
                os.utime(d / name, (ended, ended))
    return campaign


def scenario(night: int, drop: float) -> tuple[dict[tuple[int, int], float], dict[str, str]]:
    """The users' 19 nights: threads 1 -> 2 on nights 9-12, batch 32 on night 19."""
    threads = 2 if 9 <= night <= 12 else 1
    batch = 32 if night >= 19 else 16
    factor = (1 - drop) if threads == 2 else 1.0
    levels = {(n, batch): 100.0 * (0.95 if n > 1 else 1.0) * factor * (1.1 if batch == 32
                                                                       else 1.0)
              for n in (1, 2)}
    return levels, {"OMP_NUM_THREADS": str(threads), "NCCL_ALGO": "Ring"}


def cli(*args: str, cwd: Path, store: Path) -> subprocess.CompletedProcess[str]:
    """`scalestudy ARGS` in a fresh interpreter, as a nightly CI job runs it."""
    env = {**os.environ, "SCALESTUDY_STORE": str(store), "COLUMNS": "250",
           "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", "from scalestudy.cli import main; main()",
                           *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def gate(work: Path, store: Path, *extra: str) -> dict[str, Any]:
    """One `history check` of the study: its exit status and what it printed."""
    done = cli("history", "check", str(work / "results" / "nightly"), "--junit",
               str(work / "junit.xml"), *extra, cwd=work, store=store)
    lines = done.stdout.splitlines()
    return {"exit": done.returncode,
            "regressions": sum("REGRESSION" in line for line in lines),
            "named": [line for line in lines if "REGRESSION" in line or "change point:" in line
                      or "NOT TESTED" in line or "no alarm:" in line],
            "notes": [line for line in done.stderr.splitlines() if line.startswith("note:")],
            "error": done.stderr.strip().splitlines()[-1] if done.returncode else ""}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nights", type=int, default=19)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--drop", type=float, default=0.30)
    parser.add_argument("--cv", type=float, default=0.02)
    parser.add_argument("--tau", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="nightly-gate-"))
    store, study = work / "store.sqlite", work / "results" / "nightly"
    rng = random.Random(args.seed)
    nights: list[dict[str, Any]] = []
    started = time.monotonic()
    for night in range(1, args.nights + 1):
        levels, env = scenario(night, args.drop)
        write_night(study, night, levels, env, args.repeats, rng, args.cv, args.tau)
        got = {"night": night, "threads": env["OMP_NUM_THREADS"],
               "batch": next(iter(levels))[1], **gate(work, store)}
        if night >= 14:
            got["with_baseline_night_13"] = gate(work, store, "--baseline-tag",
                                                 "night-13")["exit"]
        nights.append(got)
        if not args.json:
            extra = (f", with --baseline-tag night-13: exit {got['with_baseline_night_13']}"
                     if "with_baseline_night_13" in got else "")
            print(f"night {night:2d} (threads {got['threads']}, batch {got['batch']}): "
                  f"exit {got['exit']}{extra}", flush=True)
            for line in got["named"]:
                print(f"    {line}")
            for line in got["notes"]:
                print(f"    {line}")
            if got["error"]:
                print(f"    {got['error']}")
    summary = {"nights": nights, "seconds": round(time.monotonic() - started, 1),
               "repeats": args.repeats, "drop": args.drop, "cv": args.cv, "tau": args.tau,
               "seed": args.seed, "work": str(work)}
    (work / "result.json").write_text(json.dumps(summary, indent=1))
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{args.nights} nights in {summary['seconds']} s; kept in {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
