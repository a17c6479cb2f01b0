"""Learnable datasets in the formats the bundled benchmark reads, for tests and examples
(`scalestudy dataset make`): nanoGPT-style tokens, WebDataset image shards. No download.

Tokens come from a first-order Markov chain over a small vocabulary whose transition
matrix is drawn from a seeded Dirichlet; its entropy rate (the best possible per-token
cross-entropy, in nats) goes into meta.json as `entropy_nats`. Images are noise with one
quadrant brighter than the others: the class is that quadrant (0 top-left, 1 top-right,
2 bottom-left, 3 bottom-right). Everything is written into a temporary directory beside
DIR and renamed into place at the end, so DIR is whole or absent.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

#: Classes of the image rule (the four quadrants).
IMAGE_CLASSES = 4
#: Markov chains run side by side while tokens are drawn (one numpy step moves all).
_CHAINS = 1024
#: The shortest chain (a junction between two chains is not a step of P).
_MIN_CHAIN = 4096
#: Dirichlet concentration of each transition row: small = peaked = learnable.
ALPHA = 0.1


def markov_chain(vocab: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(transition matrix P, its stationary distribution pi) of the seeded source."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(vocab, ALPHA), size=vocab)
    p = np.maximum(p, 1e-12)
    p /= p.sum(axis=1, keepdims=True)
    values, vectors = np.linalg.eig(p.T)
    pi = np.abs(np.real(vectors[:, np.argmin(np.abs(values - 1.0))]))
    return p, pi / pi.sum()


def entropy_rate(p: np.ndarray, pi: np.ndarray) -> float:
    """H = -sum_i pi_i sum_j P_ij ln P_ij: nats per token of the stationary chain."""
    return float(-(pi[:, None] * p * np.log(p)).sum())


def markov_tokens(p: np.ndarray, pi: np.ndarray, n: int, rng: np.random.Generator
                  ) -> np.ndarray:
    """`n` tokens: up to _CHAINS stationary chains of at least _MIN_CHAIN tokens drawn
    side by side, laid end to end (a chain's first token follows pi, not P: fewer than 1
    in _MIN_CHAIN tokens, which moves the best loss by less than 1e-3 nats)."""
    chains = max(1, min(_CHAINS, n // _MIN_CHAIN))
    length = -(-n // chains)
    cum = np.cumsum(p, axis=1)
    cum[:, -1] = 1.0
    out = np.empty((chains, length), dtype=np.int64)
    out[:, 0] = rng.choice(len(pi), size=chains, p=pi)
    for t in range(1, length):
        u = rng.random(chains)
        out[:, t] = (cum[out[:, t - 1]] < u[:, None]).sum(axis=1)
    return out.reshape(-1)[:n]


def write_tokens(directory: Path, n_tokens: int, vocab: int, seed: int) -> dict[str, object]:
    """train.bin (n_tokens), val.bin (a tenth, at least 1 Ki) and meta.json; the meta."""
    p, pi = markov_chain(vocab, seed)
    rng = np.random.default_rng(seed + 1)
    dtype = "uint16" if vocab <= 1 << 16 else "uint32"
    sizes = {"train": n_tokens, "val": max(1024, n_tokens // 10)}
    for split, n in sizes.items():
        markov_tokens(p, pi, n, rng).astype(f"<{'u2' if dtype == 'uint16' else 'u4'}").tofile(
            directory / f"{split}.bin")
    meta = {"vocab_size": vocab, "dtype": dtype, "n_tokens": sizes,
            "entropy_nats": round(entropy_rate(p, pi), 6),
            "source": f"first-order Markov chain over {vocab} tokens, Dirichlet({ALPHA}) "
                      f"transition rows, seed {seed} (scalestudy dataset make tokens)"}
    (directory / "meta.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return meta


def quadrant_image(label: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """An RGB uint8 image of noise whose quadrant `label` is the brightest."""
    image = rng.integers(0, 128, size=(size, size, 3), dtype=np.uint8)
    h = size // 2
    rows, cols = divmod(label, 2)
    image[rows * h:(rows + 1) * h, cols * h:(cols + 1) * h] += 96
    return image


def _encoder(fmt: str) -> Callable[[np.ndarray], bytes]:
    if fmt == "npy":
        def npy(image: np.ndarray) -> bytes:
            buffer = io.BytesIO()
            np.save(buffer, image)
            return buffer.getvalue()
        return npy
    from PIL import Image

    def png(image: np.ndarray) -> bytes:
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, format="PNG", compress_level=1)
        return buffer.getvalue()
    return png


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), 0, 0o644
    tar.addfile(info, io.BytesIO(data))


def write_images(directory: Path, n_images: int, image_size: int, shards: int, seed: int,
                 fmt: str = "png") -> dict[str, object]:
    """train-NNNNNN.tar (`shards` of them) and val-NNNNNN.tar (a tenth of the images, in
    at most `shards` shards), members KEY.png|KEY.npy beside KEY.cls (keys unique)."""
    rng = np.random.default_rng(seed)
    encode = _encoder(fmt)
    val = max(1, n_images // 10)
    splits = {"train": (n_images, shards), "val": (val, min(shards, val))}
    key = 0
    for split, (count, parts) in splits.items():
        per = -(-count // parts)
        for shard in range(parts):
            name = directory / f"{split}-{shard:06d}.tar"
            with tarfile.open(name, "w", format=tarfile.USTAR_FORMAT) as tar:
                for _ in range(min(per, count - shard * per)):
                    label = int(rng.integers(IMAGE_CLASSES))
                    _add(tar, f"{key:08d}.{fmt}", encode(quadrant_image(label, image_size, rng)))
                    _add(tar, f"{key:08d}.cls", str(label).encode("ascii"))
                    key += 1
    return {"images": splits["train"][0], "val_images": splits["val"][0], "shards": shards,
            "image_size": image_size, "format": fmt, "classes": IMAGE_CLASSES}


def write_atomic_dir(directory: Path, fill: Callable[[Path], dict[str, object]]
                     ) -> dict[str, object]:
    """`fill` a temporary directory beside `directory`, then rename it there (an empty
    `directory` is replaced); on any failure nothing is left behind."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        got = fill(temp)
        os.chmod(temp, 0o755)
        if directory.is_dir():
            directory.rmdir()  # empty: the caller refused a non-empty one
        temp.rename(directory)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return got
