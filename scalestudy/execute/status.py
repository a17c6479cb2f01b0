"""What a run directory says about its run: status.json checked against metrics.jsonl.

Reading is cheap and writes nothing: a failed run's class was decided when it ended
(execute.diagnose, called by whoever settled it). Only `diagnose=True` classifies a
failed run again from its logs (a status.json without a class, or `unknown`, which a
newer classifier may know better): `status`, `collect` and the report ask for that,
the pollers never do.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from scalestudy.core.states import RunState, run_state
from scalestudy.core.values import number
from scalestudy.execute.diagnose import diagnose as classify
from scalestudy.execute.workspace import (
    METRICS,
    STATUS,
    read_record,
    record_problem,
    write_json_atomic,
)
from scalestudy.workload.record import MetricsRecord

#: The version of status.json this release writes (version 1, written before it, has
#: no `schema` key and the same fields: it reads the same).
SCHEMA = "scalestudy.status/2"
#: Fields written even when empty once a run has ended, so that every ended run's file
#: says the same things.
_ENDED_KEYS = ("reason", "exit_code", "failure", "failure_line")


@dataclass(frozen=True)
class RunStatus:
    """One run's state and how it ended: status.json as a typed record, written by
    `write_status` only and read by `read_status` only."""

    state: RunState
    reason: str | None = None
    exit_code: int | None = None
    elapsed_s: float | None = None
    failure: str | None = None
    failure_line: str | None = None
    job_id: str | None = None
    scheduler_state: str | None = None
    #: the job's average power from the scheduler's energy accounting, where it has one
    job_power_w: float | None = None
    submitted_at: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    #: the local executor's pid while a run runs on this machine
    pid: int | None = None
    #: of each log, the program's error-like and last lines, then the launcher's summary
    log_tail: str | None = None
    job_energy_j: float | None = None
    job_elapsed_s: float | None = None
    record: MetricsRecord | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, object]:
        """What status.json holds: the schema, the state and every field that is set."""
        out: dict[str, Any] = {"schema": SCHEMA, "state": self.state.value}
        for name in _FIELDS:
            value = getattr(self, name)
            if value is not None or (self.state.ended and name in _ENDED_KEYS):
                out[name] = value
        return out

    def columns(self) -> dict[str, object]:
        """The status columns of runs.csv."""
        return {"state": self.state.value, "reason": self.reason, "exit_code": self.exit_code,
                "elapsed_s": self.elapsed_s, "failure": self.failure,
                "failure_line": self.failure_line, "job_power_w": self.job_power_w}


def _read_json_object(path: Path) -> tuple[bool, dict[str, Any] | None]:
    """(exists, object): object is None when the file exists but is not a JSON object."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return False, None
    except (OSError, UnicodeDecodeError):
        return True, None
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return True, None
    return True, obj if isinstance(obj, dict) else None


def _as_int(value: object) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def _as_text(value: object) -> str | None:
    return None if value is None else str(value)


#: The fields a status.json carries besides its schema and state, in writing order.
_FIELDS: tuple[str, ...] = tuple(
    f.name for f in fields(RunStatus) if f.name not in ("state", "record"))
_INTS = frozenset({"exit_code", "pid"})
_FLOATS = frozenset({"elapsed_s", "job_power_w", "job_energy_j", "job_elapsed_s"})


def write_status(run_dir: Path, status: RunStatus) -> None:
    """Write a run's status.json (atomically)."""
    write_json_atomic(Path(run_dir) / STATUS, status.to_json())


def read_status(run_dir: Path, diagnose: bool = False) -> RunStatus:
    """The run's status; a `completed` one without a valid record is failed. With
    `diagnose`, a failed run without a known class is classified from its logs."""
    run_dir = Path(run_dir)
    exists, data = _read_json_object(run_dir / STATUS)
    if not exists:
        return RunStatus(RunState.PENDING)
    if data is None:
        found = RunStatus(RunState.FAILED, reason="status.json is unreadable")
        return _diagnosed(run_dir, found) if diagnose else found
    state = run_state(data.get("state"))
    # Any: each field read as its own type (int, float or text), which the name decides.
    known: dict[str, Any] = {
        name: (_as_int if name in _INTS else number if name in _FLOATS else _as_text)(
            data.get(name)) for name in _FIELDS}
    if not state:
        known["reason"] = "status.json has no known state"
    found = RunStatus(state=state or RunState.FAILED, **known)
    if found.state is RunState.COMPLETED:
        record = read_record(run_dir / METRICS)
        problem = record_problem(record)
        if problem is not None:
            return _settle_failure(run_dir, replace(found, state=RunState.FAILED,
                                                    reason=problem, failure=None), diagnose)
        return replace(found, record=record)
    if found.state is RunState.FAILED:
        return _settle_failure(run_dir, found, diagnose)
    return found


def _settle_failure(run_dir: Path, found: RunStatus, diagnose: bool) -> RunStatus:
    """A failed status with its record (a partial one may still be useful) and, when
    asked, its class diagnosed again."""
    found = replace(found, record=read_record(run_dir / METRICS))
    if diagnose and found.failure in (None, "", "unknown"):
        return _diagnosed(run_dir, found)
    return found


def _diagnosed(run_dir: Path, found: RunStatus) -> RunStatus:
    got = classify(run_dir, found.exit_code, found.scheduler_state, found.reason)
    return replace(found, failure=got.failure, failure_line=got.line)


def read_state(run_dir: Path) -> RunState:
    """Just the state (cheap: status.json, and metrics.jsonl for a completed run)."""
    return read_status(run_dir).state
