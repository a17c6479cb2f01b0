"""references: ReFrame-style tolerances, matching by parameters, clean errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalestudy.core.errors import SpecError
from scalestudy.core.spec import Reference
from scalestudy.results.analysis.efficiency import scaling_table
from scalestudy.results.analysis.references import check_references, failed_lines, load_references
from tests.test_efficiency import frame, run

# 1, 2, 4 GPUs on one node, then 2 nodes: per-GPU 100, 95, 90, 80 img/s.
TABLE = scaling_table(frame([run(n, r, v * n * r) for n, r, v in
                             ((1, 1, 100.0), (1, 2, 95.0), (1, 4, 90.0), (2, 4, 80.0))]),
                      "weak")


def locate(loc: tuple) -> str:
    return f"refs.yaml: references[{loc[1]}]"


def ref(**kw: object) -> Reference:
    return Reference.model_validate(kw)


def test_pass_fail_with_tolerances() -> None:
    refs = [ref(metric="efficiency", value=0.85, where={"nodes": 2}),  # 0.80 >= 0.765
            ref(metric="efficiency", value=0.95, lower=-0.05, where={"world_size": 8}),
            ref(metric="throughput", value=380, lower=0, upper=0.01, where={"world_size": 4,
                                                                             "batch_size": 16}),
            ref(metric="throughput", value=300, lower=-0.5, upper=0.1,
                where={"world_size": 4})]
    out = check_references(refs, TABLE, "local", locate)
    assert out["result"].tolist() == ["pass", "fail", "fail", "fail"]
    assert out["measured"].tolist() == pytest.approx([0.8, 0.8, 360.0, 360.0])
    assert out["deviation"].iloc[0] == pytest.approx(0.8 / 0.85 - 1)
    lines = failed_lines(out)
    assert len(lines) == 3
    assert lines[0].startswith("refs.yaml: references[1]: efficiency 80.0% at batch 16, 2 × 4")
    assert "global batch 128" in lines[0]
    assert "outside 90.2% – ∞" in lines[0]
    assert "outside 150.0 – 330.0" in lines[2]


def test_every_point_other_systems_and_no_match() -> None:
    every = check_references([ref(metric="efficiency", value=1.0, lower=-0.25)], TABLE,
                             "local", locate)
    assert len(every) == 4 and set(every["result"]) == {"pass"}
    other = check_references([ref(metric="efficiency", value=2.0, system="polaris")],
                             TABLE, "local", locate)
    assert other.empty
    none = check_references([ref(metric="throughput", value=1.0, where={"nodes": 64})],
                            TABLE, "local", locate)
    assert none["result"].tolist() == ["fail"]
    assert "no measured point matches" in failed_lines(none)[0]
    string_param = check_references(
        [ref(metric="efficiency", value=0.8, where={"backend": "ddp", "nodes": 2.0})],
        TABLE, "local", locate)
    assert string_param["result"].tolist() == ["pass"]


def test_unknown_key_is_an_error_with_a_suggestion() -> None:
    with pytest.raises(SpecError, match=r"references\[0\].*did you mean `nodes`"):
        check_references([ref(metric="efficiency", value=1.0, where={"nodez": 2})], TABLE,
                         "local", locate)


def test_load_file(tmp_path: Path) -> None:
    f = tmp_path / "refs.yaml"
    f.write_text("references:\n  - metric: efficiency\n    value: 0.9\n    where: {nodes: 2}\n")
    refs, where = load_references(f)
    assert refs[0].lower == -0.1 and refs[0].where == {"nodes": 2}
    assert where(("references", 0)) == f"{f}:2: references[0]"
    f.write_text("- metric: throughput\n  value: 10\n")
    assert load_references(f)[0][0].metric == "throughput"
    f.write_text("references:\n  - metric: speed\n    value: -1\n")
    with pytest.raises(SpecError) as err:
        load_references(f)
    assert f"{f}:2: references[0].metric" in str(err.value)
    assert "references[0].value" in str(err.value)
    with pytest.raises(SpecError, match="no such file"):
        load_references(tmp_path / "missing.yaml")
    f.write_text("references: [1, 2\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_references(f)


def test_no_completed_runs_fail_every_reference() -> None:
    empty = scaling_table(frame([run(1, 1, float("nan"), state="failed")]), "weak")
    out = check_references([ref(metric="efficiency", value=0.9, where={"nodes": 1})], empty,
                           "local", locate)
    assert out["result"].tolist() == ["fail"]
    assert out["point"].tolist() == ["no measured point matches"]
