"""Real datasets for the bundled benchmark: token files (nanoGPT/llm.c) and WebDataset
image shards, read rank by rank, timed (input wait, decode, bytes) and optionally staged.

Modules: formats (the on-disk formats), sampler (who reads which sample when), stage (the
copy to node-local storage), loader (the torch DataLoader and the feeder that fills the
training batch), stats (the record's keys). torch, the standard library and, for images
only, Pillow.
"""

from __future__ import annotations


class DataError(Exception):
    """A dataset problem: the message names the file, what is wrong and how to fix it;
    the workload prints `error: data: <message>` and exits with status 2."""
