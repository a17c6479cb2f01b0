"""Who reads which sample when: each data-parallel replica its own part of every epoch,
each sample exactly once per epoch across replicas, shuffled by a seed, resumable at a
step (pure functions of seed, replica and position).

Tokens: the windows of seq_len + 1 tokens starting every seq_len tokens (each token is a
target once per epoch); epoch e shuffles them by (seed, e) and replica r takes every
dp-th from r. Images: the shards are shuffled once by the seed and dealt round-robin, so
a replica keeps its own files every epoch (what staging copies); epoch e reads them in
an order shuffled by (seed, e), each shard's samples in tar order.

A replica's samples form one stream, epoch after epoch; batches are consecutive pieces
of it, so a batch may span two epochs and no sample is dropped. Loader worker w of W
reads the batches w, w + W, ... of the stream, which torch's DataLoader returns in
order: the sequence does not depend on the number of workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from . import DataError


def permutation(n: int, seed: int, epoch: int) -> torch.Tensor:
    """A permutation of range(n), the same for the same (seed, epoch) on every host."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=g)


def windows(tokens: int, seq_len: int) -> int:
    """How many windows of seq_len + 1 tokens start every seq_len tokens."""
    return max(0, (tokens - 1) // seq_len)


def replica_windows(n: int, replica: int, dp: int, seed: int, epoch: int) -> torch.Tensor:
    """The window ids replica `replica` of `dp` reads in `epoch`, in order."""
    return permutation(n, seed, epoch)[replica::dp]


def replica_count(n: int, replica: int, dp: int) -> int:
    """How many samples of n the replica reads per epoch."""
    return len(range(replica, n, dp))


def token_position(n: int, replica: int, dp: int, position: int) -> tuple[int, int]:
    """(epoch, index within the epoch) of the replica's stream position."""
    per_epoch = replica_count(n, replica, dp)
    return divmod(position, per_epoch)


def check_windows(n: int, dp: int, path: Path, seq_len: int) -> None:
    """Every replica needs at least one window."""
    if n < dp:
        raise DataError(f"{path}: {n} window(s) of {seq_len + 1} tokens for {dp} "
                        "data-parallel replicas; write more tokens, or shorten seq_len")


def assign_shards(shards: Sequence[Path], dp: int, seed: int) -> list[list[Path]]:
    """Each replica's own shard files: shuffled once by the seed, dealt round-robin."""
    if len(shards) < dp:
        where = shards[0].parent if shards else "the dataset"
        raise DataError(f"{where}: {len(shards)} train-NNNNNN.tar shard(s) for {dp} "
                        "data-parallel replicas, which each read their own files; write at "
                        f"least {dp} shards (ideally a multiple of {dp})")
    order = [shards[int(i)] for i in permutation(len(shards), seed, 0)]
    return [order[r::dp] for r in range(dp)]


def epoch_shards(own: Sequence[Path], seed: int, epoch: int) -> list[Path]:
    """The order a replica reads its own shards in `epoch`."""
    return [own[int(i)] for i in permutation(len(own), seed, epoch + 1)]


def batch_of(position: int, batch_size: int) -> int:
    """The batch a stream position falls in (the first is 0)."""
    return position // batch_size


def owned(position: int, batch_size: int, worker: int, workers: int) -> bool:
    """Whether loader worker `worker` of `workers` (1: the main process) reads it."""
    return batch_of(position, batch_size) % workers == worker
