"""Energy from NVML counters: the arithmetic with a fake counter at the boundary, the
NVML wiring with a fake `pynvml`, and the reasons given where nothing can be measured."""

from __future__ import annotations

import sys
import time
import types
from collections.abc import Iterator

import pytest
import torch

from scalestudy.workload import energy
from scalestudy.workload.energy import Meter, combine, delta_mj, open_meter, window_mj


def _counter(*values: int) -> tuple[energy.Counter, list[int]]:
    """A fake NVML counter returning `values` in turn (mJ), and how often it was read."""
    it: Iterator[int] = iter(values)
    reads: list[int] = []

    def read() -> int:
        reads.append(1)
        return next(it)

    return read, reads


def test_delta_is_after_minus_before_and_none_when_the_counter_went_back() -> None:
    assert delta_mj(1_000, 251_000) == 250_000
    assert delta_mj(5, 5) == 0
    assert delta_mj(2**64 - 10, 5) is None  # a 64-bit mJ counter does not wrap: a reset


def test_a_meter_reads_before_and_after_and_closes() -> None:
    read, reads = _counter(10_000, 72_500)
    closed = []
    meter = Meter(read, device_id="node1/GPU-a", close=lambda: closed.append(1))
    meter.start()
    assert meter.stop() == {"device": "node1/GPU-a", "mj": 62_500}
    assert len(reads) == 2 and closed == [1]


def test_a_counter_that_goes_back_or_fails_gives_a_reason_not_a_number() -> None:
    read, _ = _counter(9_000, 1_000)
    meter = Meter(read, device_id="x")
    meter.start()
    assert "went backwards" in meter.stop()["unavailable"]

    def broken() -> int:
        raise RuntimeError("NVML_ERROR_GPU_IS_LOST")

    meter = Meter(broken, device_id="x")
    meter.start()
    assert meter.stop() == {"unavailable": "NVML read failed: NVML_ERROR_GPU_IS_LOST"}
    assert Meter(None, reason="no GPU").stop() == {"unavailable": "no GPU"}


def test_combine_sums_the_ranks_gpus_once_each() -> None:
    readings = [{"device": "n1/GPU-a", "mj": 100_000}, {"device": "n1/GPU-b", "mj": 150_000},
                {"device": "n2/GPU-a", "mj": 250_000},
                {"device": "n1/GPU-a", "mj": 100_400}]  # a 4th rank on GPU-a of n1
    out = combine(readings, samples=1_000)
    assert out == {"energy_j": 500.0, "energy_source": "nvml", "energy_gpus": 3,
                   "energy_j_per_sample": 0.5}


def test_combine_reports_why_when_any_rank_cannot_measure() -> None:
    same = [{"unavailable": "no NVIDIA GPU (the run is on cpu)"}] * 4
    assert combine(same, 64) == {"energy_unavailable": "no NVIDIA GPU (the run is on cpu)"}
    mixed = [{"device": "a", "mj": 5}, {"unavailable": "nvidia-ml-py is not installed"}]
    assert combine(mixed, 64) == {
        "energy_unavailable": "rank 1: nvidia-ml-py is not installed"}


def test_on_cpu_there_is_no_gpu_to_measure() -> None:
    meter = open_meter(torch.device("cpu"))
    assert meter.counter is None and meter.reason == "no NVIDIA GPU (the run is on cpu)"


def _fake_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    props = types.SimpleNamespace(uuid="1234abcd-0000-1111-2222-333344445555")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    monkeypatch.setattr(torch.version, "hip", None)


def test_without_nvidia_ml_py_the_reason_says_how_to_install_it(monkeypatch) -> None:
    _fake_cuda(monkeypatch)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the import fails for real
    meter = open_meter(torch.device("cuda", 0))
    assert meter.counter is None
    assert meter.reason == ("nvidia-ml-py is not installed (pip install nvidia-ml-py, or pip "
                            "install 'scalestudy[gpu]')")


def _fake_pynvml(energy_mj: list[int], supported: bool = True) -> types.ModuleType:
    nvml = types.ModuleType("pynvml")
    calls: list[str] = []
    nvml.calls = calls  # type: ignore[attr-defined]
    nvml.nvmlInit = lambda: calls.append("init")  # type: ignore[attr-defined]
    nvml.nvmlShutdown = lambda: calls.append("shutdown")  # type: ignore[attr-defined]

    def by_uuid(uuid: str) -> str:
        calls.append(uuid)
        return "handle"

    def total(handle: str) -> int:
        assert handle == "handle"
        if not supported:
            raise RuntimeError("Not Supported")
        return energy_mj.pop(0) if len(energy_mj) > 1 else energy_mj[0]  # then it stays

    nvml.nvmlDeviceGetHandleByUUID = by_uuid  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetTotalEnergyConsumption = total  # type: ignore[attr-defined]
    return nvml


def test_nvml_wiring_with_a_fake_library(monkeypatch) -> None:
    _fake_cuda(monkeypatch)
    fake = _fake_pynvml([1_000, 1_000, 91_000])  # probe read, start, stop
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    meter = open_meter(torch.device("cuda", 0))
    assert meter.reason is None
    assert meter.device_id.endswith("/GPU-1234abcd-0000-1111-2222-333344445555")
    assert meter.watch  # NVML's counter changes about every 100 ms: its updates are noted
    meter.start()
    reading = meter.stop()
    assert reading["mj"] == reading["raw_mj"] == 90_000  # one update: the plain delta
    assert fake.calls == ["init", "GPU-1234abcd-0000-1111-2222-333344445555", "shutdown"]
    assert combine([reading], samples=90) == {"energy_j": 90.0, "energy_source": "nvml",
                                              "energy_gpus": 1, "energy_j_per_sample": 1.0,
                                              "energy_counter_updates": reading["updates"]}


def test_a_gpu_without_the_energy_counter_gives_the_reason(monkeypatch) -> None:
    _fake_cuda(monkeypatch)
    fake = _fake_pynvml([], supported=False)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    meter = open_meter(torch.device("cuda", 0))
    assert meter.counter is None and "no NVML energy counter" in (meter.reason or "")
    assert fake.calls[-1] == "shutdown"


def test_a_window_is_its_mean_power_between_updates_times_its_length() -> None:
    # a 500 W load; the counter changes every 0.1 s, at 0.05, 0.15, ..., 0.95
    updates = [(0.05 + 0.1 * k, 25_000 + 50_000 * k) for k in range(10)]

    def at(t: float) -> tuple[float, int]:  # the counter as read at t
        return t, max([v for u, v in updates if u <= t], default=0)

    start, stop = at(0.12), at(0.38)  # a 0.26 s window
    mj, seen = window_mj(start, stop, updates, min_updates=2)
    assert seen == 3 and mj == 130_000  # 500 W x 0.26 s
    assert stop[1] - start[1] == 150_000  # the plain delta: 15 % high
    # fewer updates inside than asked for: the plain delta, said so by the count
    assert window_mj(start, stop, updates) == (150_000, 3)  # MIN_UPDATES is 10
    assert window_mj(at(0.12), at(0.2), updates, min_updates=1) == (50_000, 1)  # 2 at least
    long_mj, long_seen = window_mj(at(0.01), at(0.99), updates)
    assert long_seen == 10 and long_mj == 490_000  # 500 W x 0.98 s; the delta says 475 J
    assert at(0.99)[1] - at(0.01)[1] == 475_000


def test_a_watching_meter_notes_the_updates_of_its_counter() -> None:
    clock = {"value": 1_000}

    def read() -> int:
        clock["value"] += 7  # changes at every read
        return clock["value"]

    meter = Meter(read, device_id="x", watch=True)
    meter.start()
    time.sleep(0.05)
    reading = meter.stop()
    assert reading["device"] == "x" and reading["updates"] >= 2
    assert reading["raw_mj"] == clock["value"] - 1_007 and reading["mj"] > 0
    out = combine([reading], samples=10)
    assert out["energy_counter_updates"] == reading["updates"]


def test_a_counter_failing_while_watched_gives_a_reason() -> None:
    calls = {"n": 0}

    def read() -> int:
        calls["n"] += 1
        if calls["n"] > 3:
            raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
        return calls["n"]

    meter = Meter(read, device_id="x", watch=True)
    meter.start()
    time.sleep(0.05)
    assert meter.stop() == {"unavailable": "NVML read failed: NVML_ERROR_GPU_IS_LOST"}
