"""execute/workspace.py: a `command` program's own record keys (`scalestudy-record:`)
join the record written from its throughput, so its input wait lands in the bundled
benchmark's columns."""

from __future__ import annotations

import json
from pathlib import Path

from scalestudy.execute.workspace import METRICS, program_record, record_command_throughput

PARAMS = {"world_size": 2, "batch_size": 8, "global_batch": 16, "nodes": 1}


def test_the_last_record_line_joins_the_record(tmp_path: Path) -> None:
    (tmp_path / "stdout.log").write_text(
        'scalestudy-record: {"input_wait_fraction": 0.5}\n'
        "epoch 1\n"
        'scalestudy-record: {"input_wait_fraction": 0.21, "read_GBps": 1.5, '
        '"data_kind": "images", "throughput": 1e9, "nested": {"a": 1}}\n'
        "Total img/sec on 2 GPU(s): 123.0\n")
    assert record_command_throughput(tmp_path, PARAMS, r"Total img/sec on \d+ GPU\(s\): "
                                     r"(?P<throughput>[0-9.]+)") is None
    record = json.loads((tmp_path / METRICS).read_text())
    assert record["throughput"] == 123.0  # the pattern's, not the line's
    assert record["input_wait_fraction"] == 0.21 and record["read_GBps"] == 1.5
    assert record["data_kind"] == "images" and "nested" not in record


def test_no_line_or_a_bad_one_adds_nothing(tmp_path: Path) -> None:
    log = tmp_path / "stdout.log"
    log.write_text("Total img/sec on 2 GPU(s): 1.0\n")
    assert program_record(log) == {}
    log.write_text("scalestudy-record: {not json\n")
    assert program_record(log) == {}
    log.write_text("scalestudy-record: [1, 2]\n")
    assert program_record(log) == {}
