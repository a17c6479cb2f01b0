"""A packed allocation's files, kept as golden files (tests/golden/packing/<case>/): its
job script, the allocation.json hand-off its engine reads, and one step's script, for
the step runner and the nested-Flux engine on Slurm, the step runner on PBS, and a Flux
system (whose job is a Flux instance already).

Regenerate them after an intended change with
    SCALESTUDY_UPDATE_GOLDEN=1 pytest tests/test_pack_scripts.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scalestudy.execute.packing.allocations import write_allocation
from scalestudy.execute.packing.plan import pack
from scalestudy.study import make_plan

GOLDEN = Path(__file__).parent / "golden" / "packing"
#: (system, pack_engine) of each case; PBS cannot start a nested Flux (check_engine).
CASES = {"slurm-steps": ("generic-slurm", "steps"), "slurm-flux": ("generic-slurm", "flux"),
         "pbs-steps": ("generic-pbs", "steps"), "flux-steps": ("generic-flux", "steps")}


def packed_files(tmp_path: Path, system: str, engine: str) -> dict[str, str]:
    """The allocation a1 of a 1- and 2-node study, written as `run --pack` writes it; the
    temporary directory reads /scratch and this Python `python3`."""
    spec = tmp_path / "studies" / "pk.yaml"
    spec.parent.mkdir()
    spec.write_text(f"name: pk\nsystem: {system}\n"
                    "grid: {nodes: [1, 2], ranks_per_node: [4], batch_size: [32]}\n"
                    "job: {account: MyProject, walltime: '00:30:00', pack: true, "
                    f"pack_engine: {engine}}}\n")
    plan = make_plan(spec, tmp_path / "results")
    (allocation,) = pack(plan.runs, lambda run: 600.0, 1800)
    script = write_allocation(plan, allocation, "a1", archive=False)
    first = allocation.steps[0].run
    texts = {"job.sh": script.read_text(),
             "allocation.json": (script.parent / "allocation.json").read_text(),
             "step.sh": (plan.run_dir(first) / "job.sh").read_text()}
    places = sorted({str(tmp_path), str(tmp_path.resolve())}, key=len, reverse=True)
    out = {}
    for name, text in texts.items():
        for place in places:
            text = text.replace(place, "/scratch")
        out[name] = text.replace(sys.executable, "python3")
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_packed_allocation_matches_its_golden_files(case: str, tmp_path: Path) -> None:
    files = packed_files(tmp_path, *CASES[case])
    for name, text in files.items():
        if name.endswith(".sh"):
            assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
        golden = GOLDEN / case / name
        if os.environ.get("SCALESTUDY_UPDATE_GOLDEN"):
            golden.parent.mkdir(parents=True, exist_ok=True)
            golden.write_text(text)
        assert golden.read_text() == text, f"{case}: {name} differs from {golden}"
