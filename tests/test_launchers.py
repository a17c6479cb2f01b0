"""Launchers: the launch line of a run for srun, PALS mpiexec, Open MPI mpirun, torchrun."""

from __future__ import annotations

import pytest

from scalestudy.core.errors import ScalestudyError
from scalestudy.core.grid import expand
from scalestudy.core.load import parse_study
from scalestudy.site import schedulers
from scalestudy.site.launchers import Launch, Shell, launch_words
from scalestudy.site.profiles import LauncherOptions, SystemProfile
from scalestudy.site.program import Program
from scalestudy.site.render import shell_words

RUN = expand(parse_study("name: l\ngrid: {nodes: [2], ranks_per_node: [4]}\n"))[0]


def system(launcher: str, scheduler: str = "slurm", gpus: int = 4, **opts: object) -> SystemProfile:
    return SystemProfile(name="t", scheduler=scheduler, launcher=launcher, gpus_per_node=gpus,
                         cores_per_node=64, max_nodes=10,
                         launcher_options=LauncherOptions(**opts))


def prog(command: list[str] | None = None) -> Program:
    if command is None:
        return Program(python="python3", args=("--model", "resnet50"), bundled=True)
    return Program(python="python3", args=tuple(command), bundled=False)


def line(sys_: SystemProfile, command: list[str] | None = None, threads: int = 16) -> str:
    launch = Launch(run=RUN, system=sys_, program=prog(command), threads=threads,
                    env_names=("NCCL_ALGO",),
                    hostfile=schedulers.get(sys_.scheduler).in_job.hostfile)
    return shell_words(launch_words(launch))


def test_srun_with_site_binding() -> None:
    assert line(system("srun", gpus_per_task=1, gpu_bind="closest", cpu_bind="cores",
                       mpi="pmix")) == (
        "srun --nodes=2 --ntasks-per-node=4 --cpus-per-task=16 --cpu-bind=cores "
        "--gpus-per-task=1 --gpu-bind=closest --mpi=pmix "
        "python3 -m scalestudy.workload --model resnet50")


def test_pals_mpiexec_as_alcf_documents_it() -> None:
    text = line(system("mpiexec", "pbs", depth=16, cpu_bind="depth",
                       gpu_wrapper="/soft/set_affinity_gpu_polaris.sh"))
    assert text == ('mpiexec --np 8 --ppn 4 --depth 16 --cpu-bind depth '
                    '--hostfile "$PBS_NODEFILE" --envall /soft/set_affinity_gpu_polaris.sh '
                    'python3 -m scalestudy.workload --model resnet50')


def test_mpiexec_takes_its_host_file_from_the_scheduler_and_never_guesses_one() -> None:
    launch = Launch(run=RUN, system=system("mpiexec", "pbs"), program=prog(), threads=1,
                    hostfile='"$SCALESTUDY_STEP_HOSTFILE"')  # a packed step's own hosts
    assert '--hostfile "$SCALESTUDY_STEP_HOSTFILE"' in shell_words(launch_words(launch))
    # No host file given (profiles refuse mpiexec under a scheduler that writes none,
    # when they load): an error, never a guess at some scheduler's variable.
    bare = Launch(run=RUN, system=system("mpiexec", "pbs"), program=prog(), threads=1)
    with pytest.raises(ScalestudyError, match="writes none"):
        launch_words(bare)


def test_open_mpi_mpirun_passes_variables_and_maps_per_node() -> None:
    text = line(system("mpirun", gpus=0), threads=1)
    assert text.startswith("mpirun -np 8 --map-by ppr:4:node --bind-to core ")
    for name in ("MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", "NCCL_ALGO"):
        assert f"-x {name}" in text
    assert "--hostfile" not in text
    assert "--map-by ppr:4:node:PE=16" in line(system("mpirun", gpus=0), threads=16)
    assert '--hostfile "$PBS_NODEFILE"' in line(system("mpirun", "pbs", gpus=0))


def test_torchrun_one_agent_per_node_through_srun() -> None:
    text = line(system("torchrun", torchrun_via="srun"))
    assert text.startswith("srun --nodes=2 --ntasks-per-node=1 python3 -m torch.distributed.run "
                           "--nnodes=2 --nproc-per-node=4 --rdzv-backend=c10d "
                           '--rdzv-endpoint="${MASTER_ADDR}:${MASTER_PORT}" ')
    assert text.endswith("-m scalestudy.workload --model resnet50")


def test_torchrun_through_mpiexec_runs_a_command_without_python() -> None:
    text = line(system("torchrun", "pbs", torchrun_via="mpiexec"), command=["./train", "a b"])
    assert text.startswith("mpiexec --np 2 --ppn 1 ")
    assert text.endswith("--no-python ./train 'a b'")


def test_torchrun_without_a_way_to_start_agents_is_an_error() -> None:
    with pytest.raises(ScalestudyError, match="torchrun_via"):
        line(system("torchrun"))


def test_spec_values_are_never_shell_words() -> None:
    words = launch_words(Launch(run=RUN, system=system("srun"), program=prog(["$(id)", "`id`"]),
                                threads=1))
    assert [w for w in words if isinstance(w, Shell)] == []
    assert shell_words(words).endswith("'$(id)' '`id`'")


def test_the_program_knows_its_words_for_a_rank_and_for_torchrun() -> None:
    bundled, command = prog(), prog(["./train", "a b"])
    assert bundled.argv() == ["python3", "-m", "scalestudy.workload", "--model", "resnet50"]
    assert bundled.torchrun_args() == ["-m", "scalestudy.workload", "--model", "resnet50"]
    assert command.argv() == ["./train", "a b"]
    assert command.torchrun_args() == ["--no-python", "./train", "a b"]


def local_line(backend: str = "ddp", command: list[str] | None = None) -> str:
    run = expand(parse_study(f"name: l\ngrid: {{nodes: [3], ranks_per_node: [2], "
                             f"backend: [{backend}]}}\n"))[0]
    launch = Launch(run=run, system=system("torchrun", "local", gpus=0), program=prog(command),
                    threads=1, one_host=True)
    return shell_words(launch_words(launch))


def test_local_starts_one_torchrun_agent_per_node_through_the_script() -> None:
    text = local_line(command=["./train"])
    assert text.startswith("scalestudy_agents 3 python3 -m torch.distributed.run --nnodes=3 "
                           "--nproc-per-node=2 --rdzv-backend=c10d "
                           '--rdzv-endpoint="${MASTER_ADDR}:${MASTER_PORT}" ')
    assert text.endswith("--max-restarts=0 --monitor-interval=1 --no-python ./train")


def test_local_horovod_starts_every_rank_with_horovodrun() -> None:
    assert local_line("horovod") == (
        "python3 -m horovod.runner.launch -np 6 -H localhost:6 "
        "python3 -m scalestudy.workload --model resnet50")
