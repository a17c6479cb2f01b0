"""What a run's container image is, read on the submitting host when its job script is
written: a digest for the provenance (the script exports it, so each attempt's env.txt
keeps the image it ran), and whether the image is there at all (preflight refuses a
missing one).

A file (SIF, squashfs) is identified by the sha256 of its bytes; an unpacked directory
(Charliecloud) by the sha256 of its sorted listing (path, size, modification time of
every entry), which changes when a file does; a registry reference is left to the
runtime to resolve (its digest is not read here).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from scalestudy.core.containers import Container

_CHUNK = 1 << 22


def is_reference(image: str) -> bool:
    """A registry reference (docker://..., nvcr.io#..., repo:tag), not a path."""
    return not image.startswith(("/", "./", "../", "~"))


def kind(image: str) -> str:
    """What this host sees at `image`: a file, a directory, nothing (missing), or a
    registry reference (not looked up)."""
    if is_reference(image):
        return "reference"
    path = Path(image).expanduser()
    return "file" if path.is_file() else "directory" if path.is_dir() else "missing"


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _listing_sha256(root: Path) -> str:
    h = hashlib.sha256()
    entries: list[tuple[str, int, int]] = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in [*dirs, *files]:
            full = os.path.join(folder, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            entries.append((os.path.relpath(full, root), st.st_size, st.st_mtime_ns))
    for rel, size, mtime in sorted(entries):
        h.update(f"{rel}\0{size}\0{mtime}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


_FILES: dict[tuple[str, int, int, int], str] = {}


def digest_for(container: Container | None) -> str | None:
    """The digest a run's job script records (None: no container, or none readable
    here); each image is read once while its size, time and inode stay the same (one
    `run` lists a directory image once)."""
    if container is None:
        return None
    seen = kind(container.image)
    if seen not in ("file", "directory"):
        return None
    path = Path(container.image).expanduser()
    st = path.stat()
    key = (str(path.resolve()), st.st_size if seen == "file" else -1, st.st_mtime_ns,
           st.st_ino)
    if key not in _FILES:
        _FILES[key] = "sha256:" + (_file_sha256(path) if seen == "file"
                                   else _listing_sha256(path))
    return _FILES[key]
