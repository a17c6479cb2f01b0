"""results.analysis.fork_pool: work shared out over forked processes gives the answers of doing it
here, in order, and never forks beside another thread."""

from __future__ import annotations

import os
import threading

import pytest

from scalestudy.report.plots import Drawing, plot_throughput, render_png
from scalestudy.results.analysis import fork_pool
from scalestudy.results.analysis.efficiency import scaling_table
from tests.test_efficiency import frame, run


def _square(x: int) -> int:
    return x * x


def test_chunks_keep_every_item_in_order() -> None:
    items = list(range(10))
    for count in (1, 2, 3, 4, 10, 20):
        parts = fork_pool.chunks(items, count)
        assert [x for part in parts for x in part] == items
        assert len(parts) == min(count, len(items))
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
    assert fork_pool.chunks([], 3) == []


def test_mapped_answers_as_a_loop_does() -> None:
    items = list(range(7))
    assert fork_pool.mapped(_square, items) == [x * x for x in items]


def _pid(_: int) -> int:
    return os.getpid()


def test_the_work_is_done_in_forked_processes_when_there_are_cpus_to_spare() -> None:
    if fork_pool.workers(4) < 2:
        pytest.skip(f"one CPU here ({fork_pool.cpus()}) or another thread running: no fork")
    pids = fork_pool.mapped(_pid, list(range(4)))
    assert len(pids) == 4 and os.getpid() not in pids  # children did every piece


def test_no_fork_beside_another_thread() -> None:
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert fork_pool.workers(8) == 1 and fork_pool.pool(8) is None
    finally:
        stop.set()
        other.join()
    assert fork_pool.workers(1) == 1


def test_plots_drawn_side_by_side_are_the_plots_drawn_here() -> None:
    runs = frame([run(1, p, 100.0 * p * 0.9 ** (p - 1)) for p in (1, 2, 4)])
    table = scaling_table(runs, "weak")
    pictures = [(f"{i}.png", plot_throughput, table, f"t{i}") for i in range(3)]
    with Drawing(pictures) as drawing:
        images = drawing.images()
    assert list(images) == ["0.png", "1.png", "2.png"]
    for name, _, data, title in pictures:
        assert images[name] == render_png(plot_throughput, data, title)
