"""The software and hardware a run ran on, as the workload sees it on its node: versions
(NCCL, CUDA runtime and driver, Horovod, DeepSpeed, the MPI that started the ranks) and
the device (GPU model and count, or the CPU). The results store keeps it as provenance."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: Variables an MPI sets in each rank's environment, and its name.
MPI_MARKERS: tuple[tuple[str, str], ...] = (
    ("OMPI_COMM_WORLD_SIZE", "Open MPI"), ("PALS_RANKID", "Cray PALS (MPICH)"),
    ("PMI_RANK", "MPICH (PMI)"), ("MV2_COMM_WORLD_SIZE", "MVAPICH2"),
    ("I_MPI_ROOT", "Intel MPI"))


def describe(device: torch.device, environ: Mapping[str, str]
             ) -> dict[str, dict[str, str | int]]:
    """{"versions": {...}, "hardware": {...}}: what could be read here (never guessed)."""
    import torch

    versions: dict[str, str | int] = {}
    hardware: dict[str, str | int] = {}
    if device.type == "cuda":
        if torch.version.cuda:
            versions["cuda_runtime"] = torch.version.cuda
        if torch.distributed.is_nccl_available():
            versions["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        driver = _driver_version()
        if driver:
            versions["cuda_driver"] = driver
        hardware["gpu_model"] = torch.cuda.get_device_name(device)
        hardware["gpus_per_node"] = torch.cuda.device_count()
    elif device.type == "xpu":
        if getattr(torch.version, "xpu", None):
            versions["xpu_runtime"] = str(torch.version.xpu)
        hardware["gpu_model"] = torch.xpu.get_device_name(device)
        hardware["gpus_per_node"] = torch.xpu.device_count()
    else:
        cpu = _cpu_model()
        if cpu:
            hardware["cpu_model"] = cpu
    for module in ("horovod", "deepspeed"):
        found = sys.modules.get(module)
        if found is not None and getattr(found, "__version__", None):
            versions[module] = str(found.__version__)
    mpi = next((name for var, name in MPI_MARKERS if var in environ), None)
    if mpi:
        versions["mpi"] = mpi
    return {"versions": versions, "hardware": hardware}


def _driver_version() -> str | None:
    """The NVIDIA driver's version through NVML, where nvidia-ml-py is installed."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            value = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML here: the version is simply not known
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None
