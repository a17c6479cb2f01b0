"""benchmarks/target_backtest.py on its stored RCP data (benchmarks/data/target_rcps.csv):
the figures it prints are the ones docs/forecast.md states."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # ~40 backtests for the leave-one-out
def test_the_backtest_prints_the_figures_the_docs_state() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "target_backtest.py")],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 6 and lines[0].startswith("RCP backtest: 18 series")
    docs = (ROOT / "docs" / "forecast.md").read_text(encoding="utf-8")
    for line in lines:
        assert line.rstrip() in docs, f"docs/forecast.md does not state: {line}"
