"""What each kind of parallelism sends per training step, and what it idles: the
explanation of a transformer study's losses by factorisation (dp x tp x pp).

Per rank and optimizer step, for a model of P parameters (b bytes each on the wire),
L layers of width d, a sequence of T tokens, a per-replica batch B split into m
micro-batches, on a layout dp x tp x pp:

- **data parallel, DDP** (or DeepSpeed ZeRO-0/1/2): a ring allreduce of the rank's
  gradient shard, 2 (dp-1)/dp x P b / (tp pp) bytes;
- **data parallel, FSDP2** (or ZeRO-3): a reduce-scatter of the gradients and an
  all-gather of the parameters for the forward and again for the backward (resharded
  after the forward), 3 (dp-1)/dp x P b / (tp pp): 1.5 x DDP's bytes;
- **tensor parallel**: within each of the stage's L/pp layers, two allreduces of the
  activations (B T d b bytes) in the forward and two in the backward (Megatron-LM's
  column/row split), each moving 2 (tp-1)/tp of its size: on the critical path, not
  overlapped with compute;
- **pipeline parallel**: point-to-point activations, B T d b bytes forward and the same
  gradient backward across each stage boundary, and the bubble: (p-1)/(m+p-1) of the
  step every stage idles (GPipe and 1F1B alike).

The bytes are the model's, not measured; the throughput and its losses are measured.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from scalestudy.core.values import number
from scalestudy.results.analysis import columns as col
from scalestudy.workload.names import TRANSFORMER_SHAPES

#: Bytes per element on the wire by precision (gradients and activations).
BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
TRAFFIC_COLUMNS: tuple[str, ...] = ("dp_bytes", "tp_bytes", "pp_bytes", "bubble")


def _int(value: object, default: int = 1) -> int:
    found = number(value, text=True, booleans=True)
    return int(found) if found is not None and found > 0 else default


def traffic(row: pd.Series | Mapping[str, str | float | None]) -> dict[str, float]:
    """Bytes one rank sends per optimizer step by kind, and the pipeline bubble, for one
    point of a transformer study (NaN for a model that is not one of the transformers)."""
    get = row.get
    model = str(get("model") or "")
    if model not in TRANSFORMER_SHAPES:
        return dict.fromkeys(TRAFFIC_COLUMNS, float("nan"))
    layers, d, _, _ = TRANSFORMER_SHAPES[model]
    world = _int(get("world_size"))
    tp, pp = _int(get("tp")), _int(get("pp"))
    dp = _int(get("dp"), max(1, world // (tp * pp)))
    m = _int(get("microbatches"), pp) if pp > 1 else 1
    m = m if m > 1 or pp == 1 else pp
    seq = _int(get("seq_len"), 1024)
    batch = _int(get("batch_size"))
    wire = BYTES.get(str(get("precision") or "fp32"), 4)
    params = float(get("num_params") or 0.0)
    shard = params * wire / (tp * pp)
    factor = 3.0 if str(get("backend")) == "fsdp" or _int(get("zero_stage"), 0) == 3 else 2.0
    dp_bytes = factor * (dp - 1) / dp * shard if dp > 1 else 0.0
    activations = batch * seq * d * wire  # one layer's output for the replica's batch
    tp_bytes = (layers / pp) * 4 * 2 * (tp - 1) / tp * activations if tp > 1 else 0.0
    pp_bytes = 2 * activations / tp if pp > 1 else 0.0  # forward out + backward in, sharded
    bubble = (pp - 1) / (m + pp - 1) if pp > 1 else 0.0
    return {"dp_bytes": dp_bytes, "tp_bytes": tp_bytes, "pp_bytes": pp_bytes,
            "bubble": bubble}


def _mb(value: float) -> str:
    return f"{value / 1e6:,.3g} MB"


def layout_label(row: pd.Series) -> str:
    """`dp 2 x tp 2 x pp 1 (fsdp)`."""
    tp, pp = _int(row.get("tp")), _int(row.get("pp"))
    dp = _int(row.get(col.DP), max(1, _int(row.get(col.WORLD_SIZE)) // (tp * pp)))
    return f"dp {dp} x tp {tp} x pp {pp} ({row.get('backend')})"


def why(row: pd.Series) -> str:
    """What a layout pays, in words: its largest traffic and its bubble."""
    t = traffic(row)
    parts = []
    if t["bubble"] > 0:
        parts.append(f"the pipeline bubble idles {t['bubble']:.0%} of each step "
                     f"((p-1)/(m+p-1), {_int(row.get('microbatches'), 0) or 'p'} micro-batches)")
    if t["tp_bytes"] > 0:
        parts.append(f"tensor parallelism sends {_mb(t['tp_bytes'])} of activations per "
                     "step on the critical path")
    if t["dp_bytes"] > 0:
        kind = "reduce-scatter + all-gather" if row.get(col.BACKEND) == "fsdp" else "allreduce"
        parts.append(f"the data-parallel {kind} sends {_mb(t['dp_bytes'])} of gradients per "
                     "step (overlapped with the backward where the backend can)")
    if t["pp_bytes"] > 0:
        parts.append(f"stage boundaries pass {_mb(t['pp_bytes'])} point to point")
    return "; ".join(parts) or "no communication (one rank)"


def factorisation_findings(table: pd.DataFrame, unit: str = "tokens/s") -> list[str]:
    """At each world size with more than one factorisation measured: the fastest, by how
    much, and what the others pay (their traffic and bubble)."""
    if table.empty or "model" not in table or not table[col.MODEL].isin(
            list(TRANSFORMER_SHAPES)).any():
        return []
    out = []
    for size, rows in table.groupby("world_size", sort=True):
        if len(rows) < 2:
            continue
        rows = rows.sort_values("throughput_median", ascending=False)
        best = rows.iloc[0]
        rest = rows.iloc[1:]
        slower = "; ".join(
            f"{layout_label(r)} is {1 - r['throughput_median'] / best['throughput_median']:.0%}"
            f" slower: {why(r)}" for _, r in rest.head(3).iterrows())
        gpus = f"{int(size)} GPU{'s' if int(size) != 1 else ''}"
        out.append(f"At {gpus}, {layout_label(best)} is fastest "
                   f"({best['throughput_median']:,.0f} {unit}, global batch "
                   f"{best['global_batch']:g}): {why(best)}. {slower}.")
    return out
