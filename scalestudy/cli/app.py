"""The `scalestudy` app: consoles, shared options and the one error boundary (`main`).

Results (tables, JSON, the report's path) go to stdout; progress, notes and failures to
stderr, so stdout stays machine-readable. One error boundary (`main`) turns known
errors into `error: ...` on stderr and an exit code: 0 done, 1 runs or checks failed,
2 a bad spec or option, 130 interrupted (Ctrl-C). SCALESTUDY_DEBUG=1 shows tracebacks.
Nothing here imports torch, pandas or matplotlib at start-up.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from scalestudy import __version__
from scalestudy.core.errors import Interrupted, ScalestudyError

app = typer.Typer(
    help="Scaling studies of distributed deep-learning training: "
    "spec -> grid -> jobs -> img/sec -> efficiency report.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
)


def _console(stderr: bool = False) -> Console:
    """A console as wide as the terminal, or COLUMNS; 160 when piped without COLUMNS."""
    stream = sys.stderr if stderr else sys.stdout
    piped = "COLUMNS" not in os.environ and not stream.isatty()
    return Console(stderr=stderr, width=160 if piped else None)


out = _console()
err = _console(stderr=True)

StudyArg = Annotated[Path, typer.Argument(help="the study spec (YAML)", show_default=False)]
ResultsOpt = Annotated[Path, typer.Option(
    "--results", help="the results directory: each study writes results/<study>/ in it")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON (for machines) on stdout")]


def _version(value: bool) -> None:
    if value:
        print(f"scalestudy {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="print the version and exit")
        ] = False) -> None:
    """Scaling studies of distributed deep-learning training."""


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=1, default=str))


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


INTERRUPTED = ("interrupted: a local run that did not finish is kept as `interrupted` and runs "
               "again with the same command; submitted jobs stay in the queue (scalestudy "
               "status / cancel)")


def main() -> None:
    """Entry point: run the app inside the one error boundary; the exit code it returns
    is what the shell sees."""
    signal.signal(signal.SIGTERM, _sigterm)
    try:
        # Typer turns Ctrl-C into exit code 130; other exit codes come back as they are.
        code = app(standalone_mode=False)
    except ScalestudyError as exc:
        if os.environ.get("SCALESTUDY_DEBUG"):
            raise
        for line in str(exc).splitlines() or ["(no message)"]:
            err.print(f"error: {line}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        code = Interrupted.exit_code
    except Exception as exc:  # a click usage error
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        raise
    if code == Interrupted.exit_code:
        err.print(INTERRUPTED, markup=False, highlight=False)
    sys.exit(code if isinstance(code, int) else 0)
