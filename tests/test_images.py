"""execute.images: a container image's digest is of its content: a directory image keeps
its digest when a file is touched or the tree is copied, and changes with a byte, a mode
or a link."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from scalestudy.core.containers import Container
from scalestudy.execute.images import digest_for, kind


def _image(root: Path) -> Path:
    """An unpacked image: a few files, a subdirectory, an executable and a link."""
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "etc" / "os-release").write_text("NAME=tiny\n")
    (root / "usr" / "bin" / "python").write_bytes(b"\x7fELF" + bytes(range(256)) * 64)
    (root / "usr" / "bin" / "python").chmod(0o755)
    (root / "usr" / "bin" / "python3").symlink_to("python")
    return root


def digest(path: Path) -> str | None:
    return digest_for(Container(runtime="charliecloud", image=str(path)))


def test_a_directory_image_is_named_by_its_content_not_its_times(tmp_path: Path) -> None:
    image = _image(tmp_path / "img")
    assert kind(str(image)) == "directory"
    first = digest(image)
    assert first is not None and first.startswith("sha256:")
    for f in (image / "etc" / "os-release", image / "usr" / "bin" / "python"):
        os.utime(f, (1e9, 1e9))  # touched: no content changed
    assert digest(image) == first
    copy = shutil.copytree(image, tmp_path / "copy", symlinks=True)  # new times, inodes
    assert digest(copy) == first

    data = bytearray((image / "usr" / "bin" / "python").read_bytes())
    data[100] ^= 1  # one bit of one byte, same size
    (image / "usr" / "bin" / "python").write_bytes(bytes(data))
    os.utime(image / "usr" / "bin" / "python", (1e9, 1e9))  # and the time put back
    changed = digest(image)
    assert changed not in (None, first)
    (copy / "usr" / "bin" / "python").chmod(0o644)
    assert digest(copy) not in (first, changed)
    (copy / "usr" / "bin" / "python").chmod(0o755)
    assert digest(copy) == first
    (copy / "usr" / "bin" / "python3").unlink()
    (copy / "usr" / "bin" / "python3").symlink_to("/usr/bin/python")
    assert digest(copy) != first


def test_a_file_image_is_its_bytes_and_a_reference_is_not_read(tmp_path: Path) -> None:
    sif = tmp_path / "pt.sif"
    sif.write_bytes(b"SIF" * 1000)
    first = digest(sif)
    os.utime(sif, (1e9, 1e9))
    assert digest(sif) == first
    sif.write_bytes(b"SIF" * 999 + b"SIG")
    assert digest(sif) != first
    assert digest(Path("docker://nvcr.io/nvidia/pytorch:24.01-py3")) is None
    assert digest_for(None) is None
