"""The held-out split a measured target evaluates: val.bin (tokens) or val-NNNNNN.tar
(images), each data-parallel replica its share, read once and kept in memory.

Every replica gets the same number of samples (floor(n / dp): at most dp - 1 are left
out), cut into the same number of batches, so that sharded models (FSDP), whose forward
passes are collective, run as many on every rank. Tokens: the windows of seq_len + 1
tokens starting every seq_len tokens, replica r the windows r, r + dp, ...; images: the
samples of the val shards in name and tar order, replica r every dp-th from r.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from . import DataError, formats, sampler

VAL_SHARD = re.compile(r"^val-\d{6}\.tar$")
#: One evaluation batch: inputs, targets (as the training batch holds them).
EvalBatch = tuple[torch.Tensor, torch.Tensor]


def batches(root: Path, kind: str, replica: int, dp: int, batch_size: int, seq_len: int,
            image_size: int, num_classes: int) -> list[EvalBatch]:
    """The replica's held-out batches; DataError when the split is missing or too small."""
    if kind == "tokens":
        return _token_batches(root, replica, dp, batch_size, seq_len)
    return _image_batches(root, replica, dp, batch_size, image_size, num_classes)


def _share(n: int, replica: int, dp: int, where: Path, what: str) -> range:
    """The replica's sample indices of n: r, r + dp, ..., floor(n / dp) of them."""
    per = n // dp
    if per < 1:
        raise DataError(f"{where}: {n} held-out {what} for {dp} data-parallel replicas; "
                        "write a larger held-out split")
    return range(replica, per * dp, dp)


def _cut(samples: list[EvalBatch], batch_size: int) -> list[EvalBatch]:
    out = []
    for i in range(0, len(samples), batch_size):
        chunk = samples[i:i + batch_size]
        out.append((torch.stack([s[0] for s in chunk]), torch.stack([s[1] for s in chunk])))
    return out


def _token_batches(root: Path, replica: int, dp: int, batch_size: int, seq_len: int
                   ) -> list[EvalBatch]:
    info = formats.read_tokens(root)
    val = root / "val.bin"
    if not val.is_file():
        raise DataError(f"{val}: missing; a measured target evaluates the held-out split: "
                        "write val.bin beside train.bin")
    size = val.stat().st_size
    if size % info.itemsize:
        raise DataError(f"{val}: {size} bytes is not a whole number of ids; rewrite it")
    held = formats.TokenInfo(val, info.itemsize, info.vocab_size, size // info.itemsize)
    n = sampler.windows(held.tokens, seq_len)
    samples: list[EvalBatch] = []
    with open(val, "rb") as fh:
        for w in _share(n, replica, dp, val, f"windows of {seq_len + 1} tokens"):
            ids = formats.read_window(fh, held, w * seq_len, seq_len + 1, val)
            samples.append((ids[:-1], ids[1:]))
    return [(x, y.reshape(-1)) for x, y in _cut(samples, batch_size)]


def _image_batches(root: Path, replica: int, dp: int, batch_size: int, image_size: int,
                   num_classes: int) -> list[EvalBatch]:
    shards = sorted(p for p in root.iterdir() if VAL_SHARD.match(p.name))
    if not shards:
        raise DataError(f"{root}: no val-NNNNNN.tar shards; a measured target evaluates "
                        "the held-out split: write them beside the train shards")
    total = 0
    for shard in shards:
        with formats.open_shard(shard) as tar:
            total += sum(1 for _ in formats.samples(tar, shard))
    mine = set(_share(total, replica, dp, shards[0], "images"))
    samples: list[EvalBatch] = []
    index = 0
    for shard in shards:
        with formats.open_shard(shard) as tar:
            for member in formats.samples(tar, shard):
                if index in mine:
                    cls = formats.parse_class(formats.read_member(tar, member.cls, shard),
                                              shard, member.key, num_classes)
                    ext = "." + member.image.name.rsplit(".", 1)[-1].lower()
                    raw = formats.read_member(tar, member.image, shard)
                    image = formats.decode_image(raw, ext, image_size, shard, member.key)
                    samples.append((image, torch.tensor(cls, dtype=torch.int64)))
                index += 1
    return _cut(samples, batch_size)
