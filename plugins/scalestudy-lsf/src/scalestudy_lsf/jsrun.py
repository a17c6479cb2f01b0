"""jsrun (IBM Job Step Manager): how ranks start in an LSF/CSM job, as a scalestudy starter.

jsrun places tasks in resource sets (a few cores and GPUs of one node, never more than
one node): `-n` sets in all, `-r` per node, `-a` tasks, `-c` cores and `-g` GPUs each,
`-b` the binding. A rank is one resource set of one task with its cores and its share
of the node's GPUs (jsrun sets CUDA_VISIBLE_DEVICES to them); a torchrun agent is one
resource set per node holding the node's cores and GPUs. jsrun's tasks get Open MPI's
OMPI_COMM_WORLD_* variables (Spectrum MPI), which the workload reads.
"""

from __future__ import annotations

from scalestudy.core.errors import ScalestudyError
from scalestudy.site.launchers import Launch, Slots, Word


def jsrun(launch: Launch, slots: Slots) -> list[Word]:
    """`jsrun -n SETS -r PER_NODE -a 1 -c CORES -g GPUS -b BIND`, then the site's
    launcher_options.extra_args (e.g. `--smpiargs=off` for a program without MPI)."""
    system = launch.system
    opts, gpus = system.launcher_options, system.gpus_per_node
    if slots.ranks:  # one resource set per rank
        cores = launch.threads
        share = opts.gpus_per_task or (gpus // slots.per_node if gpus else 0)
        if gpus and share == 0:
            raise ScalestudyError(
                f"system {system.name}: jsrun cannot share a GPU between resource sets, and "
                f"{slots.per_node} ranks per node are more than its {gpus} GPUs: use at "
                f"most {gpus} ranks per node (grid.ranks_per_node)")
    else:  # one torchrun agent per node, with all of the node's ranks' cores and GPUs
        cores, share = launch.threads * launch.run.ranks_per_node, gpus
    return ["jsrun", "-n", str(slots.nodes * slots.per_node), "-r", str(slots.per_node),
            "-a", "1", "-c", str(cores), "-g", str(share),
            "-b", opts.cpu_bind or f"packed:{cores}", *opts.extra_args]
