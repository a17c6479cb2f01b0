"""results/analysis/inputs.py: the input-bound finding, from the summary table's input
columns; synthetic data (no key) never flagged."""

from __future__ import annotations

import pandas as pd

from scalestudy.results.analysis.findings import findings
from scalestudy.results.analysis.inputs import INPUT_BOUND, input_findings, suggestions


def _table(share: float | None, **more: object) -> pd.DataFrame:
    row: dict[str, object] = {"group": "small_cnn", "world_size": 2, "nodes": 1,
                              "ranks_per_node": 2, "batch_size": 32, "global_batch": 64,
                              "throughput_median": 100.0, "flags": "",
                              **more}
    if share is not None:
        row["input_wait_fraction"] = share
    return pd.DataFrame([row])


def test_fires_at_0_2_not_at_0_05_and_never_without_the_key() -> None:
    assert INPUT_BOUND == 0.10
    fired = input_findings(_table(0.2, data_workers=0, input_wait_s=0.02, decode_s=0.03))
    assert len(fired) == 1 and "Input-bound" in fired[0] and "small_cnn at 2 GPUs: 20%" in \
        fired[0]
    assert input_findings(_table(0.05, data_workers=0)) == []
    assert input_findings(_table(None)) == []  # synthetic data: no key
    assert input_findings(_table(float("nan"))) == []


def test_decoding_suggests_workers_reading_suggests_staging() -> None:
    decoding = _table(0.4, data_workers=0, input_wait_s=0.05, decode_s=0.06).iloc[0]
    assert suggestions(decoding)[0].startswith("more data_workers (now 0)")
    reading = _table(0.4, data_workers=4, input_wait_s=0.05, decode_s=0.01,
                     read_GBps=0.2, data_stage="none").iloc[0]
    said = suggestions(reading)
    assert said[0].startswith("`data_stage: local` or `shm` (read 0.2 GB/s per node)")
    staged = _table(0.4, data_workers=4, input_wait_s=0.05, decode_s=0.01,
                    data_stage="local").iloc[0]
    assert not any("data_stage" in s for s in suggestions(staged))


def test_few_cores_per_rank_suggest_fewer_ranks_per_node() -> None:
    row = _table(0.3, data_workers=4, input_wait_s=0.05, decode_s=0.06, host_cores=8,
                 ranks_per_host=4).iloc[0]
    assert any(s.startswith("fewer ranks per node (2 cores per rank for 4 worker(s)")
               for s in suggestions(row))


def test_the_report_lists_it() -> None:
    table = _table(0.25, data_workers=0, input_wait_s=0.02, decode_s=0.03,
                   efficiency=1.0, baseline=True, n_repeats=1)
    runs = pd.DataFrame({"state": ["completed"]})
    got = findings(table, runs, "weak", pd.DataFrame(), pd.DataFrame(), found=[],
                   outcomes=[])
    assert any(f.startswith("Input-bound") for f in got.all)
    table = table.drop(columns=["input_wait_fraction"])
    got = findings(table, runs, "weak", pd.DataFrame(), pd.DataFrame(), found=[],
                   outcomes=[])
    assert not any("Input-bound" in f for f in got.all)


def test_the_scaling_table_keeps_the_input_columns_from_the_runs() -> None:
    """From runs as collect reads them to the finding: the scaling table carries each
    point's median input wait (a table that dropped the column flagged nothing)."""
    from scalestudy.results.analysis.efficiency import scaling_table

    runs = pd.DataFrame({
        "run_id": ["a", "b", "c", "d"], "study": "s", "system": "local", "scaling": "weak",
        "state": "completed", "nodes": 1, "ranks_per_node": [1, 1, 2, 2],
        "world_size": [1, 1, 2, 2], "batch_size": 8, "global_batch": [8, 8, 16, 16],
        "backend": "ddp", "tuning": "default", "repeat": [0, 1, 0, 1],
        "workload": "synthetic", "model": "small_cnn", "throughput": [100.0, 102, 180, 184],
        "throughput_unit": "img/s", "data_kind": "images",
        "input_wait_fraction": [0.3, 0.2, 0.01, 0.03], "input_wait_s": 0.01,
        "decode_s": 0.02, "read_GBps": 0.5})
    table = scaling_table(runs, "weak")
    assert list(table["input_wait_fraction"]) == [0.25, 0.02]
    assert list(table["data_kind"]) == ["images", "images"]
    [finding] = input_findings(table)
    assert "at 1 GPU: 25%" in finding and "2 GPUs" not in finding
