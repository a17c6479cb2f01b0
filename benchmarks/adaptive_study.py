"""An adaptive study against its full grid, on a program whose throughput is a known
function of nodes, batch and tuning with 1 % noise (tests/data/known_scaling.py): does
`run --adaptive` find every point of the true front, and what share of the full grid's
node-hours does it spend? The full grid is not run: its node-hours are the plan's
(nodes x walltime, every run), and so are the adaptive study's, over the runs it ran.

    python benchmarks/adaptive_study.py [--nodes 1,2,4,8,16] [--out DIR] [--json]
    eval "$(scripts/slurm-testbed start --nodes 16)"
    python benchmarks/adaptive_study.py --system slurm [--nodes 1,2,4,8,16]

Exit 0 when the front is found within 35 % of the grid's node-hours, 1 when not, 2 when
the Slurm testbed is not running or has too few nodes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(DATA)]

import known_scaling as known  # noqa: E402
from testbeds import slurm_profile  # noqa: E402

from scalestudy.core.grid import expand  # noqa: E402
from scalestudy.core.load import load_study  # noqa: E402

BOUND = 0.35


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--system", choices=("local", "slurm"), default="local")
    parser.add_argument("--nodes", default="1,2,4,8,16")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    nodes = [int(n) for n in args.nodes.split(",")]
    out = args.out or Path(tempfile.mkdtemp(prefix="adaptive-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    system = "local"
    if args.system == "slurm":
        have = _slurm_nodes()
        if have < max(nodes):
            print(f"the Slurm testbed has {have} node(s), the study needs {max(nodes)}: "
                  f'eval "$(scripts/slurm-testbed start --nodes {max(nodes)})"',
                  file=sys.stderr)
            return 2
        profile = slurm_profile("testbed-adaptive").replace(
            "max_nodes: 4", f"max_nodes: {max(nodes)}").replace("(4 virtual", f"({have} virtual")
        (out / "profile.yaml").write_text(profile)
        system = "profile.yaml"
    spec = out / "study.yaml"
    spec.write_text(known.STUDY.format(name="adaptive-bench", system=system,
                                       python=json.dumps(sys.executable),
                                       program=json.dumps(str(DATA / "known_scaling.py")),
                                       nodes=json.dumps(nodes)))
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", "from scalestudy.cli import main; main()",
                           "run", str(spec), "--adaptive"],
                          cwd=out, capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode != 0:
        print(done.stderr[-4000:], file=sys.stderr)
        return 1
    got = score(spec, out / "results" / "adaptive-bench")
    got.update({"system": args.system, "nodes": nodes, "wall_s": round(wall, 1)})
    if args.json:
        print(json.dumps(got))
    else:
        print(f"{args.system}, nodes {nodes}: {got['points_measured']} of {got['points']} "
              f"points measured ({got['measured_fully']} fully, {got['measured_partly']} "
              f"partly) in {got['rounds']} round(s); the true front "
              f"({got['front']} points) {'found' if got['front_found'] else 'NOT found'}; "
              f"node-hours {got['share_planned']:.1%} of the full grid's (nodes x "
              f"walltime); {wall:.0f} s")
    return 0 if got["front_found"] and got["share_planned"] <= BOUND else 1


def score(spec: Path, directory: Path) -> dict[str, object]:
    """What the adaptive study measured against the truth and the full grid."""
    study = load_study(spec)
    runs = expand(study)
    points = {(r.batch_size, r.tuning, r.nodes) for r in runs}
    front = known.true_front(points)
    frame = pd.read_csv(directory / "runs.csv")
    done = frame[frame["state"] == "completed"]
    measured = known.measured(frame)
    lines = [json.loads(line) for line in
             (directory / "adaptive.jsonl").read_text().splitlines() if line.strip()]
    rounds = sum(1 for line in lines if line.get("kind") == "round")
    tally = next((line["tally"] for line in reversed(lines) if "tally" in line), {})
    return {"points": len(points), "points_measured": len(measured), "rounds": rounds,
            "measured_fully": tally.get("measured_fully"),
            "measured_partly": tally.get("measured_partly"),
            "front": len(front), "front_found": front <= measured,
            "share_planned": float(done["nodes"].sum()) / sum(r.nodes for r in runs)}


def _slurm_nodes() -> int:
    """Nodes of the running Slurm testbed (0: none is running)."""
    if not os.environ.get("SLURM_CONF"):
        return 0
    got = subprocess.run(["sinfo", "-h", "-o", "%D"], capture_output=True, text=True)
    try:
        return sum(int(x) for x in got.stdout.split())
    except ValueError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
