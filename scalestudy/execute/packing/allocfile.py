"""allocation.json, the packing hand-off, as typed records: execute.packing.allocations
writes it on the submitting side; the engine inside the allocation (runner's Runner,
nested's FluxEngine) and `status` read it. It crosses a process boundary (and
a release, for a requeued allocation), so its keys are declared here once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict, cast

#: The file's name inside an allocation's directory (allocations/<name>/).
NAME = "allocation.json"


class AllocationStep(TypedDict):
    """One packed run: its script and where it logs, its shape and its time limits."""

    run_id: str
    run_dir: str
    script: str
    nodes: int
    ranks_per_node: int
    limit_s: int
    expected_s: float
    log: str
    err: str


class AllocationSpec(TypedDict, total=False):
    """The whole file (total=False: `engine` and `slots_lines` came later; their absence
    means the step runner and one host per line)."""

    schema: str
    study: str
    name: str
    engine: str
    nodes: int
    walltime_s: int
    slots_lines: bool
    expected_idle_node_s: float
    steps: list[AllocationStep]


def read(directory: Path) -> AllocationSpec:
    """The allocation.json of an allocation's directory (OSError, ValueError: unreadable)."""
    data = json.loads((Path(directory) / NAME).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{Path(directory) / NAME}: not a JSON object")
    return cast(AllocationSpec, data)
