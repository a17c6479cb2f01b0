"""The README's test command runs each testbed's tests in one pytest-xdist worker, one
after another (tests/conftest.py): checked on a generated module run the same way, since
a pytest or xdist release that stops grouping would otherwise go unnoticed until two
tests pulled a testbed's server from under each other."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

MODULE = """
import os
import time
from pathlib import Path

import pytest

OUT = Path({out!r})


@pytest.mark.parametrize("i", range(3))
@pytest.mark.{marker}
def test_{marker}(i):
    time.sleep(0.2)
    (OUT / "{marker}-{{}}".format(i)).write_text(os.environ["PYTEST_XDIST_WORKER"])


@pytest.mark.parametrize("i", range(3))
def test_free(i):
    time.sleep(0.2)
"""


def test_each_testbeds_tests_run_in_one_worker(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for marker in ("slurm", "pbs"):
        (tmp_path / f"test_{marker}_g.py").write_text(MODULE.format(out=str(out),
                                                                      marker=marker))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
         "-n", "2", "--dist", "loadgroup", "-v", "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for marker in ("slurm", "pbs"):
        workers = {f.read_text() for f in out.glob(f"{marker}-*")}
        assert len(list(out.glob(f"{marker}-*"))) == 3 and len(workers) == 1, workers
        assert f"@{marker}" in done.stdout
