"""`history export --format otava` read by the real Apache Otava: a stored history whose
8-GPU point loses 30 % of its throughput half-way through 12 nightly campaigns (1 % noise)
is exported by the command a user runs, and the command it prints (`otava analyze
--config-file ...`) finds that one change, at that campaign, and nothing else.

Otava comes from $SCALESTUDY_OTAVA (its executable), else /opt/tools/otava/bin/otava,
else `otava` on PATH; install it in a venv of its own (its numpy pins differ):
    python3 -m venv /opt/tools/otava && /opt/tools/otava/bin/pip install apache-otava==0.8.0
Skipped with that hint where it is absent; fails instead where SCALESTUDY_REQUIRE_OTAVA=1.
"""

from __future__ import annotations

import json
import math
import os
import random
import shlex
import shutil
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from scalestudy.results.history.store import Store
from tests.conftest import run_cli

INSTALL = ("python3 -m venv /opt/tools/otava && /opt/tools/otava/bin/pip install "
           "apache-otava==0.8.0, or set SCALESTUDY_OTAVA to its executable")
DEFAULT = Path("/opt/tools/otava/bin/otava")
DROP_AT, CAMPAIGNS, DROP = 6, 12, 0.30


def otava() -> str:
    """Otava's executable, or a skip (a failure where SCALESTUDY_REQUIRE_OTAVA=1)."""
    given = os.environ.get("SCALESTUDY_OTAVA")
    found = given or (str(DEFAULT) if DEFAULT.is_file() else shutil.which("otava"))
    if found and Path(found).is_file() and os.access(found, os.X_OK):
        return found
    why = (f"SCALESTUDY_OTAVA={given} is not an executable" if given
           else "Apache Otava is not installed") + f": {INSTALL}"
    if os.environ.get("SCALESTUDY_REQUIRE_OTAVA") == "1":
        pytest.fail(f"{why} (SCALESTUDY_REQUIRE_OTAVA=1)", pytrace=False)
    pytest.skip(why)


def history(last: datetime) -> tuple[list[dict[str, Any]], list[datetime]]:
    """12 nightly campaigns ending at `last`, 3 repeats at 4 and 8 GPUs with 1 % noise;
    the 8-GPU point 30 % slower from campaign DROP_AT on, NCCL updated there."""
    rng = random.Random(7)
    rows, ends = [], []
    for night in range(CAMPAIGNS):
        began = last - timedelta(days=CAMPAIGNS - 1 - night, minutes=30)
        ends.append(began + timedelta(minutes=25))
        for world in (4, 8):
            level = 100.0 * (0.95 if world == 8 else 1.0) \
                * (1 - DROP if world == 8 and night >= DROP_AT else 1.0)
            for repeat in range(3):
                per_gpu = level * math.exp(rng.gauss(0, 0.01))
                rows.append({
                    "run_id": f"n{world // 4}-r{repeat}", "attempt": night + 1,
                    "state": "completed", "nodes": world // 4, "ranks_per_node": 4,
                    "world_size": world, "batch_size": 32, "global_batch": 32 * world,
                    "backend": "ddp", "tuning": "default", "model": "resnet50",
                    "repeat": repeat, "throughput": per_gpu * world,
                    "throughput_per_gpu": per_gpu, "unit": "img/s",
                    "started": began + timedelta(minutes=10 * repeat),
                    "ended": began + timedelta(minutes=10 * repeat + 5),
                    "params": {"image_size": 224, "scaling": "weak"}, "metrics": {},
                    "provenance": {"versions": {
                        "nccl": "2.23.4" if night >= DROP_AT else "2.21.5"}},
                    "tags": ["nightly"], "campaign": f"c{night:02d}"})
    return rows, ends


@pytest.mark.slow
@pytest.mark.parametrize("age", [timedelta(hours=2), timedelta(days=730)],
                         ids=["recent", "two-years-old"])
def test_otava_finds_the_step_where_it_happened(tmp_path: Path, age: timedelta) -> None:
    """Older than Otava's one-year default window too: the command the export prints
    says --since, and Otava reads the whole history with it."""
    executable = otava()
    rows, ends = history(datetime.now(timezone.utc) - age)
    url = str(tmp_path / "history.sqlite")
    Store(url).put_imported([("/r/nightly", "nightly", "lab", "scalestudy", rows)])
    done = run_cli("history", "export", "--format", "otava", "-o", "out/nightly.csv",
                   cwd=tmp_path, env_extra={"SCALESTUDY_STORE": url})
    assert done.returncode == 0, done.stderr
    assert "otava: 12 campaign(s) of study nightly, 2 point(s)" in done.stderr
    command = shlex.split(done.stderr.split("run: ", 1)[1].splitlines()[0])
    assert command[:3] == ["otava", "analyze", "--config-file"]
    assert ("--since" in command) == (age > timedelta(days=365))
    found = subprocess.run([executable, *command[1:], "--output", "json"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
    assert found.returncode == 0, found.stderr
    assert "ERROR" not in found.stderr, found.stderr  # Otava logs a file it cannot read
    [group] = json.loads(found.stdout)["nightly"]
    [change] = group["changes"]
    assert change["metric"] == ("lab resnet50 2x4 (8 GPUs) batch 32/GPU (256 global) "
                                "ddp/default image_size=224 [img/s per GPU]")
    assert group["attributes"]["campaign"] == f"c{DROP_AT:02d}"
    assert group["attributes"]["nccl_version"] == "2.23.4"
    assert group["time"] == int(ends[DROP_AT].timestamp())
    assert abs(float(change["forward_change_percent"]) + 100 * DROP) <= 2
