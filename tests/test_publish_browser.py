"""The published site in a real headless Chromium, from `file://` and from a local HTTP
server: the index and a system page load with no console message at all (an error, a
missing file, an uncaught exception), and every chart drew points. A page whose chart
library is missing shows that the check can fail."""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.test_publish import make_store, publish

pytestmark = pytest.mark.slow


def browser() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("SCALESTUDY_REQUIRE_CHROMIUM") == "1":
            pytest.fail("chromium is not installed (apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return found


def open_page(url: str, profile: Path) -> tuple[str, list[str]]:
    """The page's DOM after its scripts ran, and every console message it logged."""
    done = subprocess.run(
        [browser(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-quic", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
         "--window-size=1200,900", "--virtual-time-budget=5000", "--dump-dom", url],
        capture_output=True, text=True, timeout=120, check=False)
    assert "<body" in done.stdout, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return done.stdout, console


def charts(dom: str) -> dict[str, int]:
    """Each chart's id and the points it drew (its data-points)."""
    return {m.group(1): int(m.group(2)) for m in re.finditer(
        r'<div class="chart" id="([^"]+)" data-points="(\d+)"', dom)}


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def served(root: Path) -> Iterator[str]:
    """The site over HTTP on a free loopback port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_site_opens_in_chromium_from_a_file_and_from_a_server(tmp_path: Path) -> None:
    browser()
    url, _ = make_store(tmp_path, nights=8)
    nccl = Path(__file__).parent / "data" / "imports" / "nccl_tests_allreduce_2node_h100.txt"
    done = run_cli("history", "import", "--format", "nccl-tests", "--system", "polaris",
                   "--date", "2026-03-05", str(nccl), "--store", url, "--results",
                   str(tmp_path / "results"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    site = tmp_path / "site"
    publish(url, site)
    with served(site) as http_root:
        for base in (site.as_uri(), http_root):
            dom, console = open_page(f"{base}/index.html", tmp_path / "profile-index")
            assert console == [], (base, console)
            assert 'data-ready="1"' in dom and "systems/polaris/resnet50.html" in dom

            dom, console = open_page(f"{base}/systems/polaris/resnet50.html",
                                     tmp_path / "profile-system")
            assert console == [], (base, console)
            drawn = charts(dom)
            # 5 scales x 8 campaigns over time; at scale: 5 measured, 2 forecast
            assert drawn == {"series-0-efficiency": 40, "series-0-per-gpu": 40,
                             "series-0-at-scale": 7}, dom[:3000]
            assert 'data-charts="3"' in dom and "<canvas" in dom

    # an import's page: its bus bandwidth against message size (31 sizes), and over
    # time at its largest message (one import: one reading)
    dom, console = open_page((site / "systems/polaris/nccl-tests.html").as_uri(),
                             tmp_path / "profile-import")
    assert console == [] and charts(dom) == {"measures-0": 1, "curves-0": 31}, console

    # the control: without its chart library the page draws nothing and says why
    broken = site / "systems/polaris/broken.html"
    broken.write_text((site / "systems/polaris/resnet50.html").read_text().replace(
        "uPlot.iife.min.js", "missing.js"))
    dom, console = open_page(broken.as_uri(), tmp_path / "profile-broken")
    assert any("did not load" in line for line in console), console
    assert charts(dom) == {}
