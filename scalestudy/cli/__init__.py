"""The `scalestudy` command: parse options, call one use case of scalestudy.study, print.

Results (tables, JSON, the report's path) go to stdout; progress, notes and failures to
stderr, so stdout stays machine-readable. Exit codes: 0 done, 1 runs or checks failed,
2 a bad spec or option, 130 interrupted (Ctrl-C). Nothing here imports torch, pandas or
matplotlib at start-up.
"""
# ruff: noqa: I001  (commands are listed in the order they register)

from scalestudy.cli.app import app, main
from scalestudy.cli import runs  # noqa: F401  validate, plan, run, status, cancel, probe
from scalestudy.cli import results  # noqa: F401  collect, report, compare, schema, systems
from scalestudy.cli import history  # noqa: F401  history, history ingest
from scalestudy.cli import exports  # noqa: F401  history export
from scalestudy.cli import watch  # noqa: F401  history changes, history nodes
from scalestudy.cli import publish  # noqa: F401  publish
from scalestudy.cli import datasets  # noqa: F401  dataset make

__all__ = ["app", "main"]
