"""results.history.regression and `history check`: identical reruns never alarm, an injected
slowdown is found, named compute or communication, with what changed."""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path
from typing import Any

import pytest

from scalestudy.results.history.regression import check, student_t_cdf, welch_less
from tests.conftest import run_cli
from tests.test_collect import make_run, params, record


def test_student_t_matches_its_closed_forms() -> None:
    for t in (-8.0, -2.0, -0.3, 0.0, 0.7, 3.0):
        assert student_t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)
        assert student_t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)),
                                                     abs=1e-12)
    assert student_t_cdf(2.0, 10) == pytest.approx(0.963306, abs=1e-6)


def row(world: int, per_gpu: float, repeat: int, **prov: str) -> dict:
    return {"state": "completed", "model": "resnet50", "nodes": world // 4,
            "ranks_per_node": 4, "world_size": world, "batch_size": 32, "backend": "ddp",
            "tuning": "default", "repeat": repeat, "throughput_per_gpu": per_gpu,
            "provenance": {"versions": {"nccl": prov.get("nccl", "2.21.5")}}}


def side(rng: random.Random, slow: dict[int, float] | None = None, cv: float = 0.02,
         repeats: int = 5, **prov: str) -> list[dict]:
    efficiency = {4: 1.0, 8: 0.95, 16: 0.9}
    return [row(w, 100 * e * (1 - (slow or {}).get(w, 0)) * (1 + rng.gauss(0, cv)), r, **prov)
            for w, e in efficiency.items() for r in range(repeats)]


def test_identical_reruns_never_alarm() -> None:
    rng = random.Random(7)
    alarms = sum(v.regressed for _ in range(200) for v in check(side(rng), side(rng)))
    assert alarms == 0


def test_a_slowdown_at_every_scale_is_compute_and_only_at_scale_is_communication() -> None:
    rng = random.Random(3)
    verdicts = {v.world_size: v for v in check(side(rng, {4: .1, 8: .1, 16: .1}), side(rng))}
    assert all(v.regressed and v.cause == "compute" for v in verdicts.values())
    verdicts = {v.world_size: v for v in check(side(rng, {16: .15}, nccl="2.23.4"), side(rng))}
    assert not verdicts[4].regressed and not verdicts[8].regressed
    assert verdicts[16].regressed and verdicts[16].cause == "communication"
    assert verdicts[16].provenance == ["nccl 2.21.5 -> 2.23.4"]
    assert "REGRESSION (communication): resnet50 4x4 (16 GPUs)" in verdicts[16].line()
    assert "5 vs 5 repeats" in verdicts[16].line()


def test_one_repeat_is_not_tested_and_a_tiny_drop_is_no_alarm() -> None:
    rng = random.Random(5)
    once = check(side(rng, {4: .3}, repeats=1), side(rng, repeats=1))
    assert all(v.p_value is None and not v.regressed for v in once)
    assert "not tested" in once[0].line()
    tiny = check(side(rng, {4: .01, 8: .01, 16: .01}, cv=0.0001, repeats=8),
                 side(rng, cv=0.0001, repeats=8))
    assert all(v.p_value < 0.01 and not v.regressed for v in tiny)  # proven, too small


def test_welch_on_equal_samples() -> None:
    assert welch_less([1.0, 1.0], [1.0, 1.0]) == 1.0
    assert welch_less([1.0, 1.0], [2.0, 2.0]) == 0.0


def _study(root: Path, slow_at: dict[int, float]) -> Path:
    """A study whose every run has a kept first attempt (the baseline) and a newest one,
    `slow_at[world]` slower; 3 repeats at 1, 2 and 4 ranks."""
    directory = root / "results" / "s"
    rng = random.Random(11)
    for world in (1, 2, 4):
        for repeat in range(3):
            p = params(rpn=world, repeat=repeat)
            per_gpu = 100.0 * (1 - 0.05 * (world > 1))
            new = per_gpu * (1 - slow_at.get(world, 0)) * (1 + rng.gauss(0, .01))
            d = make_run(directory, p, metrics=record(p, new * world))
            (d / "env.txt").write_text("SCALESTUDY_TAGS=after\nNCCL_ALGO=Tree\n")
            kept = d / "attempts" / "1"
            kept.mkdir(parents=True)
            (kept / "status.json").write_text(json.dumps({"state": "completed",
                                                          "exit_code": 0}))
            old = per_gpu * (1 + rng.gauss(0, .01)) * world
            (kept / "metrics.jsonl").write_text(json.dumps(record(p, old)) + "\n")
            (kept / "env.txt").write_text("SCALESTUDY_TAGS=before\nNCCL_ALGO=Ring\n")
            for f in kept.iterdir():  # the kept attempt ran an hour before
                os.utime(f, (f.stat().st_mtime - 3600,) * 2)
    return directory


@pytest.mark.slow
@pytest.mark.parametrize("baseline", [[], ["--baseline-tag", "before"]])
def test_history_check_passes_a_rerun_and_fails_an_injected_slowdown(
        tmp_path: Path, baseline: list[str]) -> None:
    env = {"SCALESTUDY_STORE": str(tmp_path / "h.sqlite")}
    same = _study(tmp_path / "same", {})
    ok = run_cli("history", "check", str(same), *baseline, "--junit", "ok.xml",
                 cwd=tmp_path, env_extra=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "9 newest completed run(s) against" in ok.stdout and "REGRESSION" not in ok.stdout
    assert 'failures="0"' in (tmp_path / "ok.xml").read_text()

    slow = _study(tmp_path / "slow", {4: 0.2})
    bad = run_cli("history", "check", str(slow), *baseline, "--junit", "bad.xml",
                  cwd=tmp_path, env_extra={"SCALESTUDY_STORE": str(tmp_path / "h2.sqlite")})
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "REGRESSION (communication): small_cnn 1x4 (4 GPUs)" in bad.stdout
    assert "env NCCL_ALGO Ring -> Tree" in bad.stdout
    assert "1 point(s) regressed" in bad.stderr and "Traceback" not in bad.stderr
    xml = (tmp_path / "bad.xml").read_text()
    assert 'failures="1"' in xml and "communication regression" in xml


@pytest.mark.slow
def test_the_first_night_passes_not_tested_and_a_named_baseline_must_exist(
        tmp_path: Path) -> None:
    """A nightly job's first check has no baseline: every point is new (exit 0, JUnit
    skipped, no failure); a baseline named by tag that holds nothing is a mistake."""
    p = params()
    make_run(tmp_path / "results" / "s", p, metrics=record(p, 10.0))
    env = {"SCALESTUDY_STORE": str(tmp_path / "h.sqlite")}
    done = run_cli("history", "check", str(tmp_path / "results" / "s"), "--junit", "j.xml",
                   cwd=tmp_path, env_extra=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "NOT TESTED (new): small_cnn 1x1 (1 GPUs)" in done.stdout
    assert "no completed baseline runs (its earlier attempts) yet" in done.stderr
    xml = (tmp_path / "j.xml").read_text()
    assert 'failures="0"' in xml and 'skipped="1"' in xml
    named = run_cli("history", "check", str(tmp_path / "results" / "s"), "--baseline-tag",
                    "nope", cwd=tmp_path, env_extra=env)
    assert named.returncode == 2 and "no completed baseline runs (tag nope)" in named.stderr


def test_points_of_other_work_are_never_compared() -> None:
    """The same study with image_size 64 instead of 32: other work, not a regression."""
    rng = random.Random(13)
    small, large = side(rng), side(rng, {4: .8, 8: .8, 16: .8})
    for r in small:
        r["params"] = {"image_size": 32, "precision": "fp32", "system": "local"}
    for r in large:
        r["params"] = {"image_size": 64, "precision": "fp32", "system": "local"}
    verdicts = check(large, small)
    assert [v.status for v in verdicts] == ["unlike"] * 3
    assert not any(v.regressed for v in verdicts)
    assert verdicts[0].differs == ["image_size 32 -> 64"]
    assert verdicts[0].line().startswith("not compared: resnet50 1x4 (4 GPUs)")


def test_a_drop_two_repeats_cannot_call_is_undecided_with_the_repeats_it_needs() -> None:
    """-60 % with the bands apart, 2 repeats a side: not "ok"."""
    base = [row(w, v, r) for w in (4, 8, 16) for r, v in enumerate((100.0, 112.0))]
    new = [row(w, v, r) for w in (4, 8, 16) for r, v in enumerate((40.0, 47.0))]
    verdicts = check(new, base)
    assert all(v.status == "undecided" and not v.regressed for v in verdicts)
    v = verdicts[0]
    assert v.p_value > v.threshold == pytest.approx(0.01 / 3)
    assert v.needed is not None and v.needed > 2
    assert v.line().startswith("UNDECIDED: ") and f"about {v.needed} repeats a side" in v.line()
    # with that many repeats of the same spread, the gate does call it
    more = [row(w, v_, r) for w in (4, 8, 16) for r, v_ in enumerate(
        [100.0, 112.0] * (v.needed // 2) + [106.0] * (v.needed % 2))]
    less = [row(w, v_, r) for w in (4, 8, 16) for r, v_ in enumerate(
        [40.0, 47.0] * (v.needed // 2) + [43.5] * (v.needed % 2))]
    assert all(x.regressed for x in check(less, more))
    once = check(new[::2], base[::2])
    assert once[0].line().startswith("NOT TESTED: ") and "2 or more repeats" in once[0].line()


def test_a_drop_the_runs_measure_as_compute_is_not_called_communication() -> None:
    """CPU contention slowed the smallest point by a third, too noisily for its own test;
    the larger point's drop is compute: its measured comm overhead fell."""
    def at(world: int, values: list[float], comm: float) -> list[dict]:
        rows = [row(world, v, r) for r, v in enumerate(values)]
        for r in rows:
            r["metrics"] = {"comm_overhead": comm}
        return rows

    base = at(4, [100, 101, 99, 100, 100], 0.0) + at(8, [70, 70.5, 69.5, 70, 70], 0.296)
    new = (at(4, [40, 95, 60, 67, 98], 0.0)  # -32.8 %, noisy
           + at(8, [50, 50.5, 49.5, 50, 50.2], 0.146))
    verdicts = {v.world_size: v for v in check(new, base)}
    assert not verdicts[4].regressed
    assert verdicts[8].regressed and verdicts[8].cause == "compute"
    # the same drop with comm overhead grown is communication
    grown = at(4, [100, 100.5, 99.5, 100, 100], 0.0) + at(8, [50, 50.5, 49.5, 50, 50.2], 0.5)
    assert {v.world_size: v for v in check(grown, base)}[8].cause == "communication"


def _nights(root: Path, nights: int, level: Any, repeats: int = 3, seed: int = 4
            ) -> list[Any]:
    """`history check` (in this process, on a real store file) after each of `nights`
    campaigns written as real run directories; level(night) -> (levels, env)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from nightly_gate import write_night

    from scalestudy.study import history as uc

    study, url = root / "results" / "nightly", str(root / "h.sqlite")
    rng = random.Random(seed)
    out = []
    for night in range(1, nights + 1):
        levels, env = level(night)
        write_night(study, night, levels, env, repeats, rng)
        out.append(uc.check(str(study), url))
    return out


def _threads(drop_nights: range) -> Any:
    def level(night: int) -> tuple[dict, dict]:
        slow = night in drop_nights
        return ({(1, 16): 100.0 * (0.7 if slow else 1), (2, 16): 95.0 * (0.7 if slow else 1)},
                {"OMP_NUM_THREADS": "2" if slow else "1"})
    return level


def test_ten_nights_a_drop_fails_and_its_fix_passes_again(tmp_path: Path) -> None:
    """-30 % on nights 5-6, fixed from night 7: the gate fails on the drop, names the
    threads change, and passes once the fix is confirmed (the old drop no longer fails,
    though it lies among the latest 5 campaigns)."""
    checked = _nights(tmp_path, 10, _threads(range(5, 7)))
    failed = [bool(c.regressions or c.alarms) for c in checked]
    assert failed[:4] == [False] * 4 and failed[4] and failed[5], failed
    assert failed[7:] == [False, False, False], [c.changes for c in checked]
    assert all(v.status == "new" for v in checked[0].verdicts)  # the first night
    night5 = {v.world_size: v for v in checked[4].verdicts}
    assert night5[1].regressed and "env OMP_NUM_THREADS 1 -> 2" in night5[1].line()
    assert any(c.alarm for c in checked[5].changes)
    night9 = checked[8].changes  # the drop's night 5 is the 5th latest campaign: recent
    drops = [c for c in night9 if c.size < 0]
    assert drops and all(c.fixed and not c.alarm and c.recent for c in drops)
    assert not any(c.size < 0 for c in checked[9].changes)  # 6th latest: no longer recent
    assert "fixed: back to" in drops[0].line()


def test_a_new_grid_point_is_listed_new_never_hidden_behind_old_runs(tmp_path: Path
                                                                      ) -> None:
    def level(night: int) -> tuple[dict, dict]:
        batch = 32 if night == 4 else 16
        return {(1, batch): 100.0, (2, batch): 95.0}, {"OMP_NUM_THREADS": "1"}

    last = _nights(tmp_path, 4, level)[-1]
    assert {(v.status, v.world_size) for v in last.verdicts} == {("new", 1), ("new", 2)}
    assert all("batch 32" in v.line() and "NOT TESTED (new)" in v.line()
               for v in last.verdicts)
    assert last.newest == 6 and any("6 run(s) of earlier campaigns are not in the newest"
                                    in n for n in last.notes)
    assert not last.regressions and not last.alarms


def test_single_runs_cannot_tell_and_never_claim_a_change(tmp_path: Path) -> None:
    checked = _nights(tmp_path, 2, _threads(range(2, 3)), repeats=1)
    last = checked[-1]
    assert all(v.status == "not tested" and "cannot tell" in v.line() for v in last.verdicts)
    assert not last.changes and any("cannot tell a change from noise" in n
                                    for n in last.notes)


def test_an_ok_beside_a_large_drop_says_why() -> None:
    rng = random.Random(2)
    noisy = check(side(rng, {4: .5, 8: .5, 16: .5}, cv=0.3), side(rng, cv=0.3))
    told = [v for v in noisy if v.status == "ok" and v.change < -0.03]
    assert told and all(v.why and "no alarm: " in v.line() for v in told)
    assert all(not v.why for v in check(side(rng), side(rng)) if v.change > -0.03)


def test_junit_names_a_bare_point_and_its_container_twin_apart() -> None:
    from xml.etree import ElementTree as ET

    from scalestudy.study.history import Checked, junit

    rng = random.Random(9)

    def both() -> list[dict]:
        bare = side(rng)
        boxed = [{**r, "params": {"container": "pt.sif"}} for r in side(rng)]
        return bare + boxed

    verdicts = check(both(), both())
    names = [c.get("name") for c in ET.fromstring(junit(Checked(
        "s", 30, 30, "its earlier attempts", verdicts))).iter("testcase")]
    assert len(names) == 6 == len(set(names))
    assert any("container=pt.sif" in n for n in names)


def test_the_noise_between_nights_counts_against_a_small_drop() -> None:
    """-6 % with steady repeats (CV 0.5 %, 5 a side) regresses on one night's evidence;
    where nights differ by 3 % beyond the repeats (the series' tau), it is within the
    noise, and the ok says so; -30 % still regresses."""
    rng = random.Random(21)
    new, old = side(rng, {4: .06}, cv=0.005), side(rng, cv=0.005)
    small = {v.world_size: v for v in check(new, old)}
    assert small[4].regressed
    noisy = {v.world_size: v for v in check(new, old, nights=0.03)}
    assert not noisy[4].regressed and noisy[4].status == "ok"
    assert "and campaigns by 3.0% more" in noisy[4].line()
    big = {v.world_size: v for v in check(side(rng, {4: .3}, cv=0.005), old, nights=0.03)}
    assert big[4].regressed
