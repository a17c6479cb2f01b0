"""Plan and render a 10,000-run grid; report the time (target: under 1 s).

    python benchmarks/plan_render.py [--write DIR]

Expansion (Study -> [Run]) and rendering (Run -> job script text) are timed apart;
`--write DIR` also writes every script, as `run --dry-run` would, and times that.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from scalestudy.core.grid import expand
from scalestudy.core.load import parse_study
from scalestudy.execute.workspace import write_text_atomic
from scalestudy.site.profiles import load_system
from scalestudy.site.render import render

SPEC = """
name: bench
workload: {model: resnet50, image_size: 224}
grid:
  nodes: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
  ranks_per_node: [1, 2, 3, 4, 8]
  batch_size: [8, 16, 24, 32, 48, 64, 96, 128, 192, 256]
  tuning: [default, ring, tree, big-buffers]
tuning:
  ring: {env: {NCCL_ALGO: Ring}}
  tree: {env: {NCCL_ALGO: Tree}}
  big-buffers: {env: {NCCL_BUFFSIZE: 8388608, NCCL_NTHREADS: 512}}
repeats: 5
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="also write the scripts under this directory")
    args = parser.parse_args()

    t0 = time.perf_counter()
    study = parse_study(SPEC, "bench.yaml")
    system = load_system(study.system)
    runs = expand(study)
    t1 = time.perf_counter()
    scripts = [render(study, system, r, Path("/results/bench/runs") / r.run_id) for r in runs]
    t2 = time.perf_counter()
    print(f"runs: {len(runs)}  ({len({r.run_id for r in runs})} distinct ids)")
    print(f"plan (parse + expand): {t1 - t0:.3f} s")
    print(f"render: {t2 - t1:.3f} s  ({(t2 - t1) / len(runs) * 1e6:.0f} us/run, "
          f"{sum(map(len, scripts)) / 1e6:.1f} MB of script)")
    print(f"plan + render: {t2 - t0:.3f} s  (target < 1 s)")
    if args.write:
        for run, text in zip(runs, scripts, strict=True):
            write_text_atomic(args.write / run.run_id / "job.sh", text, mode=0o755)
        print(f"write {len(runs)} scripts: {time.perf_counter() - t2:.3f} s")


if __name__ == "__main__":
    main()
