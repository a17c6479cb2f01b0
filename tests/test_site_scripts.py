"""Job scripts for every shipped site, checked against each centre's documented
conventions (tests/data/conventions.yaml) and kept as golden files (tests/golden/).

Regenerate the golden files after an intended change with
    SCALESTUDY_UPDATE_GOLDEN=1 pytest tests/test_site_scripts.py
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from scalestudy.core.grid import expand
from scalestudy.core.load import parse_study
from scalestudy.site.profiles import load_system
from scalestudy.site.render import render

HERE = Path(__file__).parent
CONVENTIONS = yaml.safe_load((HERE / "data" / "conventions.yaml").read_text())
RANKS = {"aurora": 12}


def site_script(system: str) -> str:
    spec = (f"name: conv\nsystem: {system}\n"
            f"grid: {{nodes: [2], ranks_per_node: [{RANKS.get(system, 4)}]}}\n"
            "job: {account: MyProject, walltime: '01:00:00'}\n")
    study = parse_study(spec, "/scratch/studies/conv.yaml")  # the job runs in its directory
    run = expand(study)[0]
    return render(study, load_system(system), run, Path("/scratch/results/conv/runs")
                  / run.run_id, python="python3")


@pytest.mark.parametrize("system", sorted(CONVENTIONS))
def test_script_follows_the_centres_conventions(system: str) -> None:
    text = site_script(system)
    for check in CONVENTIONS[system].get("checks", []):
        assert re.search(check["pattern"], text), f"{check['why']} ({check['source']})"
    for check in CONVENTIONS[system].get("forbidden", []):
        assert not re.search(check["pattern"], text), f"{check['why']} ({check['source']})"


@pytest.mark.parametrize("system", sorted(CONVENTIONS))
def test_script_is_valid_bash_and_matches_its_golden_file(system: str) -> None:
    text = site_script(system)
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
    golden = HERE / "golden" / f"{system}.sh"
    if os.environ.get("SCALESTUDY_UPDATE_GOLDEN"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text)
    assert golden.read_text() == text, f"rendered script differs from {golden}"
