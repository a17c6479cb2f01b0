"""results/analysis/columns.py: one constant a column, each its own name."""

from __future__ import annotations

from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.efficiency import TABLE_COLUMNS
from scalestudy.results.history.store import attempts


def _constants() -> dict[str, str]:
    return {k: v for k, v in vars(col).items() if k.isupper() and isinstance(v, str)}


def test_each_constant_is_its_name_in_lower_case_and_unique() -> None:
    found = _constants()
    assert found, "columns.py defines no constants"
    assert all(value == name.lower() for name, value in found.items())
    assert len(set(found.values())) == len(found)


def test_the_summary_and_store_columns_named_here_exist() -> None:
    summary = {col.GROUP, col.THROUGHPUT_MEDIAN, col.EFFICIENCY, col.BASELINE,
               col.THROUGHPUT_PER_GPU, col.N_REPEATS}
    assert summary <= {*TABLE_COLUMNS, col.GROUP}
    stored = {col.RUN_ID, col.ATTEMPT, col.CAMPAIGN, col.UNIT, col.PARAMS, col.METRICS,
              col.PROVENANCE, col.TAGS, col.THROUGHPUT_PER_GPU, col.WORLD_SIZE}
    assert stored <= set(attempts.c.keys())
