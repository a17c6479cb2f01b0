"""Real ReFrame, then `history import --format reframe`: tests/data/reframe's checks run on
the local scheduler (and on the Slurm testbed), their JSON report and their perflogs
imported with the CLI, and every number `history --json` holds checked against the
report ReFrame wrote.

ReFrame is found at $SCALESTUDY_REFRAME, else /opt/tools/reframe/bin/reframe, else on
PATH; where it is not installed the tests skip, or fail with SCALESTUDY_REQUIRE_REFRAME=1
(CI). It lives in a venv of its own:

    python3 -m venv /opt/tools/reframe && /opt/tools/reframe/bin/pip install reframe-hpc==4.10.4
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.testbed_sessions import unavailable

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent / "data" / "reframe"
INSTALL = ("python3 -m venv /opt/tools/reframe && /opt/tools/reframe/bin/pip install "
           "reframe-hpc==4.10.4")


def reframe() -> str:
    """The reframe executable (skip, or fail where it is required, if there is none)."""
    named = os.environ.get("SCALESTUDY_REFRAME")
    if named:
        if not os.access(named, os.X_OK):
            pytest.fail(f"SCALESTUDY_REFRAME={named}: not an executable", pytrace=False)
        return named
    for found in ("/opt/tools/reframe/bin/reframe", shutil.which("reframe")):
        if found and os.access(found, os.X_OK):
            return found
    unavailable(f"ReFrame not installed: {INSTALL} (or set SCALESTUDY_REFRAME)",
                "SCALESTUDY_REQUIRE_REFRAME")
    raise AssertionError("unreachable")


def run_reframe(tmp_path: Path, partition: str) -> tuple[Path, list[Path]]:
    """Run the sample checks on testbed:PARTITION; their report and perflogs."""
    report, perflogs = tmp_path / "report.json", tmp_path / "perflogs"
    done = subprocess.run(
        [reframe(), "-C", str(HERE / "settings.py"), "-c", str(HERE / "scalestudy_check.py"),
         "--system", f"testbed:{partition}", "-r", "--report-file", str(report),
         "--perflogdir", str(perflogs), "--prefix", str(tmp_path / "rfm")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "TMPDIR": str(tmp_path)})  # its own log file lands there too
    # two checks fail on purpose (a missed reference, a failed sanity check): exit 1
    assert done.returncode in (0, 1) and report.is_file(), done.stdout + done.stderr
    summary = json.loads(report.read_text())["session_info"]
    assert (summary["num_cases"], summary["num_failures"]) == (4, 2), done.stdout
    return report, sorted(perflogs.glob(f"testbed/{partition}/*.log"))


def import_and_check(tmp_path: Path, report: Path, perflogs: list[Path],
                     world: int, nodes: int) -> None:
    """Import the report and the perflogs with the CLI, each into a store of its own:
    every stored number is the report's own, for both. The perflogs imported after the
    report into its store add nothing: they hold the same measurements."""
    cases = [tc for run in json.loads(report.read_text())["runs"] for tc in run["testcases"]]
    assert len(perflogs) == 3
    for name, files in (("report", [report]), ("perflog", perflogs)):
        env = {"SCALESTUDY_STORE": str(tmp_path / f"{name}.sqlite")}
        done = run_cli("history", "import", *map(str, files), "--format", "reframe",
                       "--name", name, cwd=tmp_path, env_extra=env)
        assert done.returncode == 0, done.stderr
        rows = json.loads(run_cli("history", "--json", cwd=tmp_path, env_extra=env).stdout)
        stored = {(r["model"], r["params"]["perf_var"]): r for r in rows if r["study"] == name}
        assert len(rows) == len(stored) == 8
        for tc in cases:
            for key, (value, ref, lower, upper, unit, _) in tc["perfvalues"].items():
                check(stored[(tc["display_name"], key.split(":")[-1])], tc, value, ref,
                      lower, upper, unit, world, nodes)
    env = {"SCALESTUDY_STORE": str(tmp_path / "report.sqlite")}
    done = run_cli("history", "import", *map(str, perflogs), "--format", "reframe",
                   "--name", "perflog", cwd=tmp_path, env_extra=env)
    assert done.returncode == 0, done.stderr
    rows = json.loads(run_cli("history", "--json", cwd=tmp_path, env_extra=env).stdout)
    assert len(rows) == 8 and {r["study"] for r in rows} == {"report"}


def check(row: dict[str, Any], tc: dict[str, Any], value: float | None, ref: float,
          lower: float | None, upper: float | None, unit: str, world: int,
          nodes: int) -> None:
    """One stored measurement against the report's test case and performance value."""
    m = row["metrics"]
    assert row["system"] == tc["system"] == "testbed"
    assert row["params"]["partition"] == f"testbed:{tc['partition']}"
    assert (row["world_size"], row["nodes"]) == (world, nodes)
    assert (m["value"], row["unit"], m["reference"], m["lower_thres"], m["upper_thres"]) \
        == (value, unit, ref, lower, upper)
    assert (m["jobid"], m["result"], m["environ"]) == (tc["jobid"], tc["result"],
                                                       tc["environ"])
    ended = datetime.fromtimestamp(tc["job_completion_time_unix"], timezone.utc)
    assert row["ended"].startswith(ended.strftime("%Y-%m-%d %H:%M:%S"))
    if value is None:  # failed before it measured
        assert row["state"] == "failed" and m["failure"] == "aborted"
    else:  # measured, also where it missed its reference (result fail)
        assert row["state"] == "completed"
        assert row["throughput"] == (value if unit == "MB/s" else None)


def test_reframe_on_the_local_scheduler_imports_as_it_reports(tmp_path: Path) -> None:
    report, perflogs = run_reframe(tmp_path, "cpu")
    import_and_check(tmp_path, report, perflogs, world=1, nodes=1)


@pytest.mark.slurm
def test_reframe_on_the_slurm_testbed_imports_as_it_reports(tmp_path: Path,
                                                            slurm_cluster: Any) -> None:
    """sbatch + srun, two tasks one per node: Slurm's job ids; two nodes (what the test
    asks for, also where the nodelist ReFrame reads back from sacct is short)."""
    report, perflogs = run_reframe(tmp_path, "slurm")
    cases = [tc for run in json.loads(report.read_text())["runs"] for tc in run["testcases"]]
    assert all(tc["scheduler"] == "slurm" and tc["jobid"].isdigit() for tc in cases)
    import_and_check(tmp_path, report, perflogs, world=2, nodes=2)
