"""collect: run directories -> one tidy row per planned run, robust to broken files."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from scalestudy.execute.workspace import BAD_THROUGHPUT, NO_RECORD
from scalestudy.results.analysis.collect import collect, read_runs
from tests.test_diagnose import count_reads


def params(nodes: int = 1, rpn: int = 1, repeat: int = 0, batch: int = 16, **kw: Any) -> dict:
    p = {
        "run_id": f"r{nodes}x{rpn}b{batch}n{repeat}", "study": "t", "system": "local",
        "scaling": "weak", "nodes": nodes, "ranks_per_node": rpn, "world_size": nodes * rpn,
        "batch_size": batch, "global_batch": batch * nodes * rpn, "backend": "ddp",
        "tuning": "default", "repeat": repeat, "workload": "synthetic", "model": "small_cnn",
        "image_size": 32, "precision": "fp32",
    }
    p.update(kw)
    return p


def record(p: dict, throughput: Any = 100.0, **kw: Any) -> dict:
    r = {"schema": "scalestudy.metrics/1", "source": "workload", "throughput": throughput,
         "world_size": p["world_size"], "batch_size": p["batch_size"],
         "global_batch": p["global_batch"], "hosts": [f"n{i}" for i in range(p["nodes"])],
         "iter_time_mean": 0.1, "elapsed_s": 7.5}
    r.update(kw)
    return r


def make_run(study: Path, p: dict, *, status: Any = "completed", metrics: Any = None,
             exit_code: int = 0, reason: str | None = None) -> Path:
    """A run directory: run.json, job.sh, and optionally status.json / metrics.jsonl.

    status: a state string, raw text (written as is) or None (no status.json).
    metrics: a dict (one line), a list of lines, raw text, or None (no file).
    """
    d = study / "runs" / p["run_id"]
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps(p))
    (d / "job.sh").write_text("#!/bin/bash\n")
    if isinstance(status, str) and not status.lstrip().startswith(("{", "[")) \
            and status.isidentifier():
        status = json.dumps({"state": status, "exit_code": exit_code, "elapsed_s": 8.1,
                             "reason": reason, "log_tail": None})
    if status is not None:
        (d / "status.json").write_text(status)
    if isinstance(metrics, dict):
        metrics = json.dumps(metrics) + "\n"
    elif isinstance(metrics, list):
        metrics = "".join(line + "\n" for line in metrics)
    if metrics is not None:
        (d / "metrics.jsonl").write_text(metrics)
    return d


def test_completed_row_has_params_status_and_flattened_metrics(tmp_path: Path) -> None:
    p = params(nodes=2, rpn=2)
    make_run(tmp_path, p, metrics=record(p, 400.0, extra={"a": 1}))
    runs = collect(tmp_path, [p])
    assert len(runs) == 1
    row = runs.iloc[0]
    assert list(runs.columns[:len(p)]) == list(p)
    assert list(runs.columns[len(p):len(p) + 4]) == ["state", "reason", "exit_code",
                                                      "elapsed_s"]
    assert row["state"] == "completed"
    assert row["throughput"] == 400.0
    assert row["hosts"] == "n0,n1"
    assert row["extra.a"] == 1
    assert row["elapsed_s"] == 8.1  # from status.json
    assert row["metric_elapsed_s"] == 7.5  # the record's, renamed: no clobbering
    assert row["metric_world_size"] == 4
    assert row["exit_code"] == 0
    assert (tmp_path / "runs.csv").is_file()


def test_states_in_plan_order(tmp_path: Path) -> None:
    ps = [params(nodes=n) for n in (4, 1, 2, 8)]
    make_run(tmp_path, ps[0], metrics=record(ps[0]))
    make_run(tmp_path, ps[1], status=None)
    make_run(tmp_path, ps[2], status="running")
    make_run(tmp_path, ps[3], status="failed", exit_code=137, reason="time limit",
             metrics=None)
    runs = collect(tmp_path, ps)
    assert list(runs["run_id"]) == [p["run_id"] for p in ps]
    assert list(runs["state"]) == ["completed", "pending", "running", "failed"]
    assert runs.loc[3, "reason"] == "time limit"
    assert runs.loc[3, "exit_code"] == 137
    assert math.isnan(runs.loc[1, "throughput"])


def test_planned_run_without_directory_is_pending(tmp_path: Path) -> None:
    runs = collect(tmp_path, [params()])
    assert runs.loc[0, "state"] == "pending"
    assert "throughput" in runs.columns


@pytest.mark.parametrize(
    ("metrics", "reason"),
    [
        (None, NO_RECORD),  # no file
        ("", NO_RECORD),  # empty
        ("not json at all\n{{{\n", NO_RECORD),  # garbled
        ('{"throughput": 1', NO_RECORD),  # truncated only line
        ("[1, 2, 3]\n", NO_RECORD),  # JSON but not an object
        ('{"throughput": NaN}\n', BAD_THROUGHPUT),
        ('{"throughput": Infinity}\n', BAD_THROUGHPUT),
        ('{"throughput": -5.0}\n', BAD_THROUGHPUT),
        ('{"throughput": 0}\n', BAD_THROUGHPUT),
        ('{"throughput": "fast"}\n', BAD_THROUGHPUT),
        ('{"throughput": true}\n', BAD_THROUGHPUT),
        ('{"world_size": 1}\n', BAD_THROUGHPUT),
        (b"\xff\xfe\x00garbage\n", NO_RECORD),
    ],
)
def test_completed_without_valid_record_becomes_failed(tmp_path: Path, metrics: Any,
                                                        reason: str) -> None:
    p = params()
    d = make_run(tmp_path, p)
    if isinstance(metrics, bytes):
        (d / "metrics.jsonl").write_bytes(metrics)
    elif metrics is not None:
        (d / "metrics.jsonl").write_text(metrics)
    runs = collect(tmp_path, [p])
    assert runs.loc[0, "state"] == "failed"
    assert runs.loc[0, "reason"] == reason
    assert runs["throughput"].dtype == float


def test_truncated_last_line_falls_back_to_previous_record(tmp_path: Path) -> None:
    p = params()
    make_run(tmp_path, p, metrics=json.dumps(record(p, 50.0)) + "\n"
             + json.dumps(record(p, 60.0)) + '\n{"throughput": 70.')
    runs = collect(tmp_path, [p])
    assert runs.loc[0, "state"] == "completed"
    assert runs.loc[0, "throughput"] == 60.0


@pytest.mark.parametrize("status", ["{not json", "", "[1]", '{"exit_code": 0}', '{"state": 3}'])
def test_garbled_status_is_failed_not_a_crash(tmp_path: Path, status: str) -> None:
    p = params()
    make_run(tmp_path, p, status=status, metrics=record(p))
    runs = collect(tmp_path, [p])
    assert runs.loc[0, "state"] == "failed"
    assert "status.json" in runs.loc[0, "reason"]


def test_runs_csv_is_atomic_and_round_trips(tmp_path: Path) -> None:
    p1 = params(run_id="12345e6789")  # would parse as a float if not read as str
    p2 = params(nodes=2, run_id="0042")
    make_run(tmp_path, p1, metrics=record(p1, 123.5))
    make_run(tmp_path, p2, status="failed", exit_code=1, reason="exit code 1 | oops\nmore")
    collect(tmp_path, [p1, p2])
    assert sorted(f.name for f in tmp_path.iterdir()) == ["runs", "runs.csv"]
    back = read_runs(tmp_path / "runs.csv")
    assert list(back["run_id"]) == ["12345e6789", "0042"]
    assert back.loc[0, "throughput"] == 123.5
    assert back.loc[1, "reason"] == "exit code 1 | oops\nmore"
    assert list(back["state"]) == ["completed", "failed"]


def test_columns_union_over_heterogeneous_records(tmp_path: Path) -> None:
    p1, p2 = params(), params(nodes=2, model=None, workload="command")
    make_run(tmp_path, p1, metrics=record(p1, 10.0, num_params=123))
    make_run(tmp_path, p2, metrics={"throughput": 20.0, "source": "command"})
    runs = collect(tmp_path, [p1, p2])
    assert runs.loc[0, "num_params"] == 123
    assert pd.isna(runs.loc[1, "num_params"])
    assert runs.loc[1, "source"] == "command"
    assert pd.isna(runs.loc[1, "model"])




def test_failed_runs_carry_their_failure_class_and_line(tmp_path: Path) -> None:
    p1, p2 = params(), params(nodes=2, run_id="0002")
    make_run(tmp_path, p1, metrics=record(p1, 10.0))
    d = make_run(tmp_path, p2, status="failed", exit_code=1, reason="exit code 1")
    (d / "stderr.log").write_text(
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    collect(tmp_path, [p1, p2])
    back = read_runs(tmp_path / "runs.csv")
    assert back.loc[1, "failure"] == "oom" and "CUDA out of memory" in back.loc[1, "failure_line"]
    assert back["failure"].isna()[0] and back["failure_line"].isna()[0]


def test_a_record_missing_ranks_is_failed(tmp_path: Path) -> None:
    p = params(nodes=2, rpn=2)
    make_run(tmp_path, p, metrics=record(p, 400.0, world_size=3))
    runs = collect(tmp_path, [p])
    assert runs.loc[0, "state"] == "failed"
    assert "covers 3 rank(s) of the run's 4" in runs.loc[0, "reason"]


def test_gigabyte_files_are_read_by_their_tails_only(tmp_path: Path, monkeypatch) -> None:

    ok, bad = params(), params(nodes=2)
    d_ok = make_run(tmp_path, ok)
    d_bad = make_run(tmp_path, bad, status="failed", exit_code=1, reason="exit code 1")
    # Sparse multi-GiB files: metrics with the valid record at the very end, logs whose
    # decisive line is the last one.
    with (d_ok / "metrics.jsonl").open("wb") as fh:
        fh.truncate(3 << 30)
        fh.seek(0, 2)
        fh.write(b"\n" + json.dumps(record(ok, 77.0)).encode() + b"\n")
    for name in ("stdout.log", "stderr.log"):
        with (d_bad / name).open("wb") as fh:
            fh.truncate(2 << 30)
            fh.seek(0, 2)
            fh.write(b"\nRuntimeError: [gloo] Connection closed by peer [10.0.0.2]:4211\n")
    with (d_bad / "metrics.jsonl").open("wb") as fh:  # one endless line, no record
        fh.truncate(2 << 30)
    read = count_reads(monkeypatch)
    runs = collect(tmp_path, [ok, bad])
    assert sum(read) < 1 << 20  # tails only: under 1 MiB of 7 GiB of files
    assert runs.loc[0, "state"] == "completed" and runs.loc[0, "throughput"] == 77.0
    assert runs.loc[1, "state"] == "failed" and runs.loc[1, "failure"] == "comm"
    assert "Connection closed by peer" in runs.loc[1, "failure_line"]


def test_reading_in_forked_processes_gives_the_same_table(tmp_path: Path, monkeypatch) -> None:
    from scalestudy.results.analysis import collect as collect_module

    planned = []
    for i in range(9):  # completed, failed, pending and heterogeneous records, mixed
        p = params(nodes=1 + i % 3, repeat=i)
        planned.append(p)
        if i % 4 == 3:
            continue
        extra = {"num_params": i} if i % 2 else {"hosts": ["a", None]}
        make_run(tmp_path, p, status="failed" if i == 5 else "completed",
                 metrics=record(p, 10.0 + i, **extra), exit_code=1 if i == 5 else 0)
    here = collect(tmp_path, planned)
    monkeypatch.setattr(collect_module, "MIN_RUNS_PER_PROCESS", 1)
    monkeypatch.setattr(collect_module.fork_pool, "workers", lambda tasks: min(tasks, 3))
    pd.testing.assert_frame_equal(collect(tmp_path, planned), here)
