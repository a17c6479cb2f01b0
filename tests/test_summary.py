"""summary: strict JSON (NaN -> null), every point with its per-GPU and global batch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from scalestudy.report.build import build_report
from scalestudy.results.analysis.study import analyse
from scalestudy.results.analysis.summary import dump, records
from tests.test_efficiency import frame, run


def test_records_are_plain_json() -> None:
    df = pd.DataFrame({"a": [np.int64(3)], "b": [np.float64("nan")], "c": [np.bool_(True)],
                       "d": ["x"]})
    assert records(df) == [{"a": 3, "b": None, "c": True, "d": "x"}]
    assert records(df, ("d", "missing")) == [{"d": "x"}]
    assert dump({"v": records(df)}).endswith("\n")


def test_summary_of_a_report(tmp_path: Path) -> None:
    runs = frame([run(1, p, 100.0 * p * 0.9 ** (p - 1)) for p in (1, 2, 4)]
                 + [run(1, 8, float("nan"), state="failed", reason="boom")])
    rep = build_report(tmp_path, analyse("s", "weak", runs))
    text = (tmp_path / "report" / "summary.json").read_text()
    assert "NaN" not in text
    summary = json.loads(text)
    assert summary == rep.analysis.summary
    assert summary["schema"] == "scalestudy.summary/2"
    assert summary["runs"] == {"planned": 4, "completed": 3, "failed": 1}
    points = summary["groups"][0]["points"]
    assert [(p["world_size"], p["batch_size"], p["global_batch"]) for p in points] == [
        (1, 16, 16), (2, 16, 32), (4, 16, 64)]
    assert points[2]["efficiency"] == 0.9 ** 3
    assert summary["model"]["fits"][0]["status"] == "fitted"
    assert summary["references"] == {"passed": 0, "failed": 0, "checks": []}
    assert any("1 of 4 runs failed" in f for f in summary["findings"])
    assert [h.split(":")[0] for h in summary["headline"]] == ["Scaling", "Main cause",
                                                              "Try next"]
    assert summary["headline"][0] == ("Scaling: 72.9% efficiency at 4 GPUs (1 × 4, global "
                                      "batch 64), against 1 GPU.")
    assert "2 node counts" in summary["model"]["prediction_rule"]
    assert summary["model"]["predictions"] == []  # one node: withheld, and said why
