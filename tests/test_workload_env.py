"""Rank discovery from launcher environments (dict environments, no processes)."""

from __future__ import annotations

import dataclasses

import pytest

from scalestudy.workload.env import (
    DEFAULT_MASTER_PORT,
    LAUNCHERS,
    DistEnv,
    discover,
    expand_hostlist,
    first_host,
    tasks_per_node,
)


@pytest.mark.parametrize(
    ("hostlist", "hosts"),
    [
        ("nid001", ["nid001"]),
        ("nid[001-003,007],login1", ["nid001", "nid002", "nid003", "nid007", "login1"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("a,b , c", ["a", "b", "c"]),
        ("gpu[1-2]-ib[0-1]", ["gpu1-ib0", "gpu1-ib1", "gpu2-ib0", "gpu2-ib1"]),
        ("x1000c0s[0-1]b0n0,x1000c1s0b0n0", ["x1000c0s0b0n0", "x1000c0s1b0n0", "x1000c1s0b0n0"]),
        ("nid[0099-0101]", ["nid0099", "nid0100", "nid0101"]),
    ],
)
def test_expand_hostlist(hostlist, hosts):
    assert expand_hostlist(hostlist) == hosts
    assert first_host(hostlist) == hosts[0]


@pytest.mark.parametrize("bad", ["nid[001-003", "nid001]", "nid[a-b]", "nid[5-3]", "n[1-]", ""])
def test_expand_hostlist_rejects_malformed(bad):
    with pytest.raises(ValueError):
        first_host(bad)


def test_first_host_does_not_expand_everything():
    assert first_host("nid[000000-999999]") == "nid000000"


@pytest.mark.parametrize(
    ("value", "counts"),
    [("4", [4]), ("2(x3),1", [2, 2, 2, 1]), ("1,3(x2)", [1, 3, 3])],
)
def test_tasks_per_node(value, counts):
    assert tasks_per_node(value) == counts


def test_tasks_per_node_rejects_garbage():
    with pytest.raises(ValueError):
        tasks_per_node("2(3)")


def test_no_launcher_is_a_single_process():
    assert discover({}) == DistEnv(0, 1, 0, 1, 0, 1, "127.0.0.1", 29500, "single")
    assert discover({"PATH": "/bin", "LOCAL_RANK": "3"}).world_size == 1


def test_torchrun():
    env = discover(
        {
            "RANK": "5",
            "WORLD_SIZE": "8",
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "4",
            "GROUP_RANK": "1",
            "GROUP_WORLD_SIZE": "2",
            "MASTER_ADDR": "node0",
            "MASTER_PORT": "29400",
        }
    )
    assert env == DistEnv(5, 8, 1, 4, 1, 2, "node0", 29400, "torchrun")


def test_torchrun_wins_over_slurm_and_mpi():
    environ = {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "1",
        "OMPI_COMM_WORLD_RANK": "0",
        "OMPI_COMM_WORLD_SIZE": "1",
    }
    env = discover(environ)
    assert (env.source, env.rank, env.world_size) == ("torchrun", 1, 2)


def test_torchrun_without_local_vars_derives_them():
    env = discover({"RANK": "3", "WORLD_SIZE": "4"})
    assert (env.local_rank, env.local_world_size, env.node_rank, env.num_nodes) == (3, 4, 0, 1)


SLURM = {
    "SLURM_PROCID": "5",
    "SLURM_NTASKS": "8",
    "SLURM_LOCALID": "1",
    "SLURM_TASKS_PER_NODE": "4(x2)",
    "SLURM_NODEID": "1",
    "SLURM_NNODES": "2",
    "SLURM_JOB_NODELIST": "nid[004-005]",
    "SLURM_LAUNCH_NODE_IPADDR": "10.0.0.4",
}


def test_slurm_srun():
    env = discover(SLURM)
    assert env == DistEnv(5, 8, 1, 4, 1, 2, "nid004", DEFAULT_MASTER_PORT, "slurm")


def test_slurm_uneven_tasks_per_node_uses_this_nodes_count():
    env = discover(
        SLURM
        | {"SLURM_NTASKS": "5", "SLURM_TASKS_PER_NODE": "4,1", "SLURM_PROCID": "4"}
        | {"SLURM_LOCALID": "0"}
    )
    assert (env.local_world_size, env.node_rank) == (1, 1)


def test_slurm_step_values_beat_job_values():
    env = discover(
        SLURM
        | {
            "SLURM_STEP_NUM_TASKS": "6",
            "SLURM_STEP_TASKS_PER_NODE": "3(x2)",
            "SLURM_STEP_NUM_NODES": "2",
            "SLURM_STEP_NODELIST": "nid[007-008]",
        }
    )
    assert (env.world_size, env.local_world_size, env.master_addr) == (6, 3, "nid007")


def test_slurm_ntasks_per_node_plain_number():
    environ = {k: v for k, v in SLURM.items() if k != "SLURM_TASKS_PER_NODE"}
    assert discover(environ | {"SLURM_NTASKS_PER_NODE": "4"}).local_world_size == 4


def test_slurm_master_addr_env_wins_then_launch_node_ip():
    assert discover(SLURM | {"MASTER_ADDR": "head", "MASTER_PORT": "1234"}).master_addr == "head"
    assert discover(SLURM | {"MASTER_PORT": "1234"}).master_port == 1234
    no_list = {k: v for k, v in SLURM.items() if k != "SLURM_JOB_NODELIST"}
    assert discover(no_list).master_addr == "10.0.0.4"


def test_openmpi_derives_node_rank_and_uses_slurm_nodelist_for_master():
    environ = {
        "OMPI_COMM_WORLD_RANK": "6",
        "OMPI_COMM_WORLD_SIZE": "8",
        "OMPI_COMM_WORLD_LOCAL_RANK": "2",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
        # an sbatch script's own step: must not win over mpirun's variables
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "8",
        "SLURM_JOB_NODELIST": "gpu[12,15]",
    }
    env = discover(environ)
    assert env == DistEnv(6, 8, 2, 4, 1, 2, "gpu12", 29500, "openmpi")


def test_mpich_pals_on_polaris(tmp_path):
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("\nx3005c0s13b0n0.hsn.cm.polaris.alcf.anl.gov\nx3005c0s19b0n0\n")
    environ = {
        "PMI_RANK": "3",
        "PMI_SIZE": "8",
        "PMI_LOCAL_RANK": "3",
        "PMI_LOCAL_SIZE": "4",
        "PALS_RANKID": "3",
        "PALS_LOCAL_RANKID": "3",
        "PALS_NODEID": "0",
        "PBS_NODEFILE": str(nodefile),
    }
    env = discover(environ)
    assert env == DistEnv(
        3, 8, 3, 4, 0, 2, "x3005c0s13b0n0.hsn.cm.polaris.alcf.anl.gov", 29500, "mpich"
    )


def test_pals_and_pmix_rank_names_are_accepted():
    assert discover({"PALS_RANKID": "2", "PMI_SIZE": "4"}).rank == 2
    assert discover({"PMIX_RANK": "1", "PMI_SIZE": "2"}).rank == 1


def test_pmix_rank_without_a_size_falls_through_to_slurm():
    env = discover(SLURM | {"PMIX_RANK": "5"})
    assert env.source == "slurm"


def test_master_fallback_order(tmp_path):
    mpi = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}
    nodefile = tmp_path / "nodes"
    nodefile.write_text("pbs-node1\npbs-node2\n")
    assert discover(mpi).master_addr == "127.0.0.1"
    assert discover(mpi | {"PBS_NODEFILE": str(nodefile)}).master_addr == "pbs-node1"
    with_list = mpi | {"PBS_NODEFILE": str(nodefile), "SLURM_NODELIST": "c[3-4]"}
    assert discover(with_list).master_addr == "c3"
    assert discover(with_list | {"MASTER_ADDR": "m"}).master_addr == "m"


def test_single_process_reads_master_port_env():
    assert discover({"MASTER_PORT": "4444"}).master_port == 4444


def test_empty_values_count_as_absent():
    assert discover({"RANK": "", "WORLD_SIZE": ""}).source == "single"


@pytest.mark.parametrize(
    "environ",
    [
        {"RANK": "two", "WORLD_SIZE": "4"},
        {"RANK": "4", "WORLD_SIZE": "4"},
        {"RANK": "0", "WORLD_SIZE": "0"},
        {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"},
        {"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "70000"},
    ],
)
def test_inconsistent_environments_are_rejected(environ):
    with pytest.raises(ValueError):
        discover(environ)


def test_every_family_maps_rank_and_world_size():
    for name, table in LAUNCHERS:
        assert table["rank"] and table["world_size"], name
        assert set(table) <= {f.name for f in dataclasses.fields(DistEnv)}, name


def test_dist_env_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        discover({}).rank = 1  # type: ignore[misc]
