"""scripts/fault-inject and its OpenPBS and Flux twins: command lines here; smaller runs
against the real Slurm, the real OpenPBS and the real Flux."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "fault-inject"
PBS_SCRIPT = ROOT / "scripts" / "fault-inject-pbs"


def test_help_and_a_bad_run_count() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "--kills" in done.stdout
    bad = subprocess.run([sys.executable, str(SCRIPT), "--runs", "101"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "--runs is at most 100" in bad.stderr


@pytest.mark.slurm
@pytest.mark.slow
def test_twenty_runs_three_kills_nothing_lost_nothing_twice(slurm_cluster,
                                                            tmp_path: Path) -> None:
    # Stops slurmctld and a slurmd for a while: no other Slurm test may run meanwhile.
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--runs", "20", "--kills", "3", "--max-jobs", "8",
         "--sbatch-failures", "2", "--json", "--keep", str(tmp_path)],
        capture_output=True, text=True, timeout=900)
    assert done.returncode in (0, 1), done.stderr
    figures = json.loads(done.stdout)
    assert figures["faults"]["run_sigkills"] == 3, done.stderr
    assert figures["faults"]["slurmctld_restarts"] == 1
    assert figures["runs_lost"] == 0 and figures["runs_duplicated"] == 0, figures
    assert figures["journal_matches_sacct"] and figures["jobs"] == 20
    assert done.returncode == 0


def test_pbs_twin_help_and_a_bad_run_count() -> None:
    done = subprocess.run([sys.executable, str(PBS_SCRIPT), "--help"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "--qsub-failures" in done.stdout
    assert "--submit" not in done.stdout  # submitit submits to Slurm only
    bad = subprocess.run([sys.executable, str(PBS_SCRIPT), "--runs", "101"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--runs is at most 100" in bad.stderr


@pytest.mark.pbs
@pytest.mark.slow
def test_pbs_twenty_runs_three_kills_a_server_restart_nothing_lost_nothing_twice(
        pbs_cluster, pbs_tmp_path: Path) -> None:
    # Restarts pbs_server: no other PBS test may run meanwhile.
    done = subprocess.run(
        [sys.executable, str(PBS_SCRIPT), "--runs", "20", "--kills", "3", "--max-jobs", "8",
         "--qsub-failures", "2", "--json", "--keep", str(pbs_tmp_path)],
        capture_output=True, text=True, timeout=900)
    assert done.returncode in (0, 1), done.stderr
    figures = json.loads(done.stdout)
    assert figures["faults"]["run_sigkills"] == 3, done.stderr
    assert figures["faults"]["pbs_server_restarts"] == 1
    assert figures["runs_lost"] == 0 and figures["runs_duplicated"] == 0, figures
    assert figures["journal_matches_server"] and figures["qselect_agrees"], figures
    assert figures["jobs"] == 20 and figures["adopted"] >= 1  # the protocol error's job
    assert done.returncode == 0


PACK_SCRIPT = ROOT / "scripts" / "fault-inject-pack"


def test_pack_script_help_and_a_bad_repeat_count() -> None:
    done = subprocess.run([sys.executable, str(PACK_SCRIPT), "--help"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "--run-kills" in done.stdout
    bad = subprocess.run([sys.executable, str(PACK_SCRIPT), "--repeats", "31"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--repeats is 1 to 30" in bad.stderr


@pytest.mark.slurm
@pytest.mark.slow
def test_packed_allocations_killed_half_way_lose_and_repeat_nothing(slurm_cluster,
                                                                    tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(PACK_SCRIPT), "--repeats", "4", "--kills", "2", "--run-kills",
         "2", "--json", "--keep", str(tmp_path)], capture_output=True, text=True, timeout=900)
    assert done.returncode in (0, 1), done.stderr
    figures = json.loads(done.stdout)
    assert figures["faults"]["allocation_kills"] == 2, done.stderr
    assert figures["runs"] == 12 and figures["completed"] == 12, figures
    assert figures["runs_lost"] == 0 and figures["runs_duplicated"] == 0, figures
    # the first allocation is killed while steps remain: at least one more followed (the
    # second kill may land once its allocation has ended every step)
    assert figures["journal_matches_sacct"] and figures["allocations"] >= 2
    assert done.returncode == 0


FLUX_SCRIPT = ROOT / "scripts" / "fault-inject-flux"


def test_flux_twin_help_and_a_bad_run_count() -> None:
    done = subprocess.run([sys.executable, str(FLUX_SCRIPT), "--help"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "--batch-failures" in done.stdout
    assert "--submit" not in done.stdout  # submitit submits to Slurm only
    bad = subprocess.run([sys.executable, str(FLUX_SCRIPT), "--runs", "101"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--runs is at most 100" in bad.stderr


@pytest.mark.flux
@pytest.mark.slow
def test_flux_twenty_runs_three_kills_nothing_lost_nothing_twice(
        flux_cluster, flux_tmp_path: Path) -> None:
    # The broker stays up (other Flux tests share it); only flux batch and scalestudy fail.
    done = subprocess.run(
        [sys.executable, str(FLUX_SCRIPT), "--runs", "20", "--kills", "3", "--max-jobs", "8",
         "--batch-failures", "2", "--json", "--keep", str(flux_tmp_path)],
        capture_output=True, text=True, timeout=900)
    assert done.returncode in (0, 1), done.stderr
    figures = json.loads(done.stdout)
    assert figures["faults"]["run_sigkills"] == 3, done.stderr
    # one failure after the real flux batch queued the job, one before anything was queued
    assert figures["batch"]["queued_id_lost"] == 1 and figures["batch"]["not_queued"] == 1
    assert figures["runs_lost"] == 0 and figures["runs_duplicated"] == 0, figures
    assert figures["journal_matches_server"] and figures["by_name_agrees"], figures
    assert figures["jobs"] == 20 and figures["adopted"] >= 1  # the lost id's job
    assert done.returncode == 0
