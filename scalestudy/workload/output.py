"""What the benchmark prints and records besides its numbers: lines other harnesses read
(Horovod's synthetic benchmark, tf_cnn_benchmarks, MLPerf's `:::MLLOG`), and the tuning
environment a run saw. Pure; no torch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

#: Prefixes of the environment variables that tune communication; rank 0's values go
#: into the record, so a tuning variant's settings are visible next to its numbers.
TUNING_PREFIXES: tuple[str, ...] = (
    "HOROVOD_", "NCCL_", "TORCH_NCCL_", "GLOO_", "OMPI_MCA_", "UCX_", "FI_", "MPICH_",
    "CCL_", "OMP_NUM_THREADS",
)

if TYPE_CHECKING:
    from .record import MetricsRecord


#: Variables with those prefixes that launchers set for their own bookkeeping (Open MPI's
#: run-time wiring), not tuning: left out of the record.
LAUNCHER_PREFIXES: tuple[str, ...] = (
    "OMPI_MCA_orte_", "OMPI_MCA_ess", "OMPI_MCA_pmix", "OMPI_MCA_initial_wdir",
    "OMPI_MCA_shmem_RUNTIME_QUERY_hint", "OMPI_MCA_mpi_oversubscribe",
    "OMPI_MCA_hwloc_base_binding_policy", "OMPI_MCA_rmaps_base_mapping_policy",
)


def tuning_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The communication-tuning variables set in `environ`, sorted by name."""
    return {k: environ[k] for k in sorted(environ)
            if k.startswith(TUNING_PREFIXES) and not k.startswith(LAUNCHER_PREFIXES)}


def horovod_lines(total: float, ci: float, world_size: int, unit: str = "img") -> list[str]:
    """The closing lines of Horovod's pytorch_synthetic_benchmark.py (`unit` "tokens":
    the same lines in tokens, e.g. "Total tokens/sec on 2 GPU(s): ...")."""
    return [
        f"{unit.capitalize()}/sec per GPU: {total / world_size:.1f} +-{ci / world_size:.1f}",
        f"Total {unit}/sec on {world_size} GPU(s): {total:.1f} +-{ci:.1f}",
    ]


def tf_cnn_line(total: float) -> str:
    """tf_cnn_benchmarks' summary line."""
    return f"total images/sec: {total:.2f}"


def mllog_line(key: str, value: object, *, event_type: str = "POINT_IN_TIME",
               metadata: Mapping[str, object] | None = None, time_ms: int | None = None) -> str:
    """One MLPerf-logging line: `:::MLLOG {json}`."""
    record = {
        "namespace": "",
        "time_ms": int(time.time() * 1000) if time_ms is None else time_ms,
        "event_type": event_type,
        "key": key,
        "value": value,
        "metadata": {"file": "scalestudy/workload", "lineno": 0, **(metadata or {})},
    }
    return ":::MLLOG " + json.dumps(record, sort_keys=False)


def mllog_summary(record: MetricsRecord) -> list[str]:
    """MLLOG lines for a finished run: scale, batch and measured throughput."""
    steps = int(record.get("iters", 0)) * int(record.get("batches_per_iter", 0))
    return [
        mllog_line("submission_benchmark", record.get("model")),
        mllog_line("global_batch_size", record["global_batch"]),
        mllog_line("local_batch_size", record["batch_size"]),
        mllog_line("number_of_nodes", record["nodes"]),
        mllog_line("accelerators_per_node", record["local_world_size"]),
        mllog_line("number_of_ranks", record["world_size"]),
        mllog_line("tracked_stats", {"throughput": round(record["throughput"], 3)},
                   metadata={"step": steps, "unit": "tokens/s"
                             if record.get("throughput_unit") == "tokens/s" else "samples/s"}),
    ]


def diagnostics_lines(record: MetricsRecord) -> list[str]:
    """Human-readable summary of the communication diagnostics, when measured."""
    lines = []
    unit = str(record.get("throughput_unit", "img/s")).split("/")[0]
    if "comm_overhead" in record:
        lines.append(
            f"Compute-only {unit}/sec on {record['world_size']} GPU(s): "
            f"{record['compute_throughput']:.1f} (no gradient sync); "
            f"comm overhead: {100 * record['comm_overhead']:.1f} %")
    if "allreduce_probe" in record:
        probe = record["allreduce_probe"]
        lines.append(
            f"Allreduce of {probe['bytes'][-1] / 1e6:.2f} MB: "
            f"{probe['time_s'][-1] * 1e3:.3f} ms, busbw {probe['busbw_GBps'][-1]:.3f} GB/s; "
            f"{probe['bytes'][0]} B: {probe['time_s'][0] * 1e6:.1f} us")
    return lines


def lm_lines(record: MetricsRecord) -> list[str]:
    """A transformer run's model TFLOP/s, MFU with the peak it is relative to, and loss."""
    if "model_tflops_per_gpu" not in record:
        return []
    line = f"Model TFLOP/s per GPU: {record['model_tflops_per_gpu']:.4g}"
    if "mfu" in record:
        line += (f"; MFU: {100 * record['mfu']:.2f} % of {record['peak_tflops']:.4g} "
                 f"TFLOP/s per GPU ({record['peak_source']})")
    lines = [line]
    if record.get("final_loss") is not None:
        lines.append(f"Loss after the last step: {record['final_loss']:.6f}")
    return lines


def energy_line(record: MetricsRecord) -> str:
    """Energy of the timed iterations, or why there is no figure."""
    if "energy_j" in record:
        per = record.get("energy_j_per_sample")
        return (f"Energy ({record['energy_source']}, {record['energy_gpus']} GPU(s)): "
                f"{record['energy_j']:.1f} J" + (f", {per:.4g} J/sample" if per else ""))
    return f"Energy: not measured ({record.get('energy_unavailable', 'unknown')})"
