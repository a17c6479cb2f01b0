"""results/analysis/noisescale.py: the noise scale's sentence and the weak-scaling
finding, from runs as collect reads them; records without the key (earlier releases,
other backends) say nothing."""

from __future__ import annotations

import pandas as pd

from scalestudy.report.tables import group_tables, noise_cell
from scalestudy.results.analysis.efficiency import scaling_table
from scalestudy.results.analysis.findings import findings
from scalestudy.results.analysis.noisescale import noise_findings, noise_scales


def _runs(noise: list[float | None], ranks: list[int], batch: int = 8,
          model: str = "gpt-tiny") -> pd.DataFrame:
    n = len(noise)
    return pd.DataFrame({  # the parameters (run.json), then `state`, then the record's
        "run_id": [f"r{i}" for i in range(n)], "study": "s", "system": "local",
        "scaling": "weak", "nodes": 1, "ranks_per_node": ranks,
        "world_size": ranks, "batch_size": batch, "global_batch": [batch * r for r in ranks],
        "backend": "ddp", "tuning": "default", "repeat": 0, "workload": "synthetic",
        "model": model, "state": "completed", "throughput": [100.0 * r for r in ranks],
        "throughput_unit": "tokens/s", "noise_scale": noise,
        "noise_scale_low": [None if v is None else v * 0.8 for v in noise],
        "noise_scale_high": [None if v is None else v * 1.25 for v in noise]})


def test_the_sentence_names_the_median_of_the_data_parallel_runs() -> None:
    runs = _runs([None, 16.0, 18.0, 30.0], [1, 2, 4, 8])  # 1 rank: null
    [row] = noise_scales(runs).itertuples(index=False)
    assert (row.model, row.noise_scale, row.runs) == ("gpt-tiny", 18.0, 3)
    said = noise_findings(scaling_table(runs, "weak"), runs, "weak")
    assert said[0].startswith("Gradient noise scale of gpt-tiny: 18 samples (B_simple, the "
                              "median of 3 data-parallel run(s), 16–30 across them)")
    assert "beyond a global batch of about 18 the samples to the target grow" in said[0]


def test_a_weak_scaling_study_past_it_is_flagged_and_a_strong_one_is_not() -> None:
    runs = _runs([None, 20.0, 20.0, 20.0], [1, 2, 4, 8])  # global batch 8, 16, 32, 64
    weak = noise_findings(scaling_table(runs, "weak"), runs, "weak")
    assert len(weak) == 2 and weak[1].startswith("Weak scaling passes the noise scale")
    assert "at 4 GPUs (global batch 32, 1.6× it)" in weak[1]
    assert "8 GPUs (global batch 64" in weak[1] and "2 GPUs" not in weak[1]
    strong = runs.assign(scaling="strong", batch_size=[64, 32, 16, 8], global_batch=64)
    said = noise_findings(scaling_table(strong, "strong"), strong, "strong")
    assert len(said) == 1 and "Weak scaling" not in said[0]
    below = _runs([None, 100.0, 100.0, 100.0], [1, 2, 4, 8])
    assert len(noise_findings(scaling_table(below, "weak"), below, "weak")) == 1


def test_runs_without_the_key_or_without_a_value_say_nothing() -> None:
    old = _runs([None, 1.0], [1, 2]).drop(columns=["noise_scale", "noise_scale_low",
                                                   "noise_scale_high"])
    assert noise_findings(scaling_table(old, "weak"), old, "weak") == []
    none = _runs([None, None], [1, 2])
    assert noise_findings(scaling_table(none, "weak"), none, "weak") == []
    failed = _runs([None, 12.0], [1, 2]).assign(state=["completed", "failed"])
    assert noise_findings(scaling_table(failed, "weak"), failed, "weak") == []


def test_each_model_gets_its_own_noise_scale() -> None:
    runs = pd.concat([_runs([None, 10.0, 10.0], [1, 2, 4], model="gpt-tiny"),
                      _runs([None, 100.0, 100.0], [1, 2, 4], model="gpt-mini")],
                     ignore_index=True)
    scales = noise_scales(runs).set_index("model")["noise_scale"].to_dict()
    assert scales == {"gpt-tiny": 10.0, "gpt-mini": 100.0}
    said = noise_findings(scaling_table(runs, "weak"), runs, "weak")
    passes = [s for s in said if s.startswith("Weak scaling")]
    assert len(passes) == 1 and "gpt-tiny" in passes[0] and "gpt-mini" not in passes[0]


def test_the_report_lists_it_and_shows_each_points_noise_scale() -> None:
    runs = _runs([None, 20.0, 20.0], [1, 2, 4])
    table = scaling_table(runs, "weak")
    assert list(table["noise_scale"].fillna(-1)) == [-1, 20.0, 20.0]
    got = findings(table, runs, "weak", pd.DataFrame(), pd.DataFrame(), found=[],
                   outcomes=[])
    assert any("beyond a global batch of about 20" in f for f in got.all)
    assert any(f.startswith("Weak scaling passes") for f in got.all)
    [(_, _, (headers, rows))] = group_tables(table)
    column = headers.index("noise scale [interval]")
    assert [r[column] for r in rows] == ["—", "20 [16–25]", "20 [16–25]"]
    assert noise_cell(18.1, 15.4, None) == "18.1 [15.4–∞)"
    assert noise_cell(18.1, None, None) == "18.1"
