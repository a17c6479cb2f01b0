"""results.history.changes: change points in each point's series of campaigns, on store-like rows
with a known truth: a step found with its size, its cause and the provenance that
changed with it; an unchanged history accuses nothing; a single night is suspected,
not confirmed; `history check --junit` fails on a confirmed drop."""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from scalestudy.results.history.changes import CONFIRM, Campaign, Noise, changes, cuts, noise
from scalestudy.study.history import Checked, junit

START = datetime(2026, 6, 1, tzinfo=timezone.utc)


def rows(campaigns: int, steps: dict[int, tuple[int, float]], seed: int = 0,
         sigma: float = 0.02, tau: float = 0.005, nccl_at: int | None = None
         ) -> list[dict[str, Any]]:
    """Nightly campaigns of one group at 1 and 4 GPUs, 3 repeats each: `steps` maps a
    world size to (the first campaign after the step, its size)."""
    rng = random.Random(seed)
    out = []
    for night in range(campaigns):
        shift = rng.gauss(0, tau)
        nccl = "2.23.4" if nccl_at is not None and night >= nccl_at else "2.21.5"
        for world in (1, 4):
            at, size = steps.get(world, (campaigns + 1, 0.0))
            level = 100.0 * (1 + size if night >= at else 1)
            for repeat in range(3):
                out.append({
                    "state": "completed", "system": "lab", "directory": "/r/nightly",
                    "campaign": f"c{night:03d}", "study": "nightly",
                    "ended": START + timedelta(days=night, minutes=repeat),
                    "throughput_per_gpu": level * math.exp(shift + rng.gauss(0, sigma)),
                    "world_size": world, "nodes": max(1, world // 2),
                    "ranks_per_node": min(world, 2), "model": "resnet50",
                    "batch_size": 32, "backend": "ddp", "tuning": "default",
                    "params": {"image_size": 224},
                    "provenance": {"versions": {"nccl": nccl}}})
    return out


def test_a_communication_step_is_found_with_its_size_and_what_changed() -> None:
    """-8 % at 4 GPUs from night 20 (1 GPU unchanged), when NCCL changed: one change,
    at night 20, its interval holding -8 %, communication, the NCCL change named."""
    found = changes(rows(30, {4: (20, -0.08)}, nccl_at=20))
    assert len(found) == 1, [c.line() for c in found]
    [c] = found
    assert c.world_size == 4 and c.when.date() == (START + timedelta(days=20)).date()
    assert c.low <= -0.08 <= c.high and c.size < -0.05
    assert c.cause == "communication" and c.confirmed and c.alarm
    assert "nccl 2.21.5 -> 2.23.4" in c.changed and "nccl 2.21.5 -> 2.23.4" in c.line()


def test_a_step_at_the_smallest_scale_is_compute() -> None:
    found = changes(rows(30, {1: (15, -0.06), 4: (15, -0.06)}, seed=3))
    assert {c.world_size for c in found} == {1, 4}
    assert {c.cause for c in found} == {"compute"}


def test_an_unchanged_history_accuses_nothing() -> None:
    for seed in range(20):
        assert changes(rows(40, {}, seed=seed)) == [], seed


def test_one_night_after_a_step_is_suspected_then_confirmed() -> None:
    """A -15 % step on the last night only: found, but not confirmed (one noisy night
    cannot fail a nightly job); a second night confirms it."""
    one = [c for c in changes(rows(21, {4: (20, -0.15)}, seed=5)) if c.world_size == 4]
    assert len(one) == 1 and not one[0].confirmed and not one[0].alarm
    assert "suspected" in one[0].line()
    two = [c for c in changes(rows(20 + CONFIRM, {4: (20, -0.15)}, seed=5))
           if c.world_size == 4]
    assert len(two) == 1 and two[0].confirmed and two[0].alarm


def test_a_gain_is_a_change_but_no_alarm() -> None:
    [c] = changes(rows(30, {4: (10, +0.10)}, seed=2))
    assert c.size > 0.05 and c.confirmed and not c.alarm


def test_pooled_campaigns_find_a_small_step_one_night_cannot() -> None:
    """A 3 % step at CV 2 %: within 10 nights the pooled series finds it, though a
    night's own 3 repeats are 1.2 standard errors apart from the step."""
    rng = random.Random(11)
    found = 0
    for _ in range(20):
        series = [Campaign((i,), START + timedelta(days=i), tuple(
            100 * (0.97 if i >= 20 else 1) * math.exp(rng.gauss(0, 0.02)) for _ in range(3)),
            ()) for i in range(30)]
        found += any(abs(k - 20) <= 1 for k in cuts(series, noise([series])))
    assert found >= 18


def test_the_between_campaign_noise_is_estimated_robustly() -> None:
    """Campaign-to-campaign noise of 1 % beside 2 % within: tau is near 1 %, and a
    step in the series hardly moves it."""
    rng = random.Random(4)

    def series(step: float) -> list[Campaign]:
        made = []
        for i in range(60):
            shift = rng.gauss(0, 0.01) + (math.log(1 + step) if i >= 30 else 0)
            made.append(Campaign((i,), START + timedelta(days=i), tuple(
                100 * math.exp(shift + rng.gauss(0, 0.02)) for _ in range(3)), ()))
        return made

    level = noise([series(0.0) for _ in range(10)])
    stepped = noise([series(-0.2) for _ in range(10)])
    assert isinstance(level, Noise)
    assert 0.017 < level.sigma < 0.023 and 0.006 < level.tau < 0.014
    assert abs(stepped.tau - level.tau) < 0.004


def test_history_check_junit_fails_on_a_confirmed_drop_only() -> None:
    found = changes(rows(30, {4: (20, -0.08)}, nccl_at=20))
    checked = Checked("nightly", 6, 60, "its earlier attempts", [], found)
    text = junit(checked)
    assert 'failures="1"' in text and 'type="change"' in text
    assert "nccl 2.21.5 -&gt; 2.23.4" in text
    quiet = Checked("nightly", 6, 60, "its earlier attempts", [],
                    changes(rows(30, {4: (10, +0.10)}, seed=2)))
    assert 'failures="0"' in junit(quiet)


def test_history_plot_marks_the_change_points(tmp_path) -> None:
    """The plot draws a triangle where each change point's series changed (here: one
    filled marker on the 4-GPU line), and still draws without any."""
    from scalestudy.report.timeline_plot import draw_timeline
    from scalestudy.results.history.timeline import timeline

    history = rows(30, {4: (20, -0.08)}, nccl_at=20)
    points, provenance = timeline(history)
    found = changes(history)
    assert [c.series for c in found] == [points["group"].iloc[0]]
    out = tmp_path / "h.png"
    assert draw_timeline(points, provenance, "History", out, found) == []
    marked = out.read_bytes()
    draw_timeline(points, provenance, "History", out)
    assert marked[:8] == b"\x89PNG\r\n\x1a\n" and out.read_bytes() != marked


def test_without_repeats_the_nights_measure_the_noise_or_nothing_is_claimed() -> None:
    """One run a night: two nights cannot tell (no 0.2 % floor: no change claimed, the
    system named); 24 nights measure the noise from their differences, and a -10 % step
    is placed where it is, with an interval as wide as that noise."""
    from scalestudy.results.history.changes import cannot_tell

    single = [r for r in rows(2, {1: (1, -0.3), 4: (1, -0.3)}) if r["ended"].minute == 0]
    assert changes(single) == [] and cannot_tell(single) == ["lab"]
    many = [r for r in rows(24, {1: (12, -0.10), 4: (12, -0.10)}, seed=5)
            if r["ended"].minute == 0]
    assert cannot_tell(many) == []
    found = changes(many)
    assert {c.world_size for c in found} == {1, 4}, [c.line() for c in found]
    for c in found:
        assert c.when.date() == (START + timedelta(days=12)).date()
        assert c.low <= -0.10 <= c.high and c.high - c.low > 0.01


def test_a_drop_is_recent_by_its_place_and_stops_failing_once_fixed() -> None:
    """-8 % on nights 20-23 of 30, back from night 24: the drop is found and fixed, not
    an alarm; on night 27 it is no longer among the latest RECENT campaigns."""
    from scalestudy.results.history.changes import RECENT

    data = rows(30, {4: (20, -0.08)})
    fixed = [r for r in data if not (r["world_size"] == 4
                                     and r["ended"] >= START + timedelta(days=24))]
    fixed += [{**r, "throughput_per_gpu": r["throughput_per_gpu"] / 0.92} for r in data
              if r["world_size"] == 4 and r["ended"] >= START + timedelta(days=24)]
    found = changes(fixed)
    drop = next(c for c in found if c.size < 0)
    assert drop.fixed and not drop.alarm and drop.confirmed
    assert not drop.recent and drop.total - drop.index == 10 > RECENT
    still = changes([r for r in data if r["ended"] < START + timedelta(days=24)])
    assert [c.alarm and c.recent and not c.fixed for c in still] == [True]


@pytest.mark.slow
def test_history_changes_says_where_single_runs_cannot_tell(tmp_path) -> None:
    """Two nights of one run each, -30 % on the second: `history changes` claims no
    change (no z of -248 from a 0.2 % floor) and names the system that cannot tell."""
    import json as _json
    import os

    from scalestudy.execute import workspace as ws
    from tests.conftest import run_cli
    from tests.test_collect import make_run, params, record

    study = tmp_path / "results" / "s"
    p = params()
    d = make_run(study, p, metrics=record(p, 100.0))
    (d / "env.txt").write_text("SCALESTUDY_SYSTEM=lab\n")
    ws.archive_attempt(d, "c2")
    (d / "status.json").write_text(_json.dumps({"state": "completed", "exit_code": 0}))
    (d / "metrics.jsonl").write_text(_json.dumps(record(p, 70.0)) + "\n")
    (d / "env.txt").write_text("SCALESTUDY_SYSTEM=lab\n")
    for f in (d / "attempts" / "1").iterdir():
        os.utime(f, (f.stat().st_mtime - 86400,) * 2)
    env = {"SCALESTUDY_STORE": str(tmp_path / "h.sqlite")}
    assert run_cli("history", "ingest", str(study), cwd=tmp_path, env_extra=env).returncode == 0
    done = run_cli("history", "changes", cwd=tmp_path, env_extra=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
    assert "system local: its runs have no repeats" in done.stderr, done.stderr
