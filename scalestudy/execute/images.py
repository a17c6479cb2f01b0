"""What a run's container image is, read on the submitting host when its job script is
written: a digest for the provenance (the script exports it, so each attempt's env.txt
keeps the image it ran), and whether the image is there at all (preflight refuses a
missing one).

A file (SIF, squashfs) is identified by the sha256 of its bytes; an unpacked directory
(Charliecloud) by the sha256 of its content: every entry's path, kind and permission
bits, a file's bytes (their sha256) and a link's target, in sorted order. Touching a
file, or copying the tree elsewhere, leaves it; changing a byte, a name, a mode or a
link changes it. (Earlier releases hashed the listing's sizes and modification
times: an image's digest changes once, on the first run after the upgrade.) A registry
reference is left to the runtime to resolve (its digest is not read here).
"""

from __future__ import annotations

import hashlib
import os
import stat
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


def _tree_sha256(root: Path) -> str:
    """The sha256 of a directory's content (paths, kinds, modes, bytes, link targets);
    no time enters it. An entry that cannot be read is named with why, so that it still
    counts."""
    h = hashlib.sha256()
    entries: list[str] = []
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            full = os.path.join(folder, name)
            rel = os.path.relpath(full, root)
            try:
                st = os.lstat(full)
                if stat.S_ISLNK(st.st_mode):
                    what = f"link\0{os.readlink(full)}"
                elif stat.S_ISREG(st.st_mode):
                    what = f"file\0{_file_sha256(Path(full))}"
                elif stat.S_ISDIR(st.st_mode):
                    what = "dir"
                else:
                    what = f"other {stat.S_IFMT(st.st_mode):o}"
                entry = f"{rel}\0{what}\0{stat.S_IMODE(st.st_mode):o}"
            except OSError as exc:
                entry = f"{rel}\0unreadable {exc.errno}"
            entries.append(entry)
    for entry in sorted(entries):
        h.update(entry.encode("utf-8", "surrogateescape") + b"\n")
    return h.hexdigest()


def _listing(root: Path) -> str:
    """The sha256 of a directory's listing (path, size, inode and change time of every
    entry): cheap (no file is read), it changes whenever a file might have (a write or
    a chmod sets the change time, which no one can put back): the key under which its
    content's digest is kept."""
    h = hashlib.sha256()
    entries: list[tuple[str, int, int, int]] = []
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            full = os.path.join(folder, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            entries.append((os.path.relpath(full, root), st.st_size, st.st_ino,
                            st.st_ctime_ns))
    for rel, size, inode, changed in sorted(entries):
        h.update(f"{rel}\0{size}\0{inode}\0{changed}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


_FILES: dict[tuple[str, int | str, int, int], str] = {}


def digest_for(container: Container | None) -> str | None:
    """The digest a run's job script records (None: no container, or none readable
    here); each image is read once while its size, time and inode stay the same (a
    directory's content is read again only when its listing changed)."""
    if container is None:
        return None
    seen = kind(container.image)
    if seen not in ("file", "directory"):
        return None
    path = Path(container.image).expanduser()
    st = path.stat()
    key = (str(path.resolve()), st.st_size if seen == "file" else _listing(path),
           st.st_mtime_ns, st.st_ino)
    if key not in _FILES:
        _FILES[key] = "sha256:" + (_file_sha256(path) if seen == "file"
                                   else _tree_sha256(path))
    return _FILES[key]
