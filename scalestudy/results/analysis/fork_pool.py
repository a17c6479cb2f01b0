"""Work spread over forked processes where that is safe and pays: a process with no other
thread (a fork copies no lock another thread holds) on a host with CPUs to spare. The
report's plots and `collect`'s reading of many run directories use it; the answers are
the same as doing the work one piece after the other."""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def cpus() -> int:
    """The CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def workers(tasks: int) -> int:
    """Processes worth forking for `tasks` pieces of work: at most one per piece and per
    CPU; 1 (work here) where forking is unsafe (another thread runs) or unavailable."""
    if tasks < 2 or threading.active_count() > 1 \
            or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, min(tasks, cpus()))


def pool(tasks: int) -> ProcessPoolExecutor | None:
    """A pool of forked processes for `tasks` pieces of work, or None: do them here."""
    count = workers(tasks)
    if count == 1:
        return None
    return ProcessPoolExecutor(count, mp_context=multiprocessing.get_context("fork"))


def mapped(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """`[fn(item) for item in items]`, the items shared out over forked processes when
    `pool` allows (fn and the items must pickle)."""
    workers_pool = pool(len(items))
    if workers_pool is None:
        return [fn(item) for item in items]
    with workers_pool:
        return list(workers_pool.map(fn, items))


def chunks(items: Sequence[T], count: int) -> list[Sequence[T]]:
    """`items` cut into `count` runs of consecutive items of near-equal length, in order."""
    size, extra = divmod(len(items), max(count, 1))
    out, start = [], 0
    for i in range(max(count, 1)):
        end = start + size + (1 if i < extra else 0)
        if end > start:
            out.append(items[start:end])
        start = end
    return out
