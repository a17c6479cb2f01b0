"""A nightly series on a real scheduler with a change made half way: does `history changes`
find it, when, and what does Apache Otava find on the same campaigns?

    eval "$(scripts/slurm-testbed start --nodes 4)"
    python benchmarks/nightly_series.py [--change quota|threads] [--campaigns 16] [--json]

Each campaign is one `run --rerun all --wait` of the same study (small_cnn, 2 and 4
nodes, one rank per node, 2 repeats) on the Slurm testbed, stored with `history ingest`,
as a nightly job would. From campaign `--at` on, the system changes:
- `quota`: node n2's slurmd (so every job step there) runs under a CPU quota of 30 % of a
  CPU (a 10 ms period), the way a degraded node drags every run that uses it;
- `threads`: the profile's threads per rank goes from 1 to 2, so OMP_NUM_THREADS and
  torch's threads double on the same cores (an environment change between nights).
Then `results.history.changes` runs over the stored history (what `history changes` prints), and
Otava's E-divisive (`apache-otava`, when installed) over each point's campaign means at
p 0.001 and 0.05. A change is found when it is placed at campaign `--at` .. `--at`+2;
any other is a false alarm. Exit 0 when scalestudy finds the change at every point, with
no false alarm.

Without a testbed, benchmarks/nightly_gate.py plays the users' 19 nights (threads
changed on 9-12, reverted on 13-18, the batch size changed on 19) on run directories it
writes, and runs the real `history check` each night as a CI job would.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from slow_nodes import Slurm, quota  # noqa: E402
from testbeds import slurm_profile  # noqa: E402

STUDY = """\
name: nightly
system: profile.yaml
workload: {model: small_cnn, image_size: 32, num_classes: 10, warmup_iters: 1, iters: 3,
           batches_per_iter: 8, diagnostics: false}
grid: {nodes: [2, 4], ranks_per_node: [1], batch_size: [8]}
repeats: 2
job: {walltime: "00:05:00"}
"""


def campaign(bed: Slurm, work: Path, env: dict[str, str]) -> None:
    done = bed.cli("run", "nightly.yaml", "--rerun", "all", "--wait", cwd=work, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"run failed: {done.stderr[-2000:]}")
    stored = bed.cli("history", "ingest", str(work / "results" / "nightly"), cwd=work,
                     env=env)
    if stored.returncode != 0:
        raise RuntimeError(f"history ingest failed: {stored.stderr[-2000:]}")


def analyse(store: str, at: int) -> dict[str, Any]:
    from scalestudy.results.history.changes import changes, series
    from scalestudy.study import history as uc

    rows = uc.history(store)
    every = series(rows)
    found = changes(rows)
    out: dict[str, Any] = {"points": {}}
    for (system, key), campaigns in every.items():
        label = f"{campaigns[0].rows[0]['world_size']} ranks"
        whens = [c.when for c in campaigns]
        ours = [whens.index(c.when) for c in found if c.key == key and c.system == system]
        point: dict[str, Any] = {
            "campaigns": len(campaigns),
            "means": [round(sum(c.values) / len(c.values), 2) for c in campaigns],
            "scalestudy": ours,
            "scalestudy_sizes": [round(c.size, 4) for c in found
                                 if c.key == key and c.system == system],
            "scalestudy_changed": [list(c.changed) for c in found
                                   if c.key == key and c.system == system]}
        with contextlib.suppress(ImportError):
            from otava.analysis import compute_change_points

            means = [sum(c.values) / len(c.values) for c in campaigns]
            for p in (0.001, 0.05):
                cps, _ = compute_change_points(means, window_len=len(means), max_pvalue=p)
                point[f"otava_p{p}"] = [int(c.index) for c in cps]
        out["points"][label] = point
    window = range(at, at + 3)
    for point in out["points"].values():
        for name in [k for k in point if k == "scalestudy" or k.startswith("otava_")]:
            hits = [k for k in point[name] if k in window]
            point[f"{name}_found"] = bool(hits)
            point[f"{name}_false"] = len(point[name]) - len(hits)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--change", choices=("quota", "threads"), default="quota")
    parser.add_argument("--campaigns", type=int, default=16)
    parser.add_argument("--at", type=int, default=8, help="first changed campaign (0-based)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    bed = Slurm()
    if len(bed.nodes()) < 4:
        print('needs the Slurm testbed with 4 nodes: eval "$(scripts/slurm-testbed start '
              '--nodes 4)"', file=sys.stderr)
        return 2
    work = args.out or Path(tempfile.mkdtemp(prefix=f"nightly-{args.change}-"))
    work.mkdir(parents=True, exist_ok=True)
    (work / "nightly.yaml").write_text(STUDY)
    store = f"sqlite:///{work / 'store.sqlite'}"
    env = {"SCALESTUDY_STORE": store}
    started = time.monotonic()
    for k in range(args.campaigns):
        changed = k >= args.at
        profile = slurm_profile("testbed-nightly")
        if changed and args.change == "threads":
            profile = profile.replace("threads_per_rank: 1", "threads_per_rank: 2")
        (work / "profile.yaml").write_text(profile)
        pid = bed.daemon_pid("n2") if changed and args.change == "quota" else None
        with quota(pid, 0.30):
            campaign(bed, work, env)
        print(f"campaign {k}{' (changed)' if changed else ''} done, "
              f"{time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    got = analyse(store, args.at)
    got.update(change=args.change, at=args.at, campaigns=args.campaigns,
               seconds=round(time.monotonic() - started))
    (work / "result.json").write_text(json.dumps(got, indent=1))
    if args.json:
        print(json.dumps(got))
    else:
        for label, p in got["points"].items():
            others = ", ".join(f"{k[6:]}: {p[k]}" for k in p
                               if k.startswith("otava_") and not k.endswith(("_found",
                                                                             "_false")))
            print(f"{args.change} from campaign {args.at}, {label}: scalestudy "
                  f"{p['scalestudy']} (sizes {p['scalestudy_sizes']}); Otava {others}")
    ok = all(p["scalestudy_found"] and p["scalestudy_false"] == 0
             for p in got["points"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
