"""The dataset formats on disk: a token directory (train.bin, val.bin, meta.json, as
nanoGPT and llm.c write them) and WebDataset tar shards of images (KEY.jpg/.png/.npy
beside KEY.cls); reading one sample of each, checked, as tensors.

Tokens: flat little-endian token ids (read on little-endian hosts:
x86-64, aarch64, ppc64le), uint16 (uint32 where meta.json says
`"dtype": "uint32"`). Images: JPEG and PNG through Pillow (converted to RGB), .npy
arrays of uint8 H x W x 3 or float32 3 x H x W (C order); all resized to image_size
(bilinear) and given as float32 3 x S x S, uint8 scaled to [0, 1].
"""

from __future__ import annotations

import ast
import io
import json
import re
import struct
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import torch

from . import DataError

DTYPES = {"uint16": (2, torch.uint16), "uint32": (4, torch.uint32)}
IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".npy")
SHARD = re.compile(r"^train-\d{6}\.tar$")


@dataclass(frozen=True)
class TokenInfo:
    """A token dataset: its train.bin, the id width and the vocabulary."""

    train: Path
    itemsize: int
    vocab_size: int
    tokens: int


def kind_of(root: Path) -> str:
    """"tokens" or "images", from what the directory holds; DataError when neither."""
    if not root.is_dir():
        raise DataError(f"{root}: no such directory; give --data an existing dataset "
                        "directory (tokens: train.bin + meta.json; images: train-NNNNNN.tar)")
    if (root / "train.bin").exists() or (root / "meta.json").exists():
        return "tokens"
    if shard_files(root):
        return "images"
    raise DataError(f"{root}: neither train.bin + meta.json (tokens) nor train-NNNNNN.tar "
                    "shards (images); write the dataset in one of the documented formats")


def read_tokens(root: Path) -> TokenInfo:
    """meta.json and train.bin, checked (the ids themselves are checked as read)."""
    meta_path, train = root / "meta.json", root / "train.bin"
    if not meta_path.is_file():
        raise DataError(f"{meta_path}: missing; write meta.json with at least "
                        '{"vocab_size": N} beside train.bin')
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"{meta_path}: not readable JSON ({exc}); rewrite it") from None
    vocab = meta.get("vocab_size") if isinstance(meta, dict) else None
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab < 1:
        raise DataError(f"{meta_path}: needs an integer vocab_size >= 1; add it")
    dtype = meta.get("dtype", "uint16")
    if dtype not in DTYPES:
        raise DataError(f"{meta_path}: dtype {dtype!r} is not uint16 or uint32; fix it")
    if not train.is_file():
        raise DataError(f"{train}: missing; write the training tokens to train.bin")
    itemsize = DTYPES[dtype][0]
    size = train.stat().st_size
    if size % itemsize:
        raise DataError(f"{train}: {size} bytes is not a whole number of {dtype} ids; "
                        "rewrite the file (or fix meta.json's dtype)")
    return TokenInfo(train, itemsize, vocab, size // itemsize)


def read_window(fh: IO[bytes], info: TokenInfo, start: int, length: int,
                path: Path) -> torch.Tensor:
    """Token ids [start, start + length) as int64, each checked against vocab_size."""
    fh.seek(start * info.itemsize)
    raw = fh.read(length * info.itemsize)
    if len(raw) != length * info.itemsize:
        raise DataError(f"{path}: ends before token {start + length}; the file changed "
                        "while read, rewrite it")
    ids = torch.frombuffer(bytearray(raw), dtype=DTYPES_BY_SIZE[info.itemsize])
    ids = ids.to(torch.int64)
    top = int(ids.max())
    if top >= info.vocab_size:
        at = start + int((ids >= info.vocab_size).nonzero()[0])
        raise DataError(f"{path}: token id {top} at position {at} is >= vocab_size "
                        f"{info.vocab_size} of meta.json; re-tokenise or fix vocab_size")
    return ids


DTYPES_BY_SIZE = {size: dtype for size, dtype in DTYPES.values()}


def shard_files(root: Path) -> list[Path]:
    """The training shards train-NNNNNN.tar, in name order."""
    return sorted(p for p in root.iterdir() if SHARD.match(p.name))


@dataclass(frozen=True)
class Member:
    """One sample's members in a shard: the image's and the class's tar entries."""

    key: str
    image: tarfile.TarInfo
    cls: tarfile.TarInfo


def _key(name: str) -> tuple[str, str]:
    """WebDataset's split: the key is the path up to the first dot of the basename."""
    head, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    return (f"{head}/{stem}" if head else stem), (dot + ext).lower()


def _group(shard: Path, key: str, parts: dict[str, tarfile.TarInfo]) -> Member:
    images = [e for e in IMAGE_EXTS if e in parts]
    if ".cls" not in parts:
        raise DataError(f"{shard}: sample {key!r} has no {key}.cls; add the class as "
                        "ASCII digits beside each image")
    if not images:
        raise DataError(f"{shard}: sample {key!r} has no .jpg, .png or .npy image; add "
                        "one or remove its .cls")
    return Member(key, parts[images[0]], parts[".cls"])


def samples(tar: tarfile.TarFile, shard: Path) -> Iterator[Member]:
    """The shard's samples in tar order: members grouped by key (headers only; the data
    is read by `read_member`). A truncated or corrupt tar is a DataError."""
    key, parts = None, {}
    try:
        for info in tar:
            if not info.isfile():
                continue
            k, ext = _key(info.name)
            if k != key and key is not None:
                yield _group(shard, key, parts)
                parts = {}
            key = k
            parts[ext] = info
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise truncated(shard, exc) from None
    if key is not None:
        yield _group(shard, key, parts)


def truncated(shard: Path, exc: BaseException) -> DataError:
    return DataError(f"{shard}: truncated or corrupt tar ({exc}); write the shard again")


def open_shard(shard: Path) -> tarfile.TarFile:
    """The shard for reading (seekable: skipped samples cost only their headers)."""
    try:
        return tarfile.open(shard, mode="r:")
    except (tarfile.TarError, OSError) as exc:
        raise truncated(shard, exc) from None


def read_member(tar: tarfile.TarFile, info: tarfile.TarInfo, shard: Path) -> bytes:
    """A member's bytes, all of them (a short read is a truncated shard)."""
    try:
        fh = tar.extractfile(info)
        raw = fh.read() if fh is not None else b""
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise truncated(shard, exc) from None
    if len(raw) != info.size:
        raise truncated(shard, EOFError(f"{info.name} has {len(raw)} of {info.size} bytes"))
    return raw


def parse_class(raw: bytes, shard: Path, key: str, num_classes: int) -> int:
    """The class id of a .cls member, below num_classes."""
    text = raw.decode("ascii", errors="replace").strip()
    if not text.isdigit():
        raise DataError(f"{shard}: {key}.cls holds {text[:20]!r}, not a class id in ASCII "
                        "digits; rewrite it")
    cls = int(text)
    if cls >= num_classes:
        raise DataError(f"{shard}: {key}.cls is {cls}, not below --num-classes "
                        f"{num_classes}; run with num_classes > {cls}")
    return cls


def decode_image(raw: bytes, ext: str, size: int, shard: Path, key: str) -> torch.Tensor:
    """float32 3 x size x size from a .jpg/.png (Pillow) or .npy member."""
    if ext == ".npy":
        image = _npy(raw, shard, key)
    else:
        try:
            from PIL import Image
        except ImportError:
            raise DataError(f"{shard}: {key}{ext} needs Pillow; pip install pillow") from None
        try:
            with Image.open(io.BytesIO(raw)) as img:
                rgb = img.convert("RGB")
                if rgb.size != (size, size):
                    rgb = rgb.resize((size, size), Image.Resampling.BILINEAR)
                pixels = torch.frombuffer(bytearray(rgb.tobytes()), dtype=torch.uint8)
        except (OSError, ValueError, SyntaxError) as exc:
            raise DataError(f"{shard}: {key}{ext} is not a readable image ({exc}); "
                            "rewrite it") from None
        return pixels.view(size, size, 3).permute(2, 0, 1).float().div_(255)
    if image.shape[-2:] != (size, size):
        image = torch.nn.functional.interpolate(image[None], size=(size, size),
                                                mode="bilinear", align_corners=False)[0]
    return image.contiguous()


def _npy(raw: bytes, shard: Path, key: str) -> torch.Tensor:
    """A .npy array (format 1.0-3.0, C order): uint8 H x W x 3 or float32 3 x H x W."""
    where = f"{shard}: {key}.npy"
    if raw[:6] != b"\x93NUMPY" or len(raw) < 10:
        raise DataError(f"{where} is not a .npy file; write it with numpy.save")
    major = raw[6]
    if major == 1:
        (hlen,), start = struct.unpack("<H", raw[8:10]), 10
    else:
        (hlen,), start = struct.unpack("<I", raw[8:12]), 12
    try:
        header = ast.literal_eval(raw[start:start + hlen].decode("latin1"))
        descr, fortran, shape = header["descr"], header["fortran_order"], tuple(header["shape"])
    except (ValueError, SyntaxError, KeyError, TypeError):
        raise DataError(f"{where}: unreadable .npy header; write it with numpy.save") from None
    body = bytearray(raw[start + hlen:])
    if descr == "|u1" and len(shape) == 3 and shape[2] == 3 and not fortran:
        t = torch.frombuffer(body, dtype=torch.uint8)[:shape[0] * shape[1] * 3]
        return t.view(shape).permute(2, 0, 1).float().div_(255)
    if descr == "<f4" and len(shape) == 3 and shape[0] == 3 and not fortran:
        return torch.frombuffer(body, dtype=torch.float32)[:3 * shape[1] * shape[2]].view(shape)
    raise DataError(f"{where}: {descr} {shape} is not supported; save uint8 H x W x 3 or "
                    "float32 3 x H x W (C order)")
