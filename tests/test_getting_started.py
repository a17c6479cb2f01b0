"""docs/getting-started.md's cluster step, run as written on the real Slurm testbed: the
shipped `slurm-testbed` profile, studies/testbed.yaml, then the campaign in history."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.docblocks import blocks, commands

ROOT = Path(__file__).resolve().parents[1]
HEADING = "## The same study on a real Slurm, here"


def step_commands() -> list[list[str]]:
    """The words of each command of the page's Slurm step (its first sh block)."""
    step = [b for b in blocks(ROOT / "docs" / "getting-started.md")
            if b.heading == HEADING and b.lang == "sh"]
    assert step, f"no sh block under {HEADING!r}"
    return [shlex.split(command.text) for command in commands(step[0])]


def test_the_step_starts_the_shipped_testbed_then_runs_scalestudy_only() -> None:
    commands = step_commands()
    assert commands[0][0] == "scripts/slurm-testbed"  # install && eval "$(... start)"
    assert all(words[0] == ".venv/bin/scalestudy" for words in commands[1:])
    assert (ROOT / "scalestudy" / "site" / "systems" / "slurm-testbed.yaml").is_file()


@pytest.mark.slurm
@pytest.mark.slow
def test_the_slurm_step_runs_as_written(tmp_path: Path, slurm_cluster) -> None:
    (tmp_path / "studies").mkdir()
    shutil.copy(ROOT / "studies" / "testbed.yaml", tmp_path / "studies")
    said = []
    for words in step_commands()[1:]:  # the fixture started the testbed
        done = run_cli(*words[1:], cwd=tmp_path)
        assert done.returncode == 0, f"{shlex.join(words)}:\n{done.stdout}{done.stderr}"
        said.append(done.stdout)
    validated, ran, history = said
    assert "ok" in validated
    assert "2 job(s) submitted" in ran and "report: " in ran
    assert "testbed" in history  # the study's campaign, under the profile's name
