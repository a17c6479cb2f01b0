"""plots: each draws what it says on the axis it is given (no pyplot)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib import _pylab_helpers
from matplotlib.figure import Figure

from scalestudy.report.plots import (
    heatmap_data,
    plot_comm_overhead,
    plot_heatmap,
    plot_model,
    plot_per_gpu_vs_batch,
    plot_throughput,
    plot_variants,
    render_png,
)
from scalestudy.results.analysis.commmodel import model_study
from scalestudy.results.analysis.efficiency import scaling_table
from tests.test_efficiency import frame, run


@pytest.fixture
def table() -> pd.DataFrame:
    """Two backends, batch 16 and 64, 1 x 1 ... 4 x 4; per-GPU img/s known."""
    rows = []
    for backend, eff in (("ddp", 0.9), ("horovod", 0.8)):
        for b in (16, 64):
            for n, r in ((1, 1), (1, 4), (2, 4), (4, 4)):
                p = n * r
                rows.append(run(n, r, b * p * eff ** np.log2(p), batch=b, backend=backend,
                                comm_overhead=0.02 * np.log2(p)))
    runs = frame(rows)
    runs["comm_overhead"] = [r["comm_overhead"] for r in rows]
    return scaling_table(runs, "weak")


def test_heatmap_uses_full_nodes(table: pd.DataFrame) -> None:
    data = heatmap_data(table)
    assert list(data.index) == [16, 64] and list(data.columns) == [1, 2, 4]
    # One node = 1 x 4 (4 GPUs): median of 0.9^2 and 0.8^2.
    assert data.loc[16, 1] == pytest.approx((0.81 + 0.64) / 2)
    ax = Figure().subplots()
    plot_heatmap(table, ax)
    texts = [t.get_text() for t in ax.texts]
    assert f"{data.loc[16, 1]:.0%}" in texts and "81%" not in texts
    assert len(texts) == 6
    assert ax.get_xlabel() == "Nodes"


def test_per_gpu_vs_batch_lines_per_world_size(table: pd.DataFrame) -> None:
    ax = Figure().subplots()
    plot_per_gpu_vs_batch(table, ax)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "ddp, 1 GPU" in labels and "horovod, 16 GPUs" in labels
    line = ax.get_lines()[0]
    assert list(line.get_xdata()) == [16, 64]
    assert list(line.get_ydata()) == pytest.approx([16.0, 64.0])  # 1 GPU: b img/s
    assert "Per-GPU batch" in ax.get_xlabel()


def test_variants_bars_per_group_and_scale(table: pd.DataFrame) -> None:
    ax = Figure().subplots()
    plot_variants(table, ax)
    assert len(ax.patches) == len(table) == 16
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "4", "8", "16"]


def test_comm_overhead_and_model(table: pd.DataFrame) -> None:
    ax = Figure().subplots()
    plot_comm_overhead(table, ax)
    assert list(ax.get_lines()[0].get_ydata()) == pytest.approx([0.0, 0.04, 0.06, 0.08])
    empty = Figure().subplots()
    plot_comm_overhead(table.assign(comm_overhead=np.nan), empty)
    assert "no comm_overhead" in empty.texts[0].get_text()
    _, points, preds = model_study(table, "weak", max_nodes=16)
    frames = pd.concat([points.assign(kind="measured"), preds.assign(
        kind="predicted", step_time_fitted=preds["global_batch"] / preds[
            "throughput_predicted"])])
    ax = Figure().subplots()
    plot_model(frames, ax)
    assert ax.get_yscale() == "log"
    assert max(ax.get_lines()[1].get_xdata()) == 64  # predicted up to 16 nodes x 4


def test_titles_and_no_pyplot(table: pd.DataFrame) -> None:
    png = render_png(plot_throughput, table, "demo: throughput (2026-01-01)")
    assert png.startswith(b"\x89PNG")
    ax = Figure().subplots()
    plot_throughput(table, ax, "demo: throughput (2026-01-01)")
    assert ax.get_title() == "demo: throughput (2026-01-01)"
    assert _pylab_helpers.Gcf.get_num_fig_managers() == 0


def test_heatmap_rows_are_the_global_batch_in_strong_scaling() -> None:
    rows = [run(n, 4, 400.0 * n * 0.9 ** (n - 1), global_batch=g) for n in (1, 2, 4)
            for g in (256, 1024)]
    table = scaling_table(frame(rows), "strong")
    data = heatmap_data(table)
    assert list(data.index) == [256, 1024] and list(data.columns) == [1, 2, 4]
    assert data.loc[256].tolist() == pytest.approx([1.0, 0.9, 0.729])
    ax = Figure().subplots()
    plot_heatmap(table, ax)
    assert ax.get_ylabel() == "Global batch (images)"


def test_the_cost_plot_says_its_basis_and_ticks_plain_numbers() -> None:
    """Hours below one are 0.5, not 5×10⁻¹; the axes say per million samples."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from scalestudy.report.plots import plot_cost
    from scalestudy.results.analysis.cost import CostBasis, cost_table

    rows = [{"group": "g", "nodes": n, "ranks_per_node": 4, "world_size": 4 * n,
             "batch_size": 32, "global_batch": 128 * n, "throughput_median": thr,
             "throughput_min": thr * .9, "throughput_max": thr * 1.1, "n_repeats": 2}
            for n, thr in {1: 1000.0, 2: 1900.0, 4: 3000.0, 16: 5000.0, 64: 9000.0}.items()]
    costs = cost_table(pd.DataFrame(rows), CostBasis(None, 128))
    fig = Figure()
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    plot_cost(costs, ax)
    fig.canvas.draw()
    labels = [t.get_text() for t in [*ax.get_xticklabels(), *ax.get_yticklabels()]
              if t.get_text()]
    assert labels and all("10^" not in t and "times" not in t and "×" not in t
                          for t in labels), labels
    assert "0.1" in labels
    assert "per million samples" in ax.get_title() and "per million samples" in ax.get_xlabel()
