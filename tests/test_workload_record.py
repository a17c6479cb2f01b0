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


def test_the_startup_parts_add_up_to_startup_s_exactly() -> None:
    # the last rank started Python 0.2004 s after the launch line, had torch at 1.5,
    # joined at 2.0 and began its first step at 3.3336
    parts = record.split_startup(100.0, [100.2004, 101.5, 102.0], 103.3336)
    assert list(parts) == list(record.STARTUP_PARTS)
    assert parts["startup_launch_s"] == 0.2 and parts["startup_imports_s"] == 1.3
    assert round(sum(parts.values()), 3) == round(103.3336 - 100.0, 3)
    assert parts["startup_data_s"] == 1.334  # the last part absorbs the rounding
    # a clock that puts a point before the previous one (or after the first step) counts 0
    skewed = record.split_startup(10.0, [9.9, 11.0, 13.0], 12.0)
    assert skewed == {"startup_launch_s": 0.0, "startup_imports_s": 1.0,
                      "startup_rendezvous_s": 1.0, "startup_data_s": 0.0}
