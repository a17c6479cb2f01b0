"""`history nodes`' rule replayed on the runs of recorded slow-node trials: what today's
rule names, study after study, on the very runs benchmarks/slow_nodes.py measured.

    python benchmarks/slow_nodes_replay.py --extract /tmp/sn-flux --out runs.jsonl
    python benchmarks/slow_nodes_replay.py dev/slow-nodes-2026-11-27/*-runs.jsonl

`--extract` reads a slow_nodes.py output directory (its trials.jsonl and each trial's
results store) and writes one line per run: the trial, the slowed node (null: a clean
trial), the study and the run's per-rank hosts and compute times. Without it, each file
is replayed: in each trial, `results.history.nodes.slow_nodes` over the runs of its first k
studies, k = 1, 2, ..., until a node is named. A trial stopped where the rule of its day
named a node, so a rule that names later than that finds no more studies: its recall is
a lower bound; precision, and the clean trials (all their studies are there), are exact.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scalestudy.results.history.nodes import slow_nodes  # noqa: E402


def extract(directory: Path) -> list[dict[str, Any]]:
    from scalestudy.results.history.store import Store

    slow = {}
    for line in (directory / "trials.jsonl").read_text().splitlines():
        trial = json.loads(line)
        slow[trial["trial"]] = trial["slow"]
    out = []
    for trial_dir in sorted(directory.glob("trial-*")):
        k = int(trial_dir.name.split("-")[1])
        for row in Store(f"sqlite:///{trial_dir / 'store.sqlite'}").rows():
            if row.get("study") == "excluded" or row.get("state") != "completed":
                continue  # the exclusion check's study is not evidence
            metrics = row.get("metrics") or {}
            out.append({"trial": k, "slow": slow.get(k), "study": row["study"],
                        "system": row.get("system"),
                        "rank_hosts": metrics.get("rank_hosts"),
                        "rank_compute_s": metrics.get("rank_compute_s")})
    return out


def replay(lines: list[dict[str, Any]]) -> dict[str, Any]:
    trials: dict[int, list[dict[str, Any]]] = {}
    for line in lines:
        trials.setdefault(line["trial"], []).append(line)
    right = wrong = found = faulted = clean = clean_named = 0
    studies_to_name: list[int] = []
    for runs in trials.values():
        slow = runs[0]["slow"]
        studies = sorted({r["study"] for r in runs})
        named: list[str] = []
        for k in range(1, len(studies) + 1):
            rows = [{"state": "completed", "system": r["system"], "study": r["study"],
                     "metrics": {"rank_hosts": r["rank_hosts"],
                                 "rank_compute_s": r["rank_compute_s"]}}
                    for r in runs if r["study"] in studies[:k]]
            named = [n.host for n in slow_nodes(rows).slow]
            if named:
                break
        right += sum(h == slow for h in named)
        wrong += sum(h != slow for h in named)
        if slow is None:
            clean += 1
            clean_named += len(named)
        else:
            faulted += 1
            if slow in named:
                found += 1
                studies_to_name.append(k)
    return {"faulted_trials": faulted, "clean_trials": clean, "named": right + wrong,
            "named_right": right, "precision": right / (right + wrong) if right + wrong else 1.0,
            "recall_at_least": found / faulted if faulted else 1.0,
            "clean_accusations": clean_named, "studies_to_name": sorted(studies_to_name)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--extract", type=Path, help="a slow_nodes.py output directory")
    parser.add_argument("--out", type=Path, help="with --extract: the JSONL to write")
    args = parser.parse_args()
    if args.extract:
        lines = extract(args.extract)
        text = "".join(json.dumps(line) + "\n" for line in lines)
        (args.out.write_text(text) if args.out else sys.stdout.write(text))
        return 0
    for path in args.files:
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        print(f"{path.name}: {json.dumps(replay(lines))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
