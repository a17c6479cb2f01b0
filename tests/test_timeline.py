"""results.history.timeline and `history plot`: points over time per campaign, with repeat bands,
efficiency against each campaign's smallest scale, and provenance changes marked."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from scalestudy.results.history.timeline import timeline
from tests.conftest import run_cli
from tests.test_regression import _study


def rows(day: int, nccl: str, slow: float = 0.0, tags: tuple[str, ...] = ()) -> list[dict]:
    when = datetime(2026, 11, 1, tzinfo=timezone.utc) + timedelta(days=day)
    out = []
    for world, eff in ((8, 1.0), (16, 0.9)):
        for repeat, noise in enumerate((0.99, 1.0, 1.01)):
            out.append({"state": "completed", "study": "s", "directory": f"/r/s{day}",
                        "tags": list(tags), "ended": when + timedelta(minutes=repeat),
                        "model": "resnet50", "batch_size": 32, "backend": "ddp",
                        "tuning": "default", "world_size": world, "unit": "img/s",
                        "throughput_per_gpu": 100 * eff * noise * (1 - slow),
                        "provenance": {"versions": {"nccl": nccl}}})
    return out


def test_campaigns_over_time_with_bands_efficiency_and_changes() -> None:
    points, changes = timeline([*rows(0, "2.21.5"), *rows(7, "2.21.5"),
                                *rows(14, "2.23.4", slow=0.1)])
    assert list(points.columns)[:4] == ["group", "campaign", "when", "world_size"]
    sixteen = points[points["world_size"] == 16]
    assert list(sixteen["repeats"]) == [3, 3, 3]
    assert sixteen["per_gpu"].round(6).tolist() == [90.0, 90.0, 81.0]
    assert sixteen["per_gpu_min"].round(6).tolist() == [89.1, 89.1, 80.19]
    assert sixteen["efficiency"].round(6).tolist() == [0.9, 0.9, 0.9]
    assert len(changes) == 1 and changes[0].what == ["nccl 2.21.5 -> 2.23.4"]
    assert changes[0].when.day == 15


def test_nothing_completed_is_an_empty_timeline() -> None:
    points, changes = timeline([{"state": "failed", "throughput_per_gpu": None}])
    assert points.empty and changes == []


@pytest.mark.slow
def test_history_plot_draws_a_png(tmp_path: Path) -> None:
    env = {"SCALESTUDY_STORE": str(tmp_path / "h.sqlite")}
    assert run_cli("history", "ingest", str(_study(tmp_path, {})), cwd=tmp_path,
                   env_extra=env).returncode == 0
    done = run_cli("history", "plot", "-o", "h.png", cwd=tmp_path, env_extra=env)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "h.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "provenance changed at" in done.stderr and "env NCCL_ALGO Ring -> Tree" in done.stderr
    empty = run_cli("history", "plot", "--model", "none", cwd=tmp_path, env_extra=env)
    assert empty.returncode == 2 and "nothing to draw" in empty.stderr


def test_series_never_join_systems_and_changes_stay_on_their_system() -> None:
    """A torchtitan import on one system and a study on another: two series, and the
    provenance lines of one system are not drawn across the other."""
    ours = [{**r, "system": "polaris"} for r in [*rows(0, "2.21.5"), *rows(7, "2.23.4")]]
    theirs = [{**r, "system": "h200-cluster", "directory": f"/x{r['directory']}",
               "provenance": {"versions": {"nccl": "2.27.5"}}} for r in rows(3, "2.27.5")]
    points, changes = timeline([*ours, *theirs])
    assert sorted(set(points["group"])) == [
        "h200-cluster: resnet50 batch 32 ddp/default", "polaris: resnet50 batch 32 ddp/default"]
    assert [(c.system, c.what) for c in changes] == [("polaris", ["nccl 2.21.5 -> 2.23.4"])]


def test_other_work_is_another_series() -> None:
    small = [{**r, "params": {"image_size": 32}} for r in rows(0, "2.21.5")]
    large = [{**r, "params": {"image_size": 64}} for r in rows(7, "2.21.5", slow=0.8)]
    points, _ = timeline([*small, *large])
    assert points["group"].nunique() == 2
    assert points.groupby("group")["efficiency"].min().round(6).tolist() == [0.9, 0.9]


@pytest.mark.slow  # history ingest and plot through the CLI
def test_plot_to_a_path_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    _study(tmp_path, {})
    env = {"SCALESTUDY_STORE": str(tmp_path / "h.sqlite")}
    assert run_cli("history", "ingest", "results", cwd=tmp_path, env_extra=env).returncode == 0
    (tmp_path / "a-file").write_text("")
    done = run_cli("history", "plot", "-o", str(tmp_path / "a-file" / "p.png"), cwd=tmp_path,
                   env_extra=env)
    assert done.returncode == 2 and "cannot write it" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_single_scale_of_several_gpus_has_no_efficiency() -> None:
    """A published 2-GPU Horovod figure alone is not 100 % efficient: it is unknown."""
    alone = [r for r in rows(0, "2.21.5") if r["world_size"] == 16]
    points, _ = timeline(alone)
    assert points["efficiency"].isna().all()
    points, _ = timeline(rows(0, "2.21.5"))
    assert points["efficiency"].notna().all()
