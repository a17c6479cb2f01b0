"""Opening a rank's dataset for training (checked, staged) and feeding its batches into
the training batch before each step, timed: `open_feeder`, `Feeder.load`."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Protocol

import torch

from ..layout import Layout
from . import DataError, formats, sampler, stage
from .loader import TRACE, ImageSource, Source, TokenSource, _original, loader
from .stats import DataStats


class Batch(Protocol):
    """What the feeder fills: train.Batch (the training batch the backends close over)."""

    data: torch.Tensor
    target: torch.Tensor


class TrainConfig(Protocol):
    """What the feeder reads of train.TrainConfig (data imports nothing of train)."""

    @property
    def model(self) -> str: ...
    @property
    def image_size(self) -> int: ...
    @property
    def num_classes(self) -> int: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def seq_len(self) -> int: ...
    @property
    def layout(self) -> Layout: ...
    @property
    def data(self) -> str: ...
    @property
    def data_workers(self) -> int: ...
    @property
    def data_prefetch(self) -> int: ...
    @property
    def data_stage(self) -> str: ...
    @property
    def data_seed(self) -> int: ...


def source_for(cfg: TrainConfig, replica: int, vocab: int | None) -> Source:
    """The replica's source, checked against the model (tokens need a transformer with
    a vocabulary at least the dataset's; images a CNN with more classes than any id)."""
    root = Path(cfg.data).absolute()
    kind = formats.kind_of(root)
    dp, seed = cfg.layout.dp, cfg.data_seed
    if kind == "tokens":
        if vocab is None:
            raise DataError(f"{root}: a token dataset trains a transformer model, not "
                            f"{cfg.model}; choose a gpt_* model or an image dataset")
        info = formats.read_tokens(root)
        if info.vocab_size > vocab:
            raise DataError(f"{root / 'meta.json'}: vocab_size {info.vocab_size} exceeds "
                            f"{cfg.model}'s {vocab}; choose a model with a larger "
                            "vocabulary or re-tokenise")
        sampler.check_windows(sampler.windows(info.tokens, cfg.seq_len), dp, info.train,
                              cfg.seq_len)
        return TokenSource(info, cfg.seq_len, replica, dp, seed)
    if vocab is not None:
        raise DataError(f"{root}: an image dataset trains a CNN, not {cfg.model}; choose "
                        "a CNN model or a token dataset")
    shards = formats.shard_files(root)
    own = sampler.assign_shards(shards, dp, seed)[replica]
    return ImageSource(tuple(own), {p.name: i for i, p in enumerate(shards)},
                       cfg.image_size, cfg.num_classes, seed)


class Feeder:
    """Fills the training batch with the next real batch; counts what it cost."""

    def __init__(self, source: Source, cfg: TrainConfig, batch: Batch, staged: stage.Staged,
                 rank: int, environ: Mapping[str, str], start_step: int = 0) -> None:
        pin = batch.data.device.type == "cuda"
        self._loader = loader(source, cfg.batch_size, cfg.data_workers, cfg.data_prefetch, pin,
                              start_step)
        self._it = iter(self._loader)
        self.batch, self.staged = batch, staged
        self.stats = DataStats(source.kind, str(Path(cfg.data).absolute()), cfg.data_workers,
                               cfg.data_stage, stage_s=staged.seconds,
                               stage_bytes=staged.nbytes)
        self._timed = False
        trace = environ.get(TRACE)
        self._trace: IO[str] | None = None
        if trace:
            Path(trace).mkdir(parents=True, exist_ok=True)
            self._trace = open(Path(trace) / f"rank{rank}.jsonl", "a")  # noqa: SIM115

    def start_timing(self) -> None:
        """The timed steps begin: the sums start from zero."""
        self._timed = True

    def load(self) -> None:
        """Copy the next batch into the training batch (the step's input wait)."""
        began = time.perf_counter()
        try:
            data, target, decode, nbytes, ids, epochs = next(self._it)
        except Exception as exc:
            original = _original(exc)
            if original is None:
                raise
            raise original from None
        waited = time.perf_counter() - began
        self.batch.data.copy_(data, non_blocking=True)
        self.batch.target.copy_(target.view(self.batch.target.shape), non_blocking=True)
        s = self.stats
        s.samples_seen += len(ids)
        s.epochs = max(s.epochs, int(epochs.max()) + 1)
        if self._timed:
            s.timed_steps += 1
            s.wait_s += waited
            s.decode_s += float(decode)
            s.bytes_read += int(nbytes)
        if self._trace is not None:
            self._trace.write(json.dumps({"ids": ids.tolist(), "epochs": epochs.tolist()})
                              + "\n")

    def close(self) -> None:
        """Stop the loader's workers and remove the staged copy."""
        if self._trace is not None:
            self._trace.close()
            self._trace = None
        del self._it
        self.staged.remove()


def open_feeder(cfg: TrainConfig, batch: Batch, rank: int, vocab: int | None,
                environ: Mapping[str, str] = os.environ, start_step: int = 0) -> Feeder:
    """The rank's feeder: the dataset checked, its files staged when asked; it starts at
    the batch of step `start_step` (a run resumed from a checkpoint)."""
    replica = cfg.layout.coordinates(rank)["dp"]
    source = source_for(cfg, replica, vocab)
    staged = stage.stage(source.files(), cfg.data_stage, rank, environ)
    try:
        return Feeder(source.relocated(staged.mapping), cfg, batch, staged, rank, environ,
                      start_step)
    except BaseException:
        staged.remove()
        raise


def model_vocab(model: torch.nn.Module) -> int | None:
    """A transformer's vocabulary size (None: a CNN)."""
    cfg = getattr(model, "cfg", None)
    return getattr(cfg, "vocab_size", None)
