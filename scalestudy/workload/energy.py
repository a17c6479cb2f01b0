"""Energy of the timed iterations, read from NVIDIA's NVML counters: measured, never
estimated.

Every rank reads its GPU's total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``,
millijoules since the driver loaded; Volta and newer) just before the first timed
iteration and just after the last; the record gets the sum of the deltas over the job's
GPUs (a GPU that several ranks share is counted once) as ``energy_j`` with
``energy_source: "nvml"`` and ``energy_j_per_sample``. Where there is no NVIDIA GPU, no
NVML library or no counter, the record says why in ``energy_unavailable`` and has no
energy figure.

The binding is ``nvidia-ml-py`` (import name ``pynvml``): NVIDIA's own, one pure-Python
ctypes module with no dependencies (its PyPI metadata lists none), so it suits a guest
on compute nodes; it is often already installed beside CUDA PyTorch. zeus-ml measures
the same counter but brings numpy, pandas, scikit-learn, pydantic, rich, httpx, amdsmi
and more (zeus-ml 0.11 metadata), which the workload must not import.

The counter is an unsigned 64-bit number of mJ: it wraps after 2^64 mJ (about 585,000
years at 1 kW), so a decrease can only mean a reset (driver reloaded) and makes the
reading unavailable rather than a made-up figure. The arithmetic (`delta_mj`,
`combine`) is pure; the NVML boundary is the `Counter` a `Meter` is given.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

#: Reads one GPU's counter: millijoules since the driver loaded.
Counter = Callable[[], int]
INSTALL_HINT = "pip install nvidia-ml-py, or pip install 'scalestudy[gpu]'"


def delta_mj(before: int, after: int) -> int | None:
    """Millijoules between two counter readings; None when the counter went back."""
    return after - before if after >= before else None


@dataclass
class Meter:
    """One rank's energy counter (or why it has none) over the timed iterations."""

    counter: Counter | None
    device_id: str = ""  # host and GPU UUID: ranks that share a GPU count it once
    reason: str | None = None  # why there is no counter
    close: Callable[[], object] = lambda: None
    _before: int | None = None

    def start(self) -> None:
        """Read the counter before the first timed iteration."""
        if self.counter is not None:
            try:
                self._before = int(self.counter())
            except Exception as exc:  # an NVML error mid-run: say so, invent nothing
                self.counter, self.reason = None, f"NVML read failed: {exc}"

    def stop(self) -> dict[str, Any]:
        """This rank's reading: {"device", "mj"}, or {"unavailable": why}."""
        try:
            if self.counter is None or self._before is None:
                return {"unavailable": self.reason or "the counter was not started"}
            try:
                mj = delta_mj(self._before, int(self.counter()))
            except Exception as exc:
                return {"unavailable": f"NVML read failed: {exc}"}
            if mj is None:
                return {"unavailable": "the NVML energy counter went backwards (driver "
                        "reloaded?)"}
            return {"device": self.device_id, "mj": mj}
        finally:
            self.close()


def combine(readings: Sequence[dict[str, Any]], samples: int) -> dict[str, Any]:
    """The record's energy fields from every rank's reading (in rank order): the sum
    over distinct GPUs, or `energy_unavailable` with the first rank's reason."""
    reasons = [str(r["unavailable"]) for r in readings if "unavailable" in r]
    if reasons:
        if len(reasons) == len(readings) and len(set(reasons)) == 1:
            return {"energy_unavailable": reasons[0]}  # the same on every rank
        rank = next(i for i, r in enumerate(readings) if "unavailable" in r)
        return {"energy_unavailable": f"rank {rank}: {readings[rank]['unavailable']}"}
    per_device: dict[str, int] = {}
    for reading in readings:
        per_device.setdefault(reading["device"], int(reading["mj"]))
    joules = sum(per_device.values()) / 1000
    return {"energy_j": joules, "energy_source": "nvml", "energy_gpus": len(per_device),
            "energy_j_per_sample": joules / samples if samples > 0 else None}


def _nvml_id(props: Any) -> str:
    """NVML's UUID string ("GPU-...") of a torch device's properties."""
    uuid = str(getattr(props, "uuid", ""))
    return uuid if uuid.startswith(("GPU-", "MIG-")) else "GPU-" + uuid


def open_meter(device: Any) -> Meter:
    """The NVML counter of `device` (a torch.device), or a Meter that says why not."""
    if device.type != "cuda":
        return Meter(None, reason=f"no NVIDIA GPU (the run is on {device.type})")
    import torch

    if torch.version.hip:
        return Meter(None, reason="AMD GPU (ROCm): NVML does not apply")
    try:
        import pynvml
    except ImportError:
        return Meter(None, reason=f"nvidia-ml-py is not installed ({INSTALL_HINT})")
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return Meter(None, reason=f"NVML did not initialise: {exc}")
    try:
        uuid = _nvml_id(torch.cuda.get_device_properties(device))
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)  # supported on this GPU?
    except Exception as exc:
        pynvml.nvmlShutdown()
        return Meter(None, reason=f"no NVML energy counter for this GPU: {exc}")
    return Meter(lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle),
                 device_id=f"{socket.gethostname()}/{uuid}", close=pynvml.nvmlShutdown)
