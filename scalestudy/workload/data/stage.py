"""Staging (the guide's "preload"): before the timed loop each rank copies its own dataset
files to node-local storage (`local`: $SCALESTUDY_LOCAL_STORAGE, else $TMPDIR, else /tmp)
or to /dev/shm (`shm`), timed apart; the loop reads the copy, which is removed at the end.

Each rank copies its own files into a directory of its own (simple, and nothing is
shared between ranks to lock); a token dataset's train.bin, which every rank reads, is
therefore copied once per rank.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import DataError

LOCAL_STORAGE = "SCALESTUDY_LOCAL_STORAGE"
SHM = Path("/dev/shm")


def root_for(mode: str, environ: Mapping[str, str]) -> Path:
    """Where `mode` (local or shm) copies to. The profile's `local_storage` reaches the job
    as written (`/mnt/bb/$USER`): its variables are expanded here, from `environ`, so an
    unset one never stops the job script (a name left unexpanded stays as it is)."""
    if mode == "shm":
        return SHM
    given = environ.get(LOCAL_STORAGE)
    if given:
        return Path(re.sub(r"\$(\w+)|\$\{(\w+)\}",
                           lambda m: environ.get(m.group(1) or m.group(2), m.group(0)), given))
    return Path(environ.get("TMPDIR") or "/tmp")


@dataclass
class Staged:
    """The copies of one rank's files: where each original now is, and what it cost."""

    directory: Path | None = None
    mapping: dict[Path, Path] = field(default_factory=dict)
    seconds: float = 0.0
    nbytes: int = 0

    def remove(self) -> None:
        """Delete the copies (at the end of the run)."""
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None


def stage(files: Sequence[Path], mode: str, rank: int, environ: Mapping[str, str]
          ) -> Staged:
    """Copy `files` for `mode` (none: no copy); a failed copy leaves nothing behind."""
    if mode == "none":
        return Staged(mapping={f: f for f in files})
    root = root_for(mode, environ)
    directory = root / f"scalestudy-stage-{os.getpid()}-rank{rank}"
    start = time.perf_counter()
    staged = Staged(directory=directory)
    try:
        directory.mkdir(parents=True, exist_ok=False)
        for src in files:  # names are unique within a dataset
            dst = directory / src.name
            shutil.copyfile(src, dst)
            staged.mapping[src] = dst
            staged.nbytes += dst.stat().st_size
    except OSError as exc:
        staged.remove()
        raise DataError(f"{root}: cannot stage the dataset there ({exc}); free space, set "
                        f"{LOCAL_STORAGE} to node-local storage, or use data_stage none"
                        ) from None
    staged.seconds = time.perf_counter() - start
    return staged
