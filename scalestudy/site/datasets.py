"""A dataset directory checked before any job reads it: tokens (nanoGPT/llm.c `.bin` +
meta.json) or WebDataset image shards. Reads only; each problem is one line
`file: what; how to fix`.

What is checked, and how far (fast on big data): tokens: meta.json (vocab_size, dtype),
train.bin and val.bin present and whole tokens, every token id below vocab_size (the
whole files, in chunks), enough tokens for one window per rank. Images: train and val
shards present, at least as many train shards as the largest world size (each rank owns
files); every shard's tar headers listed (a truncated tar, a member without its `.cls`,
an unknown extension); in the first and last shard of each split, every class read (ASCII
digits, below num_classes) and the first image decoded.
"""

from __future__ import annotations

import json
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

TOKEN_DTYPES = {"uint16": "<u2", "uint32": "<u4"}
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "npy")
SHARD = re.compile(r"^(train|val)-(\d{6})\.tar$")
#: Token ids scanned per read (4 Mi ids: 8-16 MB at a time).
_CHUNK = 1 << 22


@dataclass(frozen=True)
class Need:
    """What the runs reading a dataset ask of it."""

    world: int  # the largest world size of the runs reading it
    tokens: bool  # the model reads tokens (a transformer), else images
    num_classes: int = 1000
    seq_len: int = 1024


def visible(path: Path) -> bool:
    """Whether a path could be seen from this host: its first component exists (a
    cluster's /lus/... or /pscratch/... is not here at all)."""
    parts = path.absolute().parts
    return len(parts) < 2 or Path(parts[0], parts[1]).exists()


def kind_of(path: Path) -> str | None:
    """`tokens`, `images`, or None (neither train.bin/meta.json nor shards)."""
    if (path / "train.bin").exists() or (path / "meta.json").exists():
        return "tokens"
    if any(SHARD.match(p.name) for p in path.iterdir()):
        return "images"
    return None


def problems(path: Path, need: Need) -> list[str]:
    """Everything wrong with the dataset at `path` for runs that `need` it."""
    if not path.is_dir():
        what = "not a directory" if path.exists() else "no such directory"
        return [f"{path}: {what}; give the dataset's directory (write one with "
                "`scalestudy dataset make tokens|images DIR`)"]
    kind = kind_of(path)
    if kind is None:
        return [f"{path}: neither tokens (train.bin, val.bin, meta.json) nor WebDataset "
                "shards (train-000000.tar, ...); see docs/benchmark.md#datasets"]
    wanted = "tokens" if need.tokens else "images"
    if kind != wanted:
        return [f"{path}: holds {kind}, but the model reads {wanted}; choose a "
                f"{'transformer' if kind == 'tokens' else 'CNN'} model or another dataset"]
    return token_problems(path, need) if kind == "tokens" else image_problems(path, need)


def token_problems(path: Path, need: Need) -> list[str]:
    """meta.json, train.bin and val.bin of a token dataset."""
    meta_file = path / "meta.json"
    if not meta_file.is_file():
        return [f"{meta_file}: missing; write {{\"vocab_size\": N}} (and \"dtype\": "
                "\"uint32\" for ids of 65536 and above) beside train.bin"]
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return [f"{meta_file}: not readable JSON ({exc}); fix or rewrite it"]
    vocab = meta.get("vocab_size") if isinstance(meta, dict) else None
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 1:
        return [f"{meta_file}: needs \"vocab_size\", a positive integer; add it"]
    dtype = meta.get("dtype", "uint16")
    if dtype not in TOKEN_DTYPES:
        return [f"{meta_file}: dtype {dtype!r} is not one of {', '.join(TOKEN_DTYPES)}; "
                "write the tokens as one of them"]
    out = []
    if dtype == "uint16" and vocab > 1 << 16:
        out.append(f"{meta_file}: vocab_size {vocab} does not fit uint16; write the tokens "
                   "as uint32 and set \"dtype\": \"uint32\"")
    for split in ("train", "val"):
        out += _bin_problems(path / f"{split}.bin", dtype, vocab)
    if not out:
        n = (path / "train.bin").stat().st_size // np.dtype(TOKEN_DTYPES[dtype]).itemsize
        if n < (need.seq_len + 1) * need.world:
            out.append(f"{path / 'train.bin'}: {n} tokens, fewer than one window of seq_len+1 "
                       f"= {need.seq_len + 1} per rank at {need.world} ranks; write more "
                       "tokens or lower seq_len")
    return out


def _bin_problems(file: Path, dtype: str, vocab: int) -> list[str]:
    if not file.is_file():
        return [f"{file}: missing; write the {file.stem} split's token ids there "
                f"(flat little-endian {dtype})"]
    item = np.dtype(TOKEN_DTYPES[dtype])
    size = file.stat().st_size
    if size == 0 or size % item.itemsize:
        return [f"{file}: {size} bytes, not a whole number of {dtype} tokens; rewrite it "
                f"(or fix \"dtype\" in meta.json)"]
    tokens = np.memmap(file, dtype=item, mode="r")
    for start in range(0, len(tokens), _CHUNK):
        chunk = tokens[start:start + _CHUNK]
        top = int(chunk.max())
        if top >= vocab:
            at = start + int(np.argmax(chunk >= vocab))
            return [f"{file}: token id {top} at position {at} is not below vocab_size "
                    f"{vocab}; fix the tokenizer's output or raise vocab_size in meta.json"]
    return []


def image_problems(path: Path, need: Need) -> list[str]:
    """The WebDataset shards of an image dataset."""
    shards: dict[str, list[Path]] = {"train": [], "val": []}
    for p in sorted(path.iterdir()):
        if m := SHARD.match(p.name):
            shards[m.group(1)].append(p)
    out = []
    for split, found in shards.items():
        if not found:
            out.append(f"{path}: no {split}-NNNNNN.tar shards; write the {split} split as "
                       f"{split}-000000.tar, {split}-000001.tar, ...")
    if len(shards["train"]) and len(shards["train"]) < need.world:
        out.append(f"{path}: {len(shards['train'])} train shard(s) for {need.world} ranks; "
                   "each rank reads its own files: write at least one shard per rank "
                   f"(e.g. --shards {need.world}) or run fewer ranks")
    for found in shards.values():
        for i, shard in enumerate(found):
            out += _shard_problems(shard, need.num_classes, deep=i in (0, len(found) - 1))
    return out


def _shard_problems(shard: Path, num_classes: int, deep: bool) -> list[str]:
    """One shard's tar headers (all shards) and, `deep`, its classes and first image."""
    size = shard.stat().st_size
    try:
        with tarfile.open(shard, "r:") as tar:
            members = tar.getmembers()
            for m in members:
                if m.isfile() and m.offset_data + m.size > size:
                    raise tarfile.ReadError(f"member {m.name} ends beyond the file")
            if _partial_tail(shard, members, size):
                raise tarfile.ReadError("it ends inside a member's header")
            keys: dict[str, set[str]] = {}
            for m in members:
                if m.isfile():
                    key, _, ext = m.name.rpartition(".")
                    keys.setdefault(key, set()).add(ext.lower())
            for key, exts in keys.items():
                bad = exts - {*IMAGE_EXTENSIONS, "cls"}
                if bad:
                    return [f"{shard}: member {key}.{sorted(bad)[0]}: unknown extension; "
                            f"members are KEY.jpg, KEY.png or KEY.npy beside KEY.cls"]
                if "cls" not in exts:
                    return [f"{shard}: {key} has no {key}.cls; add its class (ASCII digits) "
                            "beside the image"]
                if not exts & set(IMAGE_EXTENSIONS):
                    return [f"{shard}: {key}.cls has no image beside it; add "
                            f"{key}.jpg, .png or .npy, or remove it"]
            return _deep_problems(shard, tar, members, num_classes) if deep else []
    except (tarfile.TarError, EOFError, OSError) as exc:
        return [f"{shard}: not a whole tar file ({exc}); write the shard again "
                "(a copy cut short?)"]


def _partial_tail(shard: Path, members: list[tarfile.TarInfo], size: int) -> bool:
    """Whether bytes other than the end-of-archive zeros follow the last member (tarfile
    stops listing, silently, at a header cut short)."""
    end = 0
    if members:
        last = members[-1]
        end = last.offset_data + -(-last.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
    with shard.open("rb") as f:
        f.seek(end)
        while chunk := f.read(1 << 16):
            if chunk.count(0) != len(chunk):
                return True
    return end > size


def _deep_problems(shard: Path, tar: tarfile.TarFile, members: list[tarfile.TarInfo],
                   num_classes: int) -> list[str]:
    first_image = True
    for m in members:
        if not m.isfile():
            continue
        data = tar.extractfile(m)
        raw = data.read() if data is not None else b""
        if len(raw) != m.size:
            raise tarfile.ReadError(f"member {m.name} is cut short")
        if m.name.endswith(".cls"):
            text = raw.decode("ascii", "replace").strip()
            if not text.isdigit():
                return [f"{shard}: {m.name} holds {text[:20]!r}, not a class id in ASCII "
                        "digits; write the class as e.g. `3`"]
            if int(text) >= num_classes:
                return [f"{shard}: {m.name} is class {int(text)}, not below workload."
                        f"num_classes {num_classes}; raise num_classes above {int(text)}"]
        elif first_image:
            first_image = False
            problem = _decode_problem(m.name, raw)
            if problem:
                return [f"{shard}: {m.name}: {problem}; write it as a PNG, JPEG or .npy "
                        "array"]
    return []


def _decode_problem(name: str, raw: bytes) -> str | None:
    """Why an image member does not decode (None when it does)."""
    import io

    try:
        if name.endswith(".npy"):
            np.load(io.BytesIO(raw), allow_pickle=False)
        else:
            from PIL import Image

            with Image.open(io.BytesIO(raw)) as image:
                image.load()
    except Exception as exc:  # Pillow and numpy raise many kinds on bad bytes
        return f"does not decode ({type(exc).__name__}: {exc})"
    return None
