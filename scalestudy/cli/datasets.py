"""`scalestudy dataset make tokens|images DIR`: a learnable dataset in the formats the
bundled benchmark reads (for tests and examples; no download)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from scalestudy.cli.app import JsonOpt, app, out, print_json

dataset_app = typer.Typer(help="Datasets the bundled benchmark reads: tokens (train.bin, "
                          "val.bin, meta.json) and WebDataset image shards.",
                          no_args_is_help=True)
app.add_typer(dataset_app, name="dataset")


class Kind(str, Enum):
    tokens = "tokens"
    images = "images"


class ImageFormat(str, Enum):
    png = "png"
    npy = "npy"


@dataset_app.command("make")
def make(
    kind: Annotated[Kind, typer.Argument(help="tokens (nanoGPT .bin) or images "
                                              "(WebDataset shards)", show_default=False)],
    directory: Annotated[Path, typer.Argument(help="where to write it: a new or empty "
                                                   "directory", show_default=False)],
    size: Annotated[int | None, typer.Option(
        "--size", min=1, help="train tokens (default 1,048,576) or train images (default "
        "1024); val is a tenth")] = None,
    seed: Annotated[int, typer.Option("--seed", min=0, help="the random seed")] = 0,
    vocab: Annotated[int, typer.Option("--vocab", help="tokens: vocabulary size (2-1024)")] = 64,
    image_size: Annotated[int, typer.Option(
        "--image-size", min=2, max=8192, help="images: height and width (pixels)")] = 64,
    shards: Annotated[int, typer.Option(
        "--shards", min=1, help="images: train shards (at least the largest world size "
        "that reads them)")] = 8,
    fmt: Annotated[ImageFormat, typer.Option("--format", help="images: png or npy")
                   ] = ImageFormat.png,
    as_json: JsonOpt = False,
) -> None:
    """Write a learnable dataset: tokens from a Markov chain (its entropy, the best
    possible loss, in meta.json) or images whose class is their brightest quadrant."""
    from scalestudy.study.datasets import make_dataset

    got = make_dataset(kind.value, directory, size, seed, vocab, image_size, shards,
                       fmt.value)
    if as_json:
        print_json(got)
        return
    if kind is Kind.tokens:
        n = got["n_tokens"]
        assert isinstance(n, dict)
        out.print(f"{directory}: {n['train']:,} train and {n['val']:,} val tokens over a "
                  f"vocabulary of "
                  f"{got['vocab_size']}; best possible loss {got['entropy_nats']} nats "
                  "(meta.json)", highlight=False, markup=False)
    else:
        out.print(f"{directory}: {got['images']} train and {got['val_images']} val images "
                  f"({got['image_size']} px {got['format']}, {got['classes']} classes) in "
                  f"{got['shards']} train shard(s)", highlight=False, markup=False)
