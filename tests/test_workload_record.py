"""The metrics record: one typed definition, written by the workload and by scalestudy
for a user program, read back by the results side; the previous format still reads."""

from __future__ import annotations

import json
from pathlib import Path

from scalestudy.execute import workspace as ws
from scalestudy.workload import record

PARAMS = {"world_size": 4, "batch_size": 8, "global_batch": 32, "nodes": 2, "model": None}


def test_a_command_record_carries_the_runs_size_and_reads_back(tmp_path: Path) -> None:
    record.append_record(tmp_path / "metrics.jsonl", record.command_record(123.5, PARAMS))
    got = ws.read_record(tmp_path / "metrics.jsonl")
    assert got == {"schema": record.SCHEMA, "source": "command", "throughput": 123.5,
                   "world_size": 4, "batch_size": 8, "global_batch": 32, "nodes": 2}
    assert ws.record_problem(got) is None


def test_the_previous_format_and_one_without_schema_still_count(tmp_path: Path) -> None:
    for schema in ("scalestudy.metrics/1", None):
        line = {"throughput": 10.0, **({"schema": schema} if schema else {})}
        (tmp_path / "m.jsonl").write_text(json.dumps(line) + "\n")
        assert ws.record_problem(ws.read_record(tmp_path / "m.jsonl")) is None


def test_a_newer_format_is_named_with_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "m.jsonl").write_text('{"schema": "scalestudy.metrics/9", '
                                      '"throughput": 10.0}\n')
    said = ws.record_problem(ws.read_record(tmp_path / "m.jsonl"))
    assert said is not None and "'scalestudy.metrics/9'" in said and "upgrade" in said


def test_the_last_json_object_line_is_the_record(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"throughput": 1.0}\n[1, 2]\n{"throughput": 2.0}\n{"torn": ')
    assert ws.read_record(path) == {"throughput": 2.0}
    path.write_text("[1]\n")
    assert ws.read_record(path) is None and ws.record_problem(None) == ws.NO_RECORD


def test_the_typed_record_names_every_key_the_workload_writes() -> None:
    """The previous release's records and the documented keys are all MetricsRecord's."""
    keys = set(record.MetricsRecord.__annotations__)
    data = Path(__file__).parent / "data" / "previous-release"
    for path in data.rglob("metrics.jsonl"):
        written = set(json.loads(path.read_text().splitlines()[-1]))
        assert written <= keys, written - keys
