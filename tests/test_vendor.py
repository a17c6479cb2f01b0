"""The vendored chart library is the release its README names, byte for byte."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

VENDOR = Path(__file__).resolve().parents[1] / "scalestudy" / "report" / "vendor"


def test_the_vendored_files_are_the_ones_the_readme_names() -> None:
    table = re.findall(r"^\| (\S+) \| .* \| ([0-9a-f]{64}) \|$",
                       (VENDOR / "README.md").read_text(), re.M)
    assert len(table) == 2
    for name, digest in table:
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == digest, name
    assert "MIT" in (VENDOR / "uPlot.LICENSE").read_text()
