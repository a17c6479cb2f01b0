"""Ranks in real containers (Charliecloud's ch-run, scripts/container-testbed's image):
studies/example.yaml run bare and containerised side by side, here and on the Slurm,
OpenPBS and Flux testbeds, and packed on Slurm; the image's digest in the provenance and
`history`, and the report's section on what the container costs. Preflight refuses a
missing image or runtime in one line each, before anything is written."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pytest
import yaml

from tests.conftest import run_cli
from tests.testbed_sessions import unavailable

if TYPE_CHECKING:
    from tests.flux_testbed import FluxCluster
    from tests.pbs_testbed import PBSCluster

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "container-testbed"
PYTHON = ROOT / ".venv" / "bin" / "python"
CLUSTER = """
name: lab
scheduler: {scheduler}
launcher: {launcher}
max_nodes: 4
cores_per_node: 2
threads_per_rank: 1
python: {python}
launcher_options: {{cpu_bind: {bind}}}
{extra}"""


@pytest.fixture(scope="session")
def image() -> Path:
    """The container testbed's image (scripts/container-testbed install builds it)."""
    if shutil.which("ch-run") is None:
        unavailable("ch-run is not installed: run scripts/container-testbed install (as "
                    "root)", "SCALESTUDY_REQUIRE_CONTAINER")
    done = subprocess.run([str(SCRIPT), "path"], capture_output=True, text=True)
    if done.returncode != 0:
        unavailable("no container image: run scripts/container-testbed install (as root)",
                    "SCALESTUDY_REQUIRE_CONTAINER")
    return Path(done.stdout.strip())


def example(directory: Path, image: Path, *, nodes: list[int], ranks: list[int],
            repeats: int, pack: bool = False) -> str:
    """studies/example.yaml, its grid cut to the testbed, each point bare and in the image."""
    spec = yaml.safe_load((ROOT / "studies" / "example.yaml").read_text(encoding="utf-8"))
    spec.update(repeats=repeats)
    spec["grid"].update(nodes=nodes, ranks_per_node=ranks, batch_size=[8],
                        container=["none", f"charliecloud:{image}"])
    if directory.joinpath("profile.yaml").exists():
        spec["system"] = "profile.yaml"
    if pack:
        spec["job"]["pack"] = True
    path = directory / "example.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    path.chmod(0o644)
    return path.name


def check(results: Path, runs_count: int, image: Path) -> dict[str, Any]:
    """Every run completed, half of them in the image (ch-run on each rank's line), its
    digest recorded by each containerised job; the report's container section."""
    runs = pd.read_csv(results / "runs.csv")
    assert list(runs["state"]) == ["completed"] * runs_count, runs[["state", "reason"]]
    assert sorted(runs["container"].value_counts().tolist()) == [runs_count // 2] * 2
    for run_id, box in zip(runs["run_id"], runs["container"], strict=True):
        run_dir = results / "runs" / run_id
        script, env = (run_dir / "job.sh").read_text(), (run_dir / "env.txt").read_text()
        if box == "none":
            assert "ch-run" not in script and "SCALESTUDY_CONTAINER" not in env
            continue
        assert f"env TMPDIR=/tmp ch-run {image} -- python3 -m scalestudy.workload" in script
        assert "SCALESTUDY_CONTAINER_DIGEST=sha256:" in env
        assert "SCALESTUDY_CONTAINER_RUNTIME_VERSION=0." in env  # ch-run --version
        record = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
        assert record["startup_s"] > 0
        # the rank ran the image's Python, not the host's
        assert record["python_version"] != platform.python_version()
    summary = json.loads((results / "report" / "summary.json").read_text())
    assert len(summary["containers"]) == runs_count // 2 // max(1, _repeats(runs))
    assert all(c["container"] == f"charliecloud:{image}" for c in summary["containers"])
    page = (results / "report" / "index.md").read_text()
    assert "What the container costs" in page
    return summary


def run_as(cluster: PBSCluster | FluxCluster, python: Path, work: Path, *args: str
           ) -> subprocess.CompletedProcess[str]:
    """`scalestudy ARGS` as the testbed's user in `work`, with a results store there."""
    return cluster.run_as_user(
        [str(python), "-c", "from scalestudy.cli import main; main()", *args], cwd=work,
        timeout=600, env={"PYTHONPATH": str(ROOT),
                          "SCALESTUDY_STORE": str(work / "history.sqlite")})


def _repeats(runs: pd.DataFrame) -> int:
    return int(runs["repeat"].max()) + 1


@pytest.mark.slow
@pytest.mark.container
def test_the_example_study_here_bare_and_in_a_container(tmp_path: Path, image: Path) -> None:
    spec = example(tmp_path, image, nodes=[1], ranks=[1, 2], repeats=2)
    done = run_cli("run", spec, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = check(tmp_path / "results" / "example", 8, image)
    verdicts = [c["verdict"] for c in summary["containers"]]
    assert all(v for v in verdicts)  # each point has its verdict (bands or the change)
    # the store: the digest, the runtime and its version, in `history`
    assert run_cli("history", "ingest", "results", cwd=tmp_path).returncode == 0
    shown = run_cli("history", cwd=tmp_path, env_extra={"COLUMNS": "250"})
    assert "containers the ranks ran in" in shown.stdout
    assert "sha256:" in shown.stdout and "charliecloud" in shown.stdout


@pytest.mark.slow
@pytest.mark.container
@pytest.mark.slurm
def test_the_example_study_on_slurm_bare_and_in_a_container(
        tmp_path: Path, image: Path, slurm_cluster: Any) -> None:
    (tmp_path / "profile.yaml").write_text(CLUSTER.format(
        scheduler="slurm", launcher="srun", python=PYTHON, bind="none", extra=""))
    spec = example(tmp_path, image, nodes=[1, 2], ranks=[1], repeats=1)
    done = run_cli("run", spec, "--wait", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    check(tmp_path / "results" / "example", 4, image)


@pytest.mark.slow
@pytest.mark.container
@pytest.mark.slurm
def test_a_packed_study_in_a_container_on_slurm(tmp_path: Path, image: Path,
                                                slurm_cluster: Any) -> None:
    (tmp_path / "profile.yaml").write_text(CLUSTER.format(
        scheduler="slurm", launcher="srun", python=PYTHON, bind="none", extra=""))
    spec = example(tmp_path, image, nodes=[1, 2], ranks=[1], repeats=1, pack=True)
    done = run_cli("run", spec, "--wait", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    check(tmp_path / "results" / "example", 4, image)


@pytest.mark.slow
@pytest.mark.container
@pytest.mark.pbs
def test_the_example_study_on_openpbs_bare_and_in_a_container(
        image: Path, pbs_cluster: PBSCluster) -> None:
    work = pbs_cluster.user_dir("containers")
    (work / "profile.yaml").write_text(CLUSTER.format(
        scheduler="pbs", launcher="mpirun", python=pbs_cluster.python, bind="none",
        extra="scheduler_options: {gpus_directive: gpus-per-node, place: scatter}\n"))
    spec = example(work, image, nodes=[1, 2], ranks=[1], repeats=1)
    subprocess.run(["chown", "-R", f"{pbs_cluster.user}:{pbs_cluster.user}", str(work)],
                   check=True)
    done = run_as(pbs_cluster, pbs_cluster.python, work, "run", spec, "--wait")
    assert done.returncode == 0, done.stdout + done.stderr
    check(work / "results" / "example", 4, image)


@pytest.mark.slow
@pytest.mark.container
@pytest.mark.flux
def test_the_example_study_on_flux_bare_and_in_a_container(
        image: Path, flux_cluster: FluxCluster) -> None:
    work = flux_cluster.user_dir("containers")
    (work / "profile.yaml").write_text(CLUSTER.format(
        scheduler="flux", launcher="flux", python=PYTHON, bind="per-task",
        extra="scheduler_options: {queue: batch}\n"))
    (work / "profile.yaml").chmod(0o644)
    spec = example(work, image, nodes=[1, 2], ranks=[1], repeats=1)
    done = run_as(flux_cluster, PYTHON, work, "run", spec, "--wait")
    assert done.returncode == 0, done.stdout + done.stderr
    check(work / "results" / "example", 4, image)


def test_a_missing_image_and_a_missing_runtime_are_refused_before_anything_is_written(
        tmp_path: Path) -> None:
    spec = tmp_path / "boxes.yaml"
    spec.write_text("name: boxes\nsystem: local\n"
                    "workload: {model: small_cnn, image_size: 16, num_classes: 10}\n"
                    "grid:\n  container:\n    - none\n"
                    f"    - charliecloud:{tmp_path}/no-such-image\n"
                    f"    - apptainer:{tmp_path}/no-such.sif\n")
    done = run_cli("run", str(spec), cwd=tmp_path, path="/usr/bin:/bin")
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.startswith("preflight: error")]
    image_lines = [x for x in lines if "not found on" in x]
    assert len(image_lines) == 2
    assert any("boxes.yaml:7: grid.container[1]: container image" in x for x in image_lines)
    runtime = [x for x in lines if "apptainer (apptainer, which starts each rank's "
               "container) is not on PATH" in x]
    assert len(runtime) == 1 and "grid.container[2]" in runtime[0]
    assert not (tmp_path / "results").exists()
