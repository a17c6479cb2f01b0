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

NVML updates the counter about every 100 ms (97-103 ms on an H100), so a plain delta over a
window is off by up to one update's energy at each end. Against a 10 s window of a steady
load on that H100 (benchmarks/gpu_energy_window.py, dev/gpu.md), the plain delta was off
by up to 21 % over 0.25 s, 9.2 % over 1 s and 4.9 % over 2 s. While a window is open a
thread therefore reads the counter every 2 ms and notes when its value changes; with at
least MIN_UPDATES of them inside the window, the energy is the counter's mean power between
its first and last update there times the window's length (`window_mj`; up to 3.8 % off
over 1 s and 0.6 % over 2 s), which assumes only that the window's ends draw its mean
power. Over shorter windows the thread's view of when an update came is too coarse (it
shares the interpreter with the training loop), and the plain delta is kept.

The counter is an unsigned 64-bit number of mJ: it wraps after 2^64 mJ (about 585,000
years at 1 kW), so a decrease can only mean a reset (driver reloaded) and makes the
reading unavailable rather than a made-up figure. The arithmetic (`delta_mj`,
`combine`) is pure; the NVML boundary is the `Counter` a `Meter` is given.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: One rank's reading: {"device", "mj"[, "raw_mj", "updates"]} or {"unavailable": why}.
Reading = dict[str, str | int]

#: Reads one GPU's counter: millijoules since the driver loaded.
Counter = Callable[[], int]
INSTALL_HINT = "pip install nvidia-ml-py, or pip install 'scalestudy[gpu]'"


def delta_mj(before: int, after: int) -> int | None:
    """Millijoules between two counter readings; None when the counter went back."""
    return after - before if after >= before else None


#: Seconds between the reads of the thread that notes the counter's updates.
POLL_S = 0.002
#: Counter updates inside a window from which its mean power is taken (about 1 s).
MIN_UPDATES = 10
#: An update: (time.monotonic() when it was seen, the counter's new value in mJ).
Update = tuple[float, int]


def window_mj(start: Update, stop: Update, updates: Sequence[Update],
              min_updates: int = MIN_UPDATES) -> tuple[int, int]:
    """Millijoules over the window [start, stop] and how many counter updates fell inside
    it: the mean power between the first and the last of those updates times the
    window's length, or the plain delta when fewer than `min_updates` (at least 2) fell
    inside."""
    inside = [(t, v) for t, v in updates if start[0] < t <= stop[0]]
    if len(inside) >= max(2, min_updates) and inside[-1][0] > inside[0][0]:
        (t0, v0), (t1, v1) = inside[0], inside[-1]
        return round((v1 - v0) / (t1 - t0) * (stop[0] - start[0])), len(inside)
    return stop[1] - start[1], len(inside)


class _Watcher(threading.Thread):
    """Reads the counter every POLL_S until stopped, noting each change of its value."""

    def __init__(self, counter: Counter, first: int) -> None:
        super().__init__(name="nvml-energy", daemon=True)
        self.counter, self.last = counter, first
        self.updates: list[Update] = []
        self.halt = threading.Event()
        self.error: Exception | None = None

    def run(self) -> None:
        while not self.halt.wait(POLL_S):
            try:
                value = int(self.counter())
            except Exception as exc:  # reported by the meter's stop
                self.error = exc
                return
            if value != self.last:
                self.updates.append((time.monotonic(), value))
                self.last = value

    def finish(self) -> list[Update]:
        self.halt.set()
        self.join()
        if self.error is not None:
            raise self.error
        return self.updates


@dataclass
class Meter:
    """One rank's energy counter (or why it has none) over the timed iterations."""

    counter: Counter | None
    device_id: str = ""  # host and GPU UUID: ranks that share a GPU count it once
    reason: str | None = None  # why there is no counter
    close: Callable[[], object] = lambda: None
    #: note the counter's updates while the window is open (`window_mj`); NVML's meter does
    watch: bool = False
    _before: int | None = None
    _started: float = 0.0
    _watcher: _Watcher | None = field(default=None, repr=False)

    def start(self) -> None:
        """Read the counter before the first timed iteration (and start watching it)."""
        if self.counter is not None:
            try:
                self._before = int(self.counter())
            except Exception as exc:  # an NVML error mid-run: say so, invent nothing
                self.counter, self.reason = None, f"NVML read failed: {exc}"
                return
            self._started = time.monotonic()
            if self.watch:
                self._watcher = _Watcher(self.counter, self._before)
                self._watcher.start()

    def stop(self) -> Reading:
        """This rank's reading: {"device", "mj"}, or {"unavailable": why}."""
        try:
            if self.counter is None or self._before is None:
                return {"unavailable": self.reason or "the counter was not started"}
            try:
                stopped = time.monotonic()
                updates = self._watcher.finish() if self._watcher is not None else []
                after = int(self.counter())
            except Exception as exc:
                return {"unavailable": f"NVML read failed: {exc}"}
            mj = delta_mj(self._before, after)
            if mj is None or any(v < self._before for _, v in updates):
                return {"unavailable": "the NVML energy counter went backwards (driver "
                        "reloaded?)"}
            if self._watcher is None:
                return {"device": self.device_id, "mj": mj}
            estimate, seen = window_mj((self._started, self._before), (stopped, after),
                                       updates)
            return {"device": self.device_id, "mj": estimate, "raw_mj": mj, "updates": seen}
        finally:
            self.close()


def combine(taken: Sequence[Reading | None], samples: int) -> dict[str, object]:
    """The record's energy fields from every rank's reading (in rank order; None: not
    taken): the sum over distinct GPUs, or `energy_unavailable` with the first rank's
    reason."""
    readings = [r if r is not None else {"unavailable": "not measured"} for r in taken]
    reasons = [str(r["unavailable"]) for r in readings if "unavailable" in r]
    if reasons:
        if len(reasons) == len(readings) and len(set(reasons)) == 1:
            return {"energy_unavailable": reasons[0]}  # the same on every rank
        rank = next(i for i, r in enumerate(readings) if "unavailable" in r)
        return {"energy_unavailable": f"rank {rank}: {readings[rank]['unavailable']}"}
    per_device: dict[str, int] = {}
    for reading in readings:
        per_device.setdefault(str(reading["device"]), int(reading["mj"]))
    joules = sum(per_device.values()) / 1000
    out: dict[str, object] = {"energy_j": joules, "energy_source": "nvml",
                           "energy_gpus": len(per_device),
                           "energy_j_per_sample": joules / samples if samples > 0 else None}
    seen = [int(r["updates"]) for r in readings if "updates" in r]
    if seen:  # fewest counter updates inside a rank's window (under 2: a plain delta)
        out["energy_counter_updates"] = min(seen)
    return out


def _nvml_id(props: object) -> str:
    """NVML's UUID string ("GPU-...") of a torch device's properties."""
    uuid = str(getattr(props, "uuid", ""))
    return uuid if uuid.startswith(("GPU-", "MIG-")) else "GPU-" + uuid


def open_meter(device: torch.device) -> Meter:
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
                 device_id=f"{socket.gethostname()}/{uuid}", close=pynvml.nvmlShutdown,
                 watch=True)
