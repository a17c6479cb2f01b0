"""The plugin's tests run against its installed copy where there is one (pip install),
else against its source tree: nothing else is needed to run them from a checkout."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("scalestudy_lsf") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
