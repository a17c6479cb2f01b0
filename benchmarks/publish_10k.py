"""Publish a store of 10,000 attempts as a site; print the build time, the site's size, and
what a rebuild after one new study writes (targets: at most 30 s on two cores, at most
25 MB, and a rebuild that rewrites only the new study's pages, its system page and the
index).

    python benchmarks/publish_10k.py [--nights 125] [--keep DIR]

The store is made first, untimed: 2 systems x 2 models, one study directory a night for
`--nights` nights, each 5 scales (1-16 nodes, 4 GPUs a node) x 4 repeats = 20 attempts
(10,000 at 125 nights), written as real run directories (run.json, status.json,
metrics.jsonl with per-rank hosts and compute times, env.txt, times set on the files) and
ingested with `history ingest`. Polaris' NCCL goes from 2.21.5 to 2.23.4 at night 80, and
its runs at 8 and more nodes lose 8 % then; on Frontier, host f0003 computes 15 % slower;
the ledger holds forecasts of 32 and 64 nodes, made at night 60. `publish` is timed as a
user runs it: the `scalestudy` command, in its own process.
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
SYSTEMS = ("polaris", "frontier")
MODELS = {"resnet50": (25.6e6, 0.0012), "vit_b16": (86.6e6, 0.0030)}
NODES = (1, 2, 4, 8, 16)
RPN = 4
REPEATS = 4
BATCH = 64
START = datetime(2026, 3, 1, 2, 0, tzinfo=timezone.utc)
CHANGE_NIGHT = 80


def step_time(system: str, model: str, nodes: int, night: int, rng: random.Random,
              change_night: int = CHANGE_NIGHT) -> float:
    """A step's time from a communication model, with 2 % noise (and the night's change)."""
    params, per_sample = MODELS[model]
    world = nodes * RPN
    comm = 2 * (world - 1) / world * params * 4 / 20e9 + 30e-6 * math.log2(world)
    slower = 1.08 if system == "polaris" and night >= change_night and nodes >= 8 else 1.0
    return (BATCH * per_sample + comm) * slower * (1 + 0.02 * rng.gauss(0, 1))


def write_study(results: Path, system: str, model: str, night: int, rng: random.Random,
                change_night: int = CHANGE_NIGHT) -> Path:
    """One night's study directory: 5 scales x 4 repeats, all completed (Polaris' NCCL
    changes, and its larger scales slow, from `change_night` on)."""
    name = f"nightly-{system}-{model}-{night:03d}"
    study = results / name
    ended = START + timedelta(days=night)
    nccl = "2.23.4" if system == "polaris" and night >= change_night else "2.21.5"
    for nodes in NODES:
        world = nodes * RPN
        for rep in range(REPEATS):
            run_id = f"{model}-n{nodes}-r{rep}"
            d = study / "runs" / run_id
            d.mkdir(parents=True)
            params = {"run_id": run_id, "study": name, "system": system, "scaling": "weak",
                      "nodes": nodes, "ranks_per_node": RPN, "world_size": world,
                      "batch_size": BATCH, "global_batch": BATCH * world, "backend": "ddp",
                      "tuning": "default", "repeat": rep, "workload": "synthetic",
                      "model": model, "image_size": 224, "precision": "bf16"}
            step = step_time(system, model, nodes, night, rng, change_night)
            hosts = [f"{system[0]}{i:04d}" for i in range(nodes)]
            rank_hosts = [h for h in hosts for _ in range(RPN)]
            compute = BATCH * MODELS[model][1]
            rank_compute = [compute * (1.15 if h == "f0003" else 1.0) * (1 + 0.01 * rng.gauss(0, 1))
                            for h in rank_hosts]
            record = {"schema": "scalestudy.metrics/2", "source": "workload",
                      "throughput": BATCH * world / step, "world_size": world,
                      "nodes": nodes, "batch_size": BATCH, "global_batch": BATCH * world,
                      "model": model, "iter_time_mean": step, "step_time_s": step,
                      "iters": 20, "warmup_iters": 5, "hosts": hosts,
                      "rank_hosts": rank_hosts, "rank_compute_s": rank_compute,
                      "torch_version": "2.13.0", "python_version": "3.11.2",
                      "provenance": {"versions": {"nccl": nccl}}}
            (d / "run.json").write_text(json.dumps(params))
            (d / "env.txt").write_text(f"SCALESTUDY_SYSTEM={system}\nNCCL_DEBUG=WARN\n")
            (d / "metrics.jsonl").write_text(json.dumps(record) + "\n")
            (d / "status.json").write_text(json.dumps(
                {"state": "completed", "exit_code": 0, "elapsed_s": 60.0, "reason": None}))
            at = (ended + timedelta(minutes=nodes * 5 + rep)).timestamp()
            os.utime(d / "env.txt", (at - 60, at - 60))
            os.utime(d / "status.json", (at, at))
    return study


def forecasts(night: int) -> list[dict[str, Any]]:
    """The ledger's forecasts of 32 and 64 nodes, made at `night`."""
    made = START + timedelta(days=night)
    out = []
    for system in SYSTEMS:
        for model in MODELS:
            for nodes in (32, 64):
                world = nodes * RPN
                thr = BATCH * world / step_time(system, model, nodes, night, random.Random(0))
                out.append({"made": made, "system": system, "source": f"nightly-{night}",
                            "point": {"model": model, "batch_size": BATCH, "backend": "ddp",
                                      "tuning": "default"},
                            "gpus": world, "throughput": thr, "low": thr * 0.93,
                            "high": thr * 1.07, "level": 0.9, "unit": "img/s",
                            "model": {"kind": "alpha-beta"}})
    return out


def scalestudy(*args: str) -> tuple[float, str]:
    """Run the scalestudy command; its wall time and stderr."""
    began = time.perf_counter()
    command = [sys.executable, "-c", "from scalestudy.cli import main; main()", *args]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    took = time.perf_counter() - began
    if done.returncode:
        raise SystemExit(f"scalestudy {' '.join(args)} failed:\n{done.stderr}")
    return took, done.stderr.strip()


def size_of(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=125)
    parser.add_argument("--keep", type=Path, help="make everything here and keep it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="publish10k.") as tmp:
        base = args.keep or Path(tmp)
        results, site = base / "results", base / "site"
        store = f"sqlite:///{base / 'store.sqlite'}"
        rng = random.Random(7)
        began = time.perf_counter()
        for night in range(args.nights):
            for system in SYSTEMS:
                for model in MODELS:
                    write_study(results, system, model, night, rng)
        from scalestudy.results.history.store import Store

        s = Store(store)
        attempts = sum(s.ingest(d) for d in sorted(results.iterdir()))
        s.put_forecasts(forecasts(min(60, args.nights - 1)))
        s.dispose()
        print(f"store: {attempts} attempts in {len(list(results.iterdir()))} studies "
              f"(made in {time.perf_counter() - began:.0f} s, untimed)")
        took, said = scalestudy("publish", "-o", str(site), "--store", store)
        print(f"publish: {took:.1f} s ({said}); site {size_of(site) / 1e6:.1f} MB")
        again, said = scalestudy("publish", "-o", str(site), "--store", store)
        print(f"publish again, nothing new: {again:.1f} s ({said})")
        before = {p: p.stat().st_mtime_ns for p in site.rglob("*") if p.is_file()}
        new = write_study(results, "polaris", "resnet50", args.nights, rng)
        s = Store(store)
        s.ingest(new)
        s.dispose()
        took2, said = scalestudy("publish", "-o", str(site), "--store", store)
        changed = sorted(str(p.relative_to(site)) for p in site.rglob("*") if p.is_file()
                         and before.get(p) != p.stat().st_mtime_ns)
        print(f"publish after one new study: {took2:.1f} s ({said}); files rewritten:")
        for name in changed:
            print(f"  {name}")
        ok = took <= 30 and size_of(site) <= 25e6
        print("targets (<= 30 s, <= 25 MB):", "met" if ok else "NOT met")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
