"""The dataset sources (tokens, image shards) as a torch DataLoader per rank, and the
feeder that copies each next batch into the training batch in place, timing how long
the step waited for it (input wait), the decode time and the bytes read.

The backends close over one Batch (train.build); before each step the feeder fills it
with the next real batch (`copy_`, non-blocking from pinned memory on CUDA), so DDP,
FSDP, Horovod, DeepSpeed and the pipeline schedules train on it unchanged. Every rank of
one data-parallel replica (tp x pp) reads the same batches.
"""

from __future__ import annotations

import io
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from . import DataError, formats, sampler

#: A directory: each rank appends the sample ids of every batch it trains on to
#: rank<N>.jsonl there (what the tests check "each sample once per epoch" with).
TRACE = "SCALESTUDY_DATA_TRACE"
#: One sample: input, target, decode seconds, bytes read, sample id, epoch.
Sample = tuple[torch.Tensor, torch.Tensor | int, float, int, int, int]
Keep = Callable[[int], bool]


@dataclass(frozen=True)
class TokenSource:
    """Windows of seq_len + 1 tokens of train.bin (input: the first seq_len, target: the
    next token of each)."""

    info: formats.TokenInfo
    seq_len: int
    replica: int
    dp: int
    seed: int
    kind: str = "tokens"

    def files(self) -> list[Path]:
        return [self.info.train]

    def relocated(self, mapping: Mapping[Path, Path]) -> TokenSource:
        return replace(self, info=replace(self.info, train=mapping[self.info.train]))

    def stream(self, start: int, keep: Keep) -> Iterator[Sample]:
        """The replica's samples from stream position `start` on, those `keep` wants."""
        n = sampler.windows(self.info.tokens, self.seq_len)
        per_epoch = sampler.replica_count(n, self.replica, self.dp)
        epoch, index = sampler.token_position(n, self.replica, self.dp, start)
        position, span = start, self.seq_len + 1
        with open(self.info.train, "rb", buffering=0) as raw:
            fh = io.BufferedReader(raw, buffer_size=span * self.info.itemsize)
            while True:
                order = sampler.replica_windows(n, self.replica, self.dp, self.seed, epoch)
                for i in range(index, per_epoch):
                    if keep(position):
                        began = time.perf_counter()
                        window = int(order[i])
                        ids = formats.read_window(fh, self.info, window * self.seq_len, span,
                                                  self.info.train)
                        yield (ids[:-1], ids[1:], time.perf_counter() - began,
                               span * self.info.itemsize, window, epoch)
                    position += 1
                epoch, index = epoch + 1, 0


@dataclass(frozen=True)
class ImageSource:
    """The replica's own WebDataset shards, decoded to image_size."""

    own: tuple[Path, ...]
    shard_ids: Mapping[str, int]  # a shard's name -> its index among all shards
    image_size: int
    num_classes: int
    seed: int
    kind: str = "images"

    def files(self) -> list[Path]:
        return list(self.own)

    def relocated(self, mapping: Mapping[Path, Path]) -> ImageSource:
        return replace(self, own=tuple(mapping[p] for p in self.own))

    def stream(self, start: int, keep: Keep) -> Iterator[Sample]:
        """As TokenSource.stream; skipped samples cost only their tar headers. A sample's
        id is its shard's index x 2^32 + its place in the shard."""
        position, epoch = 0, 0
        while True:
            before = position
            for shard in sampler.epoch_shards(self.own, self.seed, epoch):
                base = self.shard_ids[shard.name] << 32
                with formats.open_shard(shard) as tar:
                    for ordinal, member in enumerate(formats.samples(tar, shard)):
                        if position >= start and keep(position):
                            yield self._load(tar, shard, member, base + ordinal, epoch)
                        position += 1
            if position == before:
                raise DataError(f"{self.own[0]}: this replica's shards hold no samples; "
                                "write KEY.png/.jpg/.npy + KEY.cls members into them")
            epoch += 1

    def _load(self, tar: object, shard: Path, member: formats.Member, sample_id: int,
              epoch: int) -> Sample:
        began = time.perf_counter()
        raw_cls = formats.read_member(tar, member.cls, shard)  # type: ignore[arg-type]
        raw = formats.read_member(tar, member.image, shard)  # type: ignore[arg-type]
        cls = formats.parse_class(raw_cls, shard, member.key, self.num_classes)
        ext = "." + member.image.name.rsplit(".", 1)[-1].lower()
        image = formats.decode_image(raw, ext, self.image_size, shard, member.key)
        return (image, cls, time.perf_counter() - began, len(raw) + len(raw_cls), sample_id,
                epoch)


Source = TokenSource | ImageSource


class Stream(torch.utils.data.IterableDataset[Sample]):
    """A replica's samples from a step on; loader worker w of W reads batches w, w+W, ..."""

    def __init__(self, source: Source, batch_size: int, start_step: int = 0) -> None:
        self.source, self.batch_size, self.start = source, batch_size, start_step * batch_size

    def __iter__(self) -> Iterator[Sample]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        first = sampler.batch_of(self.start, self.batch_size)
        return self.source.stream(self.start, lambda p: sampler.owned(
            p, self.batch_size, (worker + first) % workers, workers))


def collate(items: list[Sample]) -> tuple[torch.Tensor, ...]:
    """A batch: inputs, targets, summed decode seconds, summed bytes, ids, epochs."""
    data = torch.stack([i[0] for i in items])
    targets = [i[1] for i in items]
    target = (torch.stack(targets) if isinstance(targets[0], torch.Tensor)  # type: ignore[arg-type]
              else torch.tensor(targets, dtype=torch.int64))
    return (data, target, torch.tensor([sum(i[2] for i in items)], dtype=torch.float64),
            torch.tensor([sum(i[3] for i in items)], dtype=torch.int64),
            torch.tensor([i[4] for i in items], dtype=torch.int64),
            torch.tensor([i[5] for i in items], dtype=torch.int64))


#: The longest $TMPDIR that leaves room for multiprocessing's socket path under it
#: (`pymp-XXXXXXXX/listener-XXXXXXXX`; a Unix socket's path holds 107 bytes).
SOCKET_ROOM = 107 - 36


def loader(source: Source, batch_size: int, workers: int, prefetch: int, pin: bool,
           start_step: int = 0) -> torch.utils.data.DataLoader[Sample]:
    """torch's DataLoader over the replica's stream."""
    if workers > 0 and len(tempfile.gettempdir().encode()) > SOCKET_ROOM:
        # Workers hand batches over by file descriptor, through a Unix socket that
        # multiprocessing makes in the temp dir; under a deep $TMPDIR its path is too long
        # ("AF_UNIX path too long" in the worker's feeder thread, and the step waits for
        # ever). The workers, forked from here, make theirs in /tmp.
        tempfile.tempdir = "/tmp"
    return torch.utils.data.DataLoader(
        Stream(source, batch_size, start_step), batch_size=batch_size, collate_fn=collate,
        num_workers=workers, prefetch_factor=prefetch if workers > 0 else None,
        persistent_workers=workers > 0, pin_memory=pin)


def batches(source: Source, batch_size: int, start_step: int, steps: int,
            workers: int = 0) -> list[tuple[list[int], list[int]]]:
    """(ids, epochs) of `steps` batches from `start_step`: the order, for resuming."""
    it = iter(loader(source, batch_size, workers, 2, False, start_step))
    return [(b[4].tolist(), b[5].tolist()) for b, _ in zip(it, range(steps), strict=False)]


def _original(exc: BaseException) -> DataError | None:
    """The DataError a loader worker raised (torch re-raises it with its traceback)."""
    if isinstance(exc, DataError):
        last = str(exc).strip().splitlines()
        text = last[-1] if last else ""
        marker = "DataError: "
        return DataError(text.split(marker, 1)[1] if marker in text else str(exc))
    return None
