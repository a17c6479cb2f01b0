"""Write benchmarks/data/target_rcps.csv from a clone of mlcommons/logging: every training
benchmark's latest RCP set (mlperf_logging/rcp_checker/training_*/rcps_*.json), one row per
reference run (global batch, epochs or samples to converge), with the file it came from.

    git clone https://github.com/mlcommons/logging && \
        python benchmarks/target_rcps_extract.py logging

The data is Apache-2.0 (benchmarks/data/LICENSE-mlcommons-logging.txt).
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).parent / "data" / "target_rcps.csv"
PATTERN = re.compile(r"mlperf_logging/rcp_checker/training_([\d.]+)/rcps_(\w+)\.json")


def _git(repo: Path, *args: str) -> str:
    return subprocess.check_output(["git", "-C", str(repo), *args], text=True)


def main(repo: Path) -> int:
    """Extract the latest RCP set of each benchmark at `repo`'s HEAD into OUT."""
    commit = _git(repo, "rev-parse", "HEAD").strip()
    latest: dict[str, tuple[tuple[int, ...], str]] = {}
    for path in _git(repo, "ls-tree", "-r", "--name-only", "HEAD").split():
        m = PATTERN.fullmatch(path)
        if m:
            version = tuple(int(x) for x in m.group(1).split("."))
            if m.group(2) not in latest or version > latest[m.group(2)][0]:
                latest[m.group(2)] = (version, path)
    rows = []
    for name, (_, path) in sorted(latest.items()):
        for entry in json.loads(_git(repo, "show", f"HEAD:{path}")).values():
            key = next(k for k in entry if k.lower() in ("epochs to converge",
                                                          "samples to converge"))
            for i, value in enumerate(entry[key]):
                rows.append({"benchmark": name, "global_batch": entry["BS"],
                             "to_converge": value, "unit": key.split()[0].lower(),
                             "run": i, "source": path})
    with OUT.open("w", newline="") as f:
        f.write(f"# mlcommons/logging at {commit} (Apache-2.0, see "
                "LICENSE-mlcommons-logging.txt): each benchmark's latest RCP set, one row "
                "per reference run\n")
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"{OUT}: {len(rows)} runs of {len(latest)} benchmarks")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
