"""Datasets: `dataset make` (a learnable dataset for tests and examples) and the check of
a study's datasets before anything is submitted (`validate`, `plan`, `run`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from scalestudy.core.errors import ScalestudyError, SpecError
from scalestudy.core.grid import run_options
from scalestudy.site import datagen
from scalestudy.site.datasets import Need, problems, visible
from scalestudy.site.plan import Plan
from scalestudy.workload.names import is_transformer

#: `dataset make` defaults: train tokens, train images.
DEFAULT_SIZE = {"tokens": 1 << 20, "images": 1024}
#: The largest `--vocab`: its dense transition matrix and eigenvector stay small.
MAX_VOCAB = 1024


def make_dataset(kind: str, directory: Path, size: int | None = None, seed: int = 0,
                 vocab: int = 64, image_size: int = 64, shards: int = 8,
                 fmt: str = "png") -> dict[str, object]:
    """Write a `tokens` or `images` dataset into `directory` (absent or empty), whole or
    not at all; what was written (meta.json's content for tokens)."""
    directory = Path(directory)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise ScalestudyError(f"{directory}: exists and is not an empty directory; give a "
                              "new directory (dataset make never overwrites)")
    n = DEFAULT_SIZE[kind] if size is None else size
    if kind == "tokens":
        if not 2 <= vocab <= MAX_VOCAB:
            raise ScalestudyError(f"--vocab {vocab}: give 2 to {MAX_VOCAB} tokens (the "
                                  "source's transition matrix is vocab x vocab)")
        return {"kind": kind, "path": str(directory.absolute()), **datagen.write_atomic_dir(
            directory, lambda d: datagen.write_tokens(d, n, vocab, seed))}
    if shards < 1 or n < shards:
        raise ScalestudyError(f"--size {n} images in --shards {shards}: give at least one "
                              "image per shard")
    return {"kind": kind, "path": str(directory.absolute()), **datagen.write_atomic_dir(
        directory, lambda d: datagen.write_images(d, n, image_size, shards, seed, fmt))}


def data_needs(plan: Plan) -> dict[Path, Need]:
    """Each dataset the plan's runs read, with what the most demanding run asks of it."""
    workload = plan.study.workload
    if not workload.bundled:
        return {}
    tokens = is_transformer(str(getattr(workload, "model", "")))
    num_classes = int(getattr(workload, "num_classes", 1000))
    needs: dict[Path, Need] = {}
    for run in plan.runs:
        options = run_options(plan.study, run)
        path = str(options.get("data") or "")
        if not path:
            continue
        seq = int(options.get("seq_len") or 1024)
        held = needs.get(Path(path))
        needs[Path(path)] = Need(world=max(run.world_size, held.world if held else 0),
                                 tokens=tokens, num_classes=num_classes,
                                 seq_len=max(seq, held.seq_len if held else 0))
    return needs


def data_gate(plan: Plan, say: Callable[[str], None]) -> None:
    """Check every dataset the plan reads that is visible from here (a note for one that
    is not: a cluster path); SpecError (exit 2) with one line per problem."""
    found: list[str] = []
    for path, need in data_needs(plan).items():
        if plan.scheduler.queued and not visible(path):
            say(f"note: dataset {path} is not visible from this host: not checked here "
                "(the job checks it when it starts)")
            continue
        found += problems(path, need)
    if found:
        raise SpecError("\n".join(found))
