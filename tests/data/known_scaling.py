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

#: Per-GPU compute: (batch + 16) ms per step (small batches use a GPU less well).
COMPUTE_MS_PER_SAMPLE = 1.0
COMPUTE_MS_FIXED = 16.0
#: tuning -> (bandwidth term c in seconds, log2 P latency in seconds, compute factor):
#: fp16-wire halves what is sent but pays 4 % of compute for the casts.
TUNINGS = {"default": (0.040, 0.004, 1.00), "fp16-wire": (0.020, 0.004, 1.04)}
NOISE = 0.01
SLEEP_S = 0.2


def step_time(nodes: int, batch: int, tuning: str) -> float:
    """Seconds per step on `nodes` nodes of one GPU each."""
    c, alpha, slower = TUNINGS[tuning]
    compute = (batch * COMPUTE_MS_PER_SAMPLE + COMPUTE_MS_FIXED) / 1000 * slower
    return compute + c * 2 * (nodes - 1) / nodes + alpha * math.log2(nodes)


def throughput(nodes: int, batch: int, tuning: str) -> float:
    """The true total samples/s."""
    return nodes * batch / step_time(nodes, batch, tuning)


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
