"""`scalestudy probe` on this machine: a real one-rank probe of the small CNN."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scalestudy.execute.probe import suggested_batches
from tests.conftest import run_cli


def test_suggested_batches_are_the_powers_of_two_that_fit_and_the_largest() -> None:
    record = {"largest_batch_that_fits": 112, "points": [
        {"batch_size": b, "fits": b <= 112} for b in (1, 2, 4, 8, 16, 32, 64, 128, 96, 112)]}
    assert suggested_batches(record) == [1, 2, 4, 8, 16, 32, 64, 112]
    assert suggested_batches({"largest_batch_that_fits": None, "points": []}) == []


@pytest.mark.slow
def test_probe_finds_the_largest_batch_under_a_memory_limit(tmp_path: Path, write_spec) -> None:
    spec = str(write_spec("""
name: pr
workload: {model: small_cnn, image_size: 32, num_classes: 10, iters: 1, batches_per_iter: 1}
job: {walltime: "00:05:00"}
"""))
    done = run_cli("probe", spec, "--max-batch", "1024", "--memory-limit-gb", "0.25", "--json",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads(done.stdout)
    best = record["largest_batch_that_fits"]
    assert 4 <= best < 1024  # 0.25 GiB stops it well before the top
    fits = {p["batch_size"]: p["fits"] for p in record["points"]}
    assert fits[best] and not all(fits.values())
    assert min(b for b, ok in fits.items() if not ok) > best
    assert all(p["throughput"] > 0 for p in record["points"] if p["fits"])
    assert record["suggested_batch_sizes"][-1] == best
    probe_dir = tmp_path / "results" / "pr" / "probe"
    assert "Largest batch that fits:" in (probe_dir / "stdout.log").read_text()
    # the probe is not a run: the study's runs are untouched
    assert not (tmp_path / "results" / "pr" / "runs").exists()


def test_probe_refuses_a_command_workload(tmp_path: Path, write_spec) -> None:
    spec = str(write_spec("name: c\nworkload: {kind: command, command: 'true'}\n"))
    done = run_cli("probe", spec, cwd=tmp_path)
    assert done.returncode != 0
    assert "a `command` workload has no model for it to probe" in done.stderr
