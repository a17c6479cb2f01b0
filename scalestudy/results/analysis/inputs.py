"""Input-bound points: where a step waits for its batch more than INPUT_BOUND of the
time, and what the data suggests (more loader workers, staging, fewer ranks per node).

Reads the bundled workload's record keys (`input_wait_fraction`, `decode_s`,
`input_wait_s`, `read_GBps`, `data_workers`, `data_stage`; a `command` program may print
them too, see docs/benchmark.md). Synthetic data has no `input_wait_fraction`, so it is
never flagged.
"""

from __future__ import annotations

import math

import pandas as pd

from scalestudy.core.values import number
from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.phrases import gpus_text, names_text

#: A point is input-bound when its median input wait exceeds this share of the step.
INPUT_BOUND = 0.10
#: Bytes of dataset files read per timed second per node, in GB (1e9).
READ_GBPS = "read_GBps"
#: Loader workers plus the training process want a core each: fewer cores per rank than
#: this many per worker + 1 is "few".
_CORES_PER_PROCESS = 1.0


def _number(row: pd.Series, name: str) -> float:
    """A cell as a float; NaN where absent or not a number."""
    value = number(row.get(name), text=True, booleans=True, finite=False)
    return math.nan if value is None else value


def suggestions(row: pd.Series) -> list[str]:
    """What the data suggests for one input-bound point, most likely first: more loader
    workers where decoding takes at least the wait (or is not known), staging where
    reading is the rest of it, fewer ranks per node where each rank has fewer cores than
    its workers and itself."""
    wait, decode = _number(row, col.INPUT_WAIT_S), _number(row, col.DECODE_S)
    workers = _number(row, col.DATA_WORKERS)
    n = 0 if math.isnan(workers) else int(workers)
    stage = str(row.get(col.DATA_STAGE) or "none")
    out = []
    decoding = math.isnan(decode) or math.isnan(wait) or decode >= wait
    if decoding:
        took = "" if math.isnan(decode) else f": decoding takes {decode:.3g} s per step"
        out.append(f"more data_workers (now {n}){took}")
    elif stage in ("none", "nan"):
        read = _number(row, READ_GBPS)
        bw = "" if math.isnan(read) else f" (read {read:.3g} GB/s per node)"
        out.append(f"`data_stage: local` or `shm`{bw}: reading, not decoding "
                   f"({decode:.3g} of {wait:.3g} s per step), is the wait")
    cores, ranks = _number(row, "host_cores"), _number(row, "ranks_per_host")
    if not math.isnan(cores) and not math.isnan(ranks) and ranks > 0:
        per_rank = cores / ranks
        if per_rank < (n + 1) * _CORES_PER_PROCESS:
            out.append(f"fewer ranks per node ({per_rank:.3g} cores per rank for {n} "
                       "worker(s) and the training process)")
    return out


def input_findings(table: pd.DataFrame) -> list[str]:
    """One finding naming the input-bound points (median input wait > INPUT_BOUND of the
    step), their share, and what the worst one's data suggests; none without the key."""
    if col.INPUT_WAIT_FRACTION not in table.columns or table.empty:
        return []
    share = pd.to_numeric(table[col.INPUT_WAIT_FRACTION], errors="coerce")
    bound = table[share > INPUT_BOUND].assign(_share=share[share > INPUT_BOUND])
    if bound.empty:
        return []
    bound = bound.sort_values("_share", ascending=False)
    where = [f"{r.get(col.GROUP, '')} at {gpus_text(r[col.WORLD_SIZE])}: {r['_share']:.0%}"
             .lstrip() for _, r in bound.iterrows()]
    worst = suggestions(bound.iloc[0])
    advice = f" The data suggests {'; or '.join(worst)}." if worst else ""
    return [f"Input-bound ({len(bound)} of {len(table)} points wait for their batch more "
            f"than {INPUT_BOUND:.0%} of each step): {names_text(where)}.{advice}"]
