"""The report does not contradict itself: no comm overhead at one rank, predictions only
by the stated rule, a three-line headline, at most eight findings, oversubscription
named. Small hand-made studies shaped like the shipped example and like a cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from scalestudy.report.build import build_report
from scalestudy.results.analysis.commmodel import PREDICTION_RULE
from scalestudy.results.analysis.efficiency import scaling_table
from scalestudy.results.analysis.findings import MAX_FINDINGS
from scalestudy.results.analysis.study import Where, analyse
from tests.test_commmodel import comm_bound_runs
from tests.test_efficiency import frame, run


def example_runs() -> pd.DataFrame:
    """The example's shape: 1, 2, 4 ranks on this 2-core host, per-GPU batch 8 and 16,
    2 repeats, the bundled workload's diagnostics (compute slows at 4 ranks)."""
    rows, diag = [], []
    for batch in (8, 16):
        for p in (1, 2, 4):
            for rep in (0, 1):
                compute = 0.002 * batch * (2.0 if p == 4 else 1.0)  # 4 ranks, 2 cores
                overhead = (-0.19 if rep else 0.36) if p == 1 else 0.1 + 0.05 * p
                rows.append(run(1, p, batch * p / (compute / (1 - overhead)) * (1 + 0.01 * rep),
                                batch=batch, repeat=rep))
                diag.append({"compute_time_s": compute, "comm_overhead": overhead,
                             "iters": 10, "grad_bytes": 3.0e6, "allreduce_busbw_GBps": 0.45})
    runs = frame(rows)
    runs["run_id"] = [f"r{i}" for i in range(len(runs))]
    return pd.concat([runs, pd.DataFrame(diag)], axis=1)


def build(tmp_path: Path, runs: pd.DataFrame, **kw: object) -> tuple[str, dict]:
    rep = build_report(tmp_path, analyse("example", "weak", runs, **kw))
    md = (tmp_path / "report" / "index.md").read_text()
    return md, rep.analysis.summary


def findings_section(md: str) -> tuple[list[str], list[str]]:
    """(headline lines, finding bullets) of index.md."""
    part = md.split("## Findings")[1].split("\n## ")[0]
    lines = [line for line in part.splitlines() if line]
    return ([line[2:].rstrip() for line in lines if line.startswith("> ")],
            [line[2:] for line in lines if line.startswith("- ")])


@pytest.mark.slow
def test_the_example_report_is_honest_and_short(tmp_path: Path) -> None:
    md, summary = build(tmp_path, example_runs(), where=Where("local", 2, True))
    head, items = findings_section(md)
    assert [h.split(":")[0].strip("*") for h in head] == ["Scaling", "Main cause",
                                                           "Try next"]
    assert head == [f"**{summary['headline'][0]}**", *summary["headline"][1:]]
    assert head[0].startswith("**Scaling: ") and " at 4 GPUs (1 × 4)" in head[0]
    assert "Main cause: compute slowing down, not communication" in head[1]
    assert head[2].startswith("Try next: at most 2 ranks per host (it has 2 cores)")
    assert 1 <= len(items) <= MAX_FINDINGS and len(set(items)) == len(items)
    assert summary["findings"] == items
    # No comm overhead at one rank: "—" in the tables, NaN in the data, never quoted.
    for group in ("batch 8", "batch 16"):
        rows = md.split(f"## {group}\n")[1].split("\n## ")[0]
        assert [r.split(" | ")[-3] for r in rows.splitlines() if r.startswith("| 1 |")] \
            == ["—"]
    assert "36.0%" not in md and "-19.0%" not in md
    data = pd.read_csv(tmp_path / "report" / "scaling.csv")
    assert data.loc[data["world_size"] == 1, "comm_overhead"].isna().all()
    assert all(p["comm_overhead"] is None for g in summary["groups"] for p in g["points"]
               if p["world_size"] == 1)
    # Oversubscription named: which points, with what ranks and cores.
    assert "Oversubscription is checked against 2 cores per host" in md
    assert any(f.startswith("Oversubscribed (flag `oversubscribed`, 2 of 6 points): 4 GPUs "
                            "(1 × 4): 4 ranks on 2 cores.") for f in items)
    assert "| 4 / 2 | oversubscribed |" in md
    # Predictions withheld, with the rule and the reason in the report.
    predictions = md.split("### Predictions")[1].split("\n## ")[0]
    assert PREDICTION_RULE in predictions
    assert "Predictions: none, because the runs span 1 node count" in predictions
    assert "| 2× |" not in md and summary["model"]["predictions"] == []
    assert summary["model"]["prediction_rule"] == PREDICTION_RULE
    assert not pd.read_csv(tmp_path / "report" / "model_predictions.csv").shape[0]
    # Nothing says the allreduce's bandwidth is the cause next to a sync share
    # without saying how they fit together.
    bound = [f for f in items if f.startswith("Ring allreduce bound")]
    assert len(bound) == 1 and "of sync not hidden" in bound[0]
    assert "few-iters" not in md.split("## Findings")[1]  # 10 iterations: not flagged


@pytest.mark.slow
def test_good_multi_node_data_gets_predictions(tmp_path: Path) -> None:
    md, summary = build(tmp_path, comm_bound_runs(noise=0.01))
    predictions = md.split("### Predictions")[1].split("\n## ")[0]
    assert "| batch 32 | 2× | 16 | 64 |" in predictions
    assert "none, because" not in predictions
    # up to 8× the largest measured scale (8 nodes): what the forecast backtest supports
    assert [p["nodes"] for p in summary["model"]["predictions"]] == [16, 32, 64]
    assert "Oversubscription is not checked" in md  # no core count given
    head, _ = findings_section(md)
    assert len(head) == 3


@pytest.mark.slow
def test_some_groups_predict_and_the_others_say_why(tmp_path: Path) -> None:
    good = comm_bound_runs(batch=32)
    one_node = frame([run(1, p, 100.0 * p * 0.95 ** p, batch=64) for p in (1, 2, 4, 8)])
    runs = pd.concat([good, one_node], ignore_index=True)
    runs["run_id"] = [f"r{i}" for i in range(len(runs))]
    md, _ = build(tmp_path, runs)
    predictions = md.split("### Predictions")[1].split("\n## ")[0]
    assert "| batch 32 | 2× |" in predictions and "| batch 64 |" not in predictions
    assert "Predictions for batch 64: none, because the runs span 1 node count" in predictions


@pytest.mark.slow
def test_report_table_carries_the_host_view(tmp_path: Path) -> None:
    runs = example_runs()
    table = build_report(tmp_path, analyse("example", "weak", runs,
                                           where=Where("local", 2, True))).analysis.table
    assert table.loc[table["world_size"] == 1, "comm_overhead"].isna().all()
    assert set(table.loc[table["world_size"] == 4, "flags"]) == {"oversubscribed"}
    json.loads((tmp_path / "report" / "summary.json").read_text())  # strict JSON


def different_baselines() -> pd.DataFrame:
    """backend ddp scales 1 -> 4 GPUs; backend fsdp ran only at 4 GPUs (its baseline is
    itself) and is the slowest there."""
    from tests.test_efficiency import frame, run

    rows = [run(1, r, 1000.0 * r * 0.95 ** (r - 1), backend="ddp") for r in (1, 2, 4)]
    rows.append(run(1, 4, 900.0, backend="fsdp"))
    return scaling_table(frame(rows), "weak")


def test_groups_with_different_baselines_are_compared_by_throughput() -> None:
    from scalestudy.report.tables import group_tables
    from scalestudy.results.analysis.findings import efficiency_findings
    from scalestudy.results.analysis.summary import scale_line

    table = different_baselines()
    line = scale_line(table)
    assert "compared by throughput, not efficiency" in line
    assert "fastest ddp batch 16 (3,429 img/s, global batch 64; 85.7% efficiency" in line
    assert "slowest fsdp batch 16 (900 img/s, global batch 64; its own baseline: no " \
           "efficiency)" in line
    assert "100.0%" not in line
    said = efficiency_findings(table)
    assert not any("fsdp" in s and "stays at or above" in s for s in said)
    assert said[-1] == ("One scale only, so no efficiency to speak of (compare them by "
                        "throughput): fsdp batch 16 (4 GPUs).")
    notes = {group: note for group, note, _ in group_tables(table)}
    (fsdp,) = [n for g, n in notes.items() if "fsdp" in g]
    assert "not the study's smallest scale (1 GPU)" in fsdp
    (ddp,) = [n for g, n in notes.items() if "ddp" in g]
    assert "not the study's smallest" not in ddp


def test_a_report_with_no_completed_runs_never_replaces_a_real_one(tmp_path: Path) -> None:
    import pytest

    from scalestudy import study as uc
    from scalestudy.core.errors import ScalestudyError

    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\nsystem: local\nworkload: {model: small_cnn, image_size: 32}\n"
                    "grid: {nodes: [1], batch_size: [8]}\nrepeats: 2\n")
    results = tmp_path / "results"
    old = uc.make_plan(spec, results)
    for planned in old.runs:  # two completed runs of system local, and their report
        d = old.run_dir(planned)
        d.mkdir(parents=True)
        (d / "run.json").write_text(json.dumps(planned.params()))
        (d / "status.json").write_text(json.dumps({"state": "completed", "exit_code": 0}))
        (d / "metrics.jsonl").write_text(json.dumps({"throughput": 100.0, "world_size": 1})
                                         + "\n")
    report = results / "s" / "report" / "index.html"
    report.parent.mkdir(parents=True)
    report.write_text("the real report")
    spec.write_text(spec.read_text().replace("system: local", "system: generic-slurm"))
    with pytest.raises(ScalestudyError) as raised:
        uc.report(uc.make_plan(spec, results))
    assert raised.value.exit_code == 1
    said = str(raised.value)
    assert "holds 2 runs of system local (2 completed)" in said
    assert "none of the 2 runs this spec plans (system generic-slurm)" in said
    assert report.read_text() == "the real report" and not (results / "s" / "runs.csv").exists()


def test_the_report_says_which_system_its_numbers_describe() -> None:
    from scalestudy.results.analysis.study import measured_on

    runs = pd.DataFrame({"device": ["cpu", "cpu"]})
    line = measured_on(Where("local", 2, True), runs)
    assert line.startswith("Measured on system local, this one machine (2 cores, CPUs)")
    assert "answers no question about another" in line
    assert measured_on(Where("polaris", 64, False), pd.DataFrame({"device": ["cuda"]})) \
        .startswith("Measured on system polaris, its nodes (GPUs)")


def test_no_reach_is_claimed_over_no_predictions() -> None:
    from scalestudy.report.build import _predictions
    from scalestudy.report.page import Heading, Para

    fits = pd.DataFrame({"group": ["g"], "withheld": ["too few points"]})
    blocks = _predictions(fits, pd.DataFrame(), 1024)
    assert blocks[0] == Heading("Predictions", level=3)
    assert Para("Predictions: none, because too few points.") in blocks
