"""The Flux testbed itself: a real 4-node instance (scripts/flux-testbed).

What a Flux scheduler backend would rely on, checked against the real instance: a job
across two nodes, a batch script's `# flux:` directives (name, output file, size), a
cancel, and a time limit that ends a job as TIMEOUT.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.flux_testbed import FluxCluster

pytestmark = [pytest.mark.flux, pytest.mark.slow]


def test_run_spans_two_nodes(flux_cluster: FluxCluster, flux_tmp_path: Path) -> None:
    proc = flux_cluster.flux("run", "-N2", "--label-io", "hostname", cwd=flux_tmp_path)
    assert proc.returncode == 0, proc.stderr
    # One task per node, each seeing its node's name as its hostname (own-hostname
    # mode; without user namespaces the fake nodes share the machine's hostname)
    lines = sorted(line.split(": ", 1) for line in proc.stdout.splitlines())
    assert [label for label, _ in lines] == ["0", "1"], proc.stdout
    if flux_cluster.env.get("SCALESTUDY_FLUX_HOSTNAMES") == "own":
        assert [name for _, name in lines] == ["node0", "node1"], proc.stdout
    listed = flux_cluster.flux("jobs", "-a", "-n", "-c1", "-o", "{id.f58} {nodelist}")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split()[1] == "node[0-1]", listed.stdout


def test_batch_script_directives(flux_cluster: FluxCluster, flux_tmp_path: Path) -> None:
    script = flux_tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n"
        "# flux: -N 2\n"
        "# flux: --job-name=study-5ca77e0001\n"
        "# flux: --output=stdout.log\n"
        "# flux: -t 5m\n"
        "echo \"jobid $(flux getattr jobid)\"\n"
        "flux run -N2 --label-io hostname\n", encoding="utf-8")
    script.chmod(0o755)
    job_id = flux_cluster.submit("batch", script.name, cwd=flux_tmp_path)
    assert job_id.startswith("f"), job_id
    record = flux_cluster.wait_for_job(job_id, timeout=90)
    assert record["result"] == "COMPLETED", record
    assert record["returncode"] == 0
    assert record["name"] == "study-5ca77e0001"
    assert record["nnodes"] == 2
    out = (flux_tmp_path / "stdout.log").read_text(encoding="utf-8")
    assert "jobid " in out and out.count(": ") == 2, out


def test_cancel_running_job(flux_cluster: FluxCluster, flux_tmp_path: Path) -> None:
    job_id = flux_cluster.submit("submit", "sleep", "300", cwd=flux_tmp_path)
    flux_cluster.wait_for_job(job_id, state="RUN", timeout=30)
    proc = flux_cluster.flux("cancel", job_id)
    assert proc.returncode == 0, proc.stderr
    record = flux_cluster.wait_for_job(job_id, timeout=30)
    assert record["result"] == "CANCELED", record
    assert record["exception"]["type"] == "cancel"
    # Cancelling it again (it has ended) fails: a backend must not count that as an error.
    again = flux_cluster.flux("cancel", job_id)
    assert again.returncode == 1, again


def test_time_limit_is_timeout(flux_cluster: FluxCluster, flux_tmp_path: Path) -> None:
    job_id = flux_cluster.submit("submit", "-t", "5s", "sleep", "60", cwd=flux_tmp_path)
    record = flux_cluster.wait_for_job(job_id, timeout=60)
    assert record["result"] == "TIMEOUT", record
    assert record["exception"]["type"] == "timeout"
