"""What a rank measured of its input (DataStats) and the record's keys over all ranks:
input wait, decode time, bytes read and read bandwidth per node, staging (torch-free)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: A point is input-bound where the steps wait longer than this share for their batch
#: (the analysis layer keeps its own INPUT_BOUND; this one only words the log line).
INPUT_BOUND = 0.10


@dataclass
class DataStats:
    """One rank's input measurements; the sums cover the timed steps only."""

    kind: str
    path: str
    workers: int
    stage: str
    timed_steps: int = 0
    wait_s: float = 0.0  # summed over the timed steps
    decode_s: float = 0.0  # summed over the timed steps (all of the rank's workers)
    bytes_read: int = 0  # during the timed steps
    samples_seen: int = 0  # warm-up and timed steps
    epochs: int = 0  # epochs started
    stage_s: float = 0.0
    stage_bytes: int = 0


def _per_step(total: float, steps: int) -> float:
    return total / steps if steps else 0.0


def fields(stats: Sequence[DataStats | None], step_time_s: float, timed_s: float,
           nodes: int, model_parallel: int = 1) -> dict[str, object]:
    """The record's data keys (docs/results-layout.md): {"data_kind": "synthetic"} when
    the run trained on synthetic tensors."""
    ranks = [s for s in stats if s is not None]
    if not ranks:
        return {"data_kind": "synthetic"}
    first = ranks[0]
    waits = [_per_step(s.wait_s, s.timed_steps) for s in ranks]
    wait = sum(waits) / len(waits)
    bytes_read = sum(s.bytes_read for s in ranks)
    return {
        "data_kind": first.kind,
        "data_path": first.path,
        "data_workers": first.workers,
        "data_stage": first.stage,
        "input_wait_s": round(wait, 9),
        "input_wait_max_s": round(max(waits), 9),
        "input_wait_fraction": round(wait / step_time_s, 6) if step_time_s > 0 else 0.0,
        "decode_s": round(sum(_per_step(s.decode_s, s.timed_steps) for s in ranks)
                          / len(ranks), 9),
        "bytes_read": bytes_read,
        "read_GBps": round(bytes_read / timed_s / max(nodes, 1) / 1e9, 6) if timed_s > 0
        else 0.0,
        "stage_s": round(max(s.stage_s for s in ranks), 6),
        "stage_bytes": sum(s.stage_bytes for s in ranks),
        "samples_seen": sum(s.samples_seen for s in ranks) // max(model_parallel, 1),
        "epoch": max(s.epochs for s in ranks),
    }


def line(record: Mapping[str, object]) -> str | None:
    """`Input: waited 12.3 % of each step (0 workers), read 1.23 GB/s per node`."""
    if record.get("data_kind") in (None, "synthetic"):
        return None
    share = float(record.get("input_wait_fraction", 0.0))  # type: ignore[arg-type]
    text = (f"Input: waited {100 * share:.1f} % of each step ({record['data_workers']} "
            f"workers), read {float(record['read_GBps']):.3g} GB/s per node")  # type: ignore[arg-type]
    if float(record.get("stage_s", 0.0)) > 0:  # type: ignore[arg-type]
        text += f"; staged {int(record['stage_bytes']) / 1e9:.3g} GB in "  # type: ignore[call-overload]
        text += f"{float(record['stage_s']):.2f} s"  # type: ignore[arg-type]
    if share > INPUT_BOUND:
        text += " (input-bound: try more workers, staging, or fewer ranks per node)"
    return text
