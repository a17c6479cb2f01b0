"""results.timeline and `history plot`: points over time per campaign, with repeat bands,
efficiency against each campaign's smallest scale, and provenance changes marked."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from scalestudy.results.timeline import timeline
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
