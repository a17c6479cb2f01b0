"""results.history.failures: a system's failure rate per node-hour from the attempts the
results store holds (built through its own ingest), and the spec's rate when it is young."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from scalestudy.execute import workspace as ws
from scalestudy.results.history.failures import chosen_rate, failure_rates
from scalestudy.results.history.store import Store
from scalestudy.study.predict import predict_to_target
from scalestudy.study.wall import WallAsk
from tests.conftest import run_cli
from tests.test_collect import make_run, params, record

T0 = 1_790_000_000.0  # a fixed start (2026)


def attempt(study: Path, nodes: int, hours: float, failure: str | None, n: int) -> None:
    """A run of `nodes` nodes that ran `hours`, failed with `failure` (None: completed)."""
    p = params(nodes=nodes, repeat=n, system="polaris", study=study.name)
    if failure is None:
        d = make_run(study, p, metrics=record(p, 100.0))
    else:
        d = make_run(study, p, status=json.dumps({
            "state": "failed", "exit_code": 1, "reason": "died", "failure": failure}))
    (d / "env.txt").write_text("SCALESTUDY_SYSTEM=polaris\n")
    os.utime(d / "env.txt", (T0, T0))
    os.utime(d / ws.STATUS, (T0 + hours * 3600, T0 + hours * 3600))


def test_the_rate_counts_system_failures_per_node_hour_of_every_attempt(
        tmp_path: Path) -> None:
    study = tmp_path / "results" / "s"
    # 45 node-hours: 4 nodes x 5 h completed, 2 x 5 h node failure, 2 x 2.5 h NCCL,
    # 1 x 5 h walltime, 4 x 1.25 h OOM (the program's: not counted)
    for i, (nodes, hours, failure) in enumerate([
            (4, 5, None), (2, 5, "node_failure"), (2, 2.5, "comm"), (1, 5, "walltime"),
            (4, 1.25, "oom")]):
        attempt(study, nodes, hours, failure, i)
    store = Store(str(tmp_path / "h.sqlite"))
    assert store.ingest(study) == 5
    (rate,) = failure_rates(store.rows())
    store.dispose()
    assert rate.system == "polaris" and rate.source == "store"
    assert rate.node_hours == pytest.approx(45.0)
    assert rate.failures == 3 and rate.attempts == 5
    assert rate.by_cause == {"node_failure": 1, "comm": 1, "walltime": 1}
    assert rate.per_node_hour == pytest.approx(3 / 45)
    # Garwood at 3 events, 90 %: [0.8177, 7.754]
    assert (rate.low, rate.high) == pytest.approx((0.8177 / 45, 7.754 / 45), abs=1e-4)
    assert "3 failure(s) in 45 node-hours of 5 attempt(s)" in rate.line()
    # enough failures: the store beats the spec
    store_rows = Store(str(tmp_path / "h.sqlite")).rows()
    assert chosen_rate(store_rows, "polaris", 0.5).source == "store"
    assert chosen_rate(store_rows, "polaris", 0.5, enough=4).source == "spec"
    # predict --to-target --system: the store's rate, with its interval, prices the wall
    # clock; no queue wait stored for the system: 0, and said
    (tmp_path / "t.csv").write_text("global_batch,samples_to_target\n16,160000\n"
                                    "32,190000\n64,220000\n")
    got = predict_to_target(str(tmp_path / "t.csv"), [64.0], wall=WallAsk(
        [2], [20.0], 30.0, system="polaris", store=str(tmp_path / "h.sqlite")))
    wall = got.model["wall_clock"]
    assert wall["rate"]["per_node_hour"] == pytest.approx(3 / 45)
    (scale,) = wall["scales"]
    assert scale["goodput_low"] < scale["goodput"] < scale["goodput_high"]
    assert scale["wall_low_s"] < scale["wall_s"] < scale["wall_high_s"]
    assert any("0 s assumed" in a for a in wall["assumed"])
    shown = run_cli("history", "failures", "--system", "polaris", "--store",
                    str(tmp_path / "h.sqlite"), cwd=tmp_path, env_extra={"COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    assert "polaris: 0.0667 failures per node-hour [0.0182–0.172, 90%] from 3 failure(s)" \
        in shown.stdout


def test_a_young_store_gives_way_to_the_spec_and_old_rows_say_why_they_are_not_counted(
        ) -> None:
    old = {"system": "aurora", "source": "scalestudy", "nodes": 2, "state": "failed",
           "started": "2026-01-01T00:00:00", "ended": "2026-01-01T10:00:00",
           "provenance": {"placement": {}}}  # stored by an earlier release: no class
    (rate,) = failure_rates([old])
    assert rate.failures == 0 and rate.unclassified == 1
    assert rate.per_node_hour == 0 and rate.high == pytest.approx(2.996 / 20, abs=1e-4)
    assert "ingest" in rate.note
    spec = chosen_rate([old], "aurora", 0.002)
    assert spec is not None and spec.source == "spec" and spec.per_node_hour == 0.002
    assert "fewer than 3" in spec.line()
    assert chosen_rate([], "aurora") is None
