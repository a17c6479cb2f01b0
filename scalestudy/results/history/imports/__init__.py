"""Numbers from elsewhere: results users already have, read from the tools' own output
and kept with their source, to stand beside scalestudy's runs in `history`. One reader a
format, each with real samples in tests/data/imports:

- nccl-tests (`all_reduce_perf` and friends): the text table in either column layout
  (with `root` and `#wrong`, or the older one without `root` and with `error`), or its
  JSON (`-J`): bus bandwidth per message size at N ranks;
- Horovod's synthetic benchmarks: `Total img/sec on N GPU(s): X +-Y`;
- torchtitan's training log: tokens/s per GPU (`tps`, or `wps` in older releases), MFU;
- MLPerf Training result logs (`:::MLLOG`): time to train, from run_start to run_stop;
- ReFrame: every performance variable of every test case (value, unit, reference and
  thresholds, system:partition, environment, job, result), from its JSON run report or
  its perflog (read by the perflog's own header line).

Imports are checked like runs: a layout a reader does not know is refused with the
reason; an aborted run or a log that holds only warm-up steps is recorded as such, never
as a result; the date and the versions come from the log where it says them. None
guesses: what the file does not say (the GPU count of a torchtitan log, the system) comes
from the command line or stays unknown.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from scalestudy.core.errors import ScalestudyError
from scalestudy.results.history.imports import horovod, mlperf, nccl, reframe, torchtitan
from scalestudy.results.history.imports.common import Imported

__all__ = ["FORMATS", "Imported", "parse"]

READERS: dict[str, tuple[Callable[[str, int | None], list[Imported]], str]] = {
    "nccl-tests": (nccl.read, nccl.EXPECTED),
    "horovod": (horovod.read, horovod.EXPECTED),
    "torchtitan": (torchtitan.read, torchtitan.EXPECTED),
    "mlperf": (mlperf.read, mlperf.EXPECTED),
    "reframe": (reframe.read, reframe.EXPECTED),
}
FORMATS: tuple[str, ...] = tuple(READERS)


def parse(path: Path, fmt: str, gpus: int | None = None) -> list[Imported]:
    """The measurements of one file in one format (ScalestudyError: not that format, or
    a layout of it that cannot be read safely)."""
    if fmt not in READERS:
        raise ScalestudyError(f"--format {fmt!r}: one of {', '.join(FORMATS)}")
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ScalestudyError(f"{path}: cannot read it ({exc.strerror})") from None
    reader, expected = READERS[fmt]
    try:
        found = reader(text, gpus)
    except ScalestudyError as exc:
        raise ScalestudyError(f"{path}: {exc}") from None
    if not found:
        raise ScalestudyError(f"{path}: no {fmt} results in it ({expected}); check "
                              "--format, or that the run got that far")
    return found
