"""workload.stack: what the run's node says of its software and hardware, never guessed."""

from __future__ import annotations

import sys
import types

import torch

from scalestudy.workload import stack


def test_a_cpu_run_names_its_cpu_and_the_mpi_that_started_it(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "horovod", types.SimpleNamespace(__version__="0.28.1"))
    got = stack.describe(torch.device("cpu"), {"OMPI_COMM_WORLD_SIZE": "2"})
    assert got["versions"] == {"horovod": "0.28.1", "mpi": "Open MPI"}
    assert "nccl" not in got["versions"] and "gpu_model" not in got["hardware"]
    with open("/proc/cpuinfo", encoding="utf-8") as fh:
        named = any(line.startswith("model name") for line in fh)
    assert ("cpu_model" in got["hardware"]) == named


def test_nothing_is_claimed_without_an_mpi() -> None:
    got = stack.describe(torch.device("cpu"), {})
    assert "mpi" not in got["versions"]
