"""A program whose throughput is a known function of nodes, batch and tuning, with about
1 % noise (seeded by the run id, so a rerun measures the same): what adaptive studies
are checked against (tests/test_e2e_adaptive.py, benchmarks/adaptive_study.py).

    python known_scaling.py NODES BATCH TUNING RUN_ID

Rank 0 (RANK, SLURM_PROCID, PMI_RANK, OMPI_COMM_WORLD_RANK or FLUX_TASK_RANK) prints
Horovod's throughput line; every rank sleeps SLEEP_S, as a short job would run.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import sys
import time
from typing import Any

#: Per-GPU compute: (batch + 16) ms per step (small batches use a GPU less well).
COMPUTE_MS_PER_SAMPLE = 1.0
COMPUTE_MS_FIXED = 16.0
#: tuning -> (bandwidth term c in seconds, log2 P latency in seconds, compute factor):
#: fp16-wire halves what is sent but pays 4 % of compute for the casts.
TUNINGS = {"default": (0.040, 0.004, 1.00), "fp16-wire": (0.020, 0.004, 1.04)}
NOISE = 0.01
SLEEP_S = 0.2
#: A study of this program over a grid of nodes x batch x tuning (format: name, system,
#: python, program: JSON strings; nodes: a JSON list).
STUDY = """name: {name}
system: {system}
workload:
  kind: command
  command: [{python}, {program}, "{{nodes}}", "{{batch_size}}", "{{tuning}}", "{{run_id}}"]
grid:
  nodes: {nodes}
  batch_size: [32, 64, 128]
  tuning: [default, fp16-wire]
repeats: 2
tuning:
  fp16-wire: {{description: gradients sent in fp16 (4 % more compute)}}
job: {{walltime: "00:05:00"}}
"""


def step_time(nodes: int, batch: int, tuning: str) -> float:
    """Seconds per step on `nodes` nodes of one GPU each."""
    c, alpha, slower = TUNINGS[tuning]
    compute = (batch * COMPUTE_MS_PER_SAMPLE + COMPUTE_MS_FIXED) / 1000 * slower
    return compute + c * 2 * (nodes - 1) / nodes + alpha * math.log2(nodes)


def throughput(nodes: int, batch: int, tuning: str) -> float:
    """The true total samples/s."""
    return nodes * batch / step_time(nodes, batch, tuning)


def true_front(points: set[tuple[int, str, int]]) -> set[tuple[int, str, int]]:
    """The (batch, tuning, nodes) points no other is both faster and cheaper than: time
    1 / throughput, node-hours nodes / throughput."""
    cost = {p: (1 / throughput(p[2], p[0], p[1]), p[2] / throughput(p[2], p[0], p[1]))
            for p in points}
    return {p for p, (t, c) in cost.items()
            if not any(t2 <= t and c2 <= c and (t2, c2) != (t, c) for t2, c2 in cost.values())}


def measured(frame: Any) -> set[tuple[int, str, int]]:
    """The (batch, tuning, nodes) points with a completed run in a study's runs.csv
    (a pandas DataFrame)."""
    done = frame[frame["state"] == "completed"]
    return {(int(b), str(t), int(n)) for b, t, n in
            zip(done["batch_size"], done["tuning"], done["nodes"], strict=True)}


def main() -> None:
    nodes, batch, tuning, run_id = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    rank = next((os.environ[v] for v in ("RANK", "SLURM_PROCID", "PMI_RANK",
                                         "OMPI_COMM_WORLD_RANK", "FLUX_TASK_RANK")
                 if v in os.environ), "0")
    time.sleep(SLEEP_S)
    if rank != "0":
        return
    seed = int(hashlib.sha256(run_id.encode()).hexdigest()[:12], 16)
    measured = throughput(nodes, batch, tuning) * (1 + random.Random(seed).gauss(0, NOISE))
    print(f"Total img/sec on {nodes} GPU(s): {measured:.2f}", flush=True)


if __name__ == "__main__":
    main()
