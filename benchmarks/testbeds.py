"""The site profile of the localhost Slurm testbed (scripts/slurm-testbed: 4 virtual
nodes of 2 CPUs), shared by the benchmarks that run on it."""

from __future__ import annotations


def slurm_profile(name: str) -> str:
    """A profile named `name` for the Slurm testbed, as YAML."""
    return f"""\
name: {name}
description: the localhost Slurm testbed (4 virtual nodes of 2 CPUs)
scheduler: slurm
launcher: srun
max_nodes: 4
cores_per_node: 2
threads_per_rank: 1
launcher_options: {{cpu_bind: none}}
"""
