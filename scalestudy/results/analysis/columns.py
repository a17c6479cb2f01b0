"""The names of the analysis tables' columns and the stored rows' fields, one constant
each: a rename is one edit here, and a misspelt name fails at import, not as a KeyError
in a report.

The run table (results.analysis.collect) has a run's parameters (run.json), its state
and its record's fields; the summary (results.analysis.efficiency) one row per point of
a scaling curve; the store's rows (results.history.store) the same parameters beside
the attempt's campaign, provenance and tags. Read them as `col.WORLD_SIZE` after
`from scalestudy.results.analysis import columns as col`.
"""

from __future__ import annotations

from typing import Final

# A run's place in the grid (run.json).
RUN_ID: Final = "run_id"
STUDY: Final = "study"
SYSTEM: Final = "system"
NODES: Final = "nodes"
RANKS_PER_NODE: Final = "ranks_per_node"
WORLD_SIZE: Final = "world_size"
BATCH_SIZE: Final = "batch_size"
GLOBAL_BATCH: Final = "global_batch"
BACKEND: Final = "backend"
TUNING: Final = "tuning"
MODEL: Final = "model"
DP: Final = "dp"
LR: Final = "lr"
SEQ_LEN: Final = "seq_len"

# What it measured (its state and metrics record).
STATE: Final = "state"
THROUGHPUT: Final = "throughput"
THROUGHPUT_UNIT: Final = "throughput_unit"
COMM_OVERHEAD: Final = "comm_overhead"
COMPUTE_TIME_S: Final = "compute_time_s"
GRAD_BYTES: Final = "grad_bytes"
PEAK_TFLOPS: Final = "peak_tflops"
MFU: Final = "mfu"
RANK_SPREAD: Final = "rank_spread"
QUEUE_WAIT_S: Final = "queue_wait_s"
JOB_ID: Final = "job_id"
STARTED: Final = "started"
ENDED: Final = "ended"
DEVICE: Final = "device"
# The input pipeline of a run reading a dataset (absent for synthetic data).
DATA_KIND: Final = "data_kind"
DATA_WORKERS: Final = "data_workers"
DATA_STAGE: Final = "data_stage"
INPUT_WAIT_S: Final = "input_wait_s"
INPUT_WAIT_FRACTION: Final = "input_wait_fraction"
DECODE_S: Final = "decode_s"
STAGE_S: Final = "stage_s"
#: Numeric input-pipeline keys the summary table carries as medians over repeats.
#: (`read_GBps`, bytes read / timed seconds / nodes in 1e9, keeps the unit's case, like
#: `allreduce_busbw_GBps`: no constant of its own, whose value must be its lower-case name.)
INPUT_COLUMNS: Final = (INPUT_WAIT_S, INPUT_WAIT_FRACTION, DECODE_S, "read_GBps", STAGE_S,
                        DATA_WORKERS)
#: Text input-pipeline keys it carries as the first run's value.
INPUT_TEXT_COLUMNS: Final = (DATA_KIND, DATA_STAGE)
# The gradient noise scale (B_simple, samples) of a data-parallel run on a dataset, and
# its interval; the summary carries each point's median over repeats.
NOISE_SCALE: Final = "noise_scale"
NOISE_COLUMNS: Final = (NOISE_SCALE, "noise_scale_low", "noise_scale_high")

# The summary: one row per point of a curve.
GROUP: Final = "group"
N_REPEATS: Final = "n_repeats"
THROUGHPUT_MEDIAN: Final = "throughput_median"
THROUGHPUT_MIN: Final = "throughput_min"
THROUGHPUT_MAX: Final = "throughput_max"
THROUGHPUT_PER_GPU: Final = "throughput_per_gpu"
EFFICIENCY: Final = "efficiency"
BASELINE: Final = "baseline"
BASELINE_RULE: Final = "baseline_rule"
FLAGS: Final = "flags"
PARETO: Final = "pareto"
NODE_HOURS: Final = "node_hours"
ENERGY_KWH: Final = "energy_kwh"
GPUS: Final = "gpus"
GPUS_PER_NODE: Final = "gpus_per_node"

# A stored attempt's fields beside them.
DIRECTORY: Final = "directory"
ATTEMPT: Final = "attempt"
CAMPAIGN: Final = "campaign"
UNIT: Final = "unit"
PARAMS: Final = "params"
METRICS: Final = "metrics"
PROVENANCE: Final = "provenance"
TAGS: Final = "tags"
SOURCE: Final = "source"
CONTAINER: Final = "container"
STARTUP_S: Final = "startup_s"
