"""Job scripts whose ranks run in containers, one golden file per runtime and site, each
checked against the form its documentation gives (the source is named with the case).

Regenerate the golden files after an intended change with
    SCALESTUDY_UPDATE_GOLDEN=1 pytest tests/test_container_scripts.py
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from scalestudy.core.grid import expand
from scalestudy.core.load import parse_study
from scalestudy.site.profiles import load_system
from scalestudy.site.render import render

HERE = Path(__file__).parent

#: case -> (system, container, ranks per node, documentation, patterns the script holds)
CASES: dict[str, tuple[str, str, int, str, list[str]]] = {
    "apptainer-polaris": (
        "polaris", "apptainer:/eagle/MyProject/pytorch.sif", 4,
        "ALCF, Containers on Polaris (docs.alcf.anl.gov/polaris/containers/containers/): "
        "mpiexec ... apptainer exec --fakeroot -B /opt -B /var/run/palsd/ $CONTAINER cmd",
        [r"\nmpiexec --np 8 --ppn 4 .*--hostfile \"\$PBS_NODEFILE\" --envall "
         r"set_affinity_gpu_polaris\.sh apptainer exec --fakeroot --nv -B /opt "
         r"-B /var/run/palsd/ -B /scratch/results/conv /eagle/MyProject/pytorch\.sif "
         r"python3 -m scalestudy\.workload ",
         r"\nexport APPTAINERENV_LD_LIBRARY_PATH=\"\$CRAY_LD_LIBRARY_PATH:",
         r"\nmodule load cray-mpich-abi\n"]),
    "apptainer-frontier": (
        "frontier", "apptainer:/lustre/orion/proj/pytorch.sif", 8,
        "OLCF, Containers on Frontier (docs.olcf.ornl.gov/software/"
        "containers_on_frontier.html): srun ... apptainer exec --rocm IMAGE cmd, with "
        "APPTAINER_BINDPATH=/usr/share/libdrm,/var/spool/slurmd,/opt/cray",
        [r"\nsrun --nodes=2 --ntasks-per-node=8 .* apptainer exec --rocm "
         r"-B /usr/share/libdrm -B /var/spool/slurmd -B /opt/cray -B /scratch/results/conv "
         r"/lustre/orion/proj/pytorch\.sif python3 -m scalestudy\.workload ",
         r"\nexport APPTAINER_CONTAINLIBS=\"[^\"]*libcxi\.so\.1"]),
    "pyxis-dgx": (
        "dgx-pyxis.yaml", "pyxis:nvcr.io#nvidia/pytorch:24.01-py3", 8,
        "NVIDIA pyxis README (github.com/NVIDIA/pyxis): srun "
        "--container-image=[REGISTRY#]IMAGE[:TAG] --container-mounts=SRC:DST[,...]",
        [r"\nsrun --nodes=2 --ntasks-per-node=8 .*--mpi=pmix "
         r"'--container-image=nvcr\.io#nvidia/pytorch:24\.01-py3' "
         r"--container-mounts=/scratch/results/conv:/scratch/results/conv "
         r"--no-container-mount-home python3 -m scalestudy\.workload "]),
    "podman-hpc-perlmutter": (
        "perlmutter", "podman-hpc:nersc/pytorch:24.06.02", 4,
        "NERSC podman-hpc (github.com/NERSC/podman-hpc): srun ... podman-hpc run --rm "
        "--gpu --mpi [-v SRC:DST] IMAGE cmd; --mpi passes SLURM_* and PMI_*",
        [r"\nsrun --nodes=2 .* podman-hpc run --rm --gpu --mpi --nccl -e MASTER_ADDR "
         r"-e MASTER_PORT -e OMP_NUM_THREADS .*-e SCALESTUDY_RUN_DIR "
         r"-v /scratch/results/conv:/scratch/results/conv nersc/pytorch:24\.06\.02 "
         r"python3 -m scalestudy\.workload "]),
    "shifter-perlmutter": (
        "perlmutter", "shifter:docker:nersc/pytorch:24.06.02", 4,
        "Shifter shifter(1) (shifter --image=TYPE:TAG --volume=SRC:DST -- cmd); NERSC's "
        "multi-GPU example: srun shifter with --module=gpu,nccl-...",
        [r"\nsrun --nodes=2 .* shifter --image=docker:nersc/pytorch:24\.06\.02 "
         r"--module=gpu,nccl-plugin --volume=/scratch/results/conv:/scratch/results/conv "
         r"-- python3 -m scalestudy\.workload "]),
    "charliecloud-slurm": (
        "generic-slurm", "charliecloud:/scratch/images/pytorch", 4,
        "Charliecloud ch-run(1), 0.31 (hpc.github.io/charliecloud/ch-run.html): srun "
        "ch-run [-b SRC[:DST]] IMAGE -- CMD, one ch-run per rank",
        [r"\nsrun --nodes=2 --ntasks-per-node=4 .* env TMPDIR=/tmp ch-run "
         r"-b /scratch/results/conv:/scratch/results/conv /scratch/images/pytorch -- "
         r"python3 -m scalestudy\.workload "]),
}


def container_script(case: str) -> str:
    system, container, ranks, _, _ = CASES[case]
    spec = (f"name: conv\nsystem: {system}\ncontainer: {container!r}\n"
            f"grid: {{nodes: [2], ranks_per_node: [{ranks}]}}\n"
            "job: {account: MyProject, walltime: '01:00:00'}\n")
    study = parse_study(spec, "/scratch/studies/conv.yaml")
    run = expand(study)[0]  # (a profile file is named as the spec would, read from data/)
    profile = load_system(str(HERE / "data" / system) if system.endswith(".yaml") else system)
    return render(study, profile, run, Path("/scratch/results/conv/runs") / run.run_id,
                  python="python3")


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_launch_line_has_the_documented_form(case: str) -> None:
    text = container_script(case)
    source = CASES[case][3]
    for pattern in CASES[case][4]:
        assert re.search(pattern, text), f"{case}: no {pattern!r} ({source})"
    assert f" SCALESTUDY_CONTAINER_RUNTIME={CASES[case][1].split(':')[0]}\n" in text


@pytest.mark.parametrize("case", sorted(CASES))
def test_script_is_valid_bash_and_matches_its_golden_file(case: str) -> None:
    text = container_script(case)
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
    golden = HERE / "golden" / "containers" / f"{case}.sh"
    if os.environ.get("SCALESTUDY_UPDATE_GOLDEN"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text)
    assert golden.read_text() == text, f"rendered script differs from {golden}"
