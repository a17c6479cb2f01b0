"""Horovod's synthetic benchmarks (PyTorch, TensorFlow 1 and 2): `Total img/sec on N
GPU(s): X +-Y`, with the model and per-GPU batch the script prints first; lines may be
indented, carry Open MPI's `[1,0]<stdout>:` tag, and its `--timestamp-output` date."""

from __future__ import annotations

import re

from scalestudy.results.analysis import columns as col
from scalestudy.results.history.imports.common import (
    NUMBER,
    Imported,
    last_ctime,
    nccl_banner,
    num,
)

EXPECTED = "a line `Total img/sec on N GPU(s): X +-Y`"
#: What may stand before a line's text: indentation, Open MPI's ctime timestamp and its
#: rank tag (mpirun --timestamp-output --tag-output, or horovodrun's prefix).
_PREFIX = re.compile(r"^[ \t]*(?:\w{3} \w{3} +\d{1,2} \d\d:\d\d:\d\d \d{4})?"
                     r"(?:\[\d+,\d+\]<std(?:out|err)>:)?[ \t]*", re.M)
_TOTAL = re.compile(rf"Total (?P<unit>\w+)/sec on (?P<gpus>\d+) (?:GPU|CPU)\(s\):\s*"
                    rf"(?P<value>{NUMBER})\s*\+-\s*(?P<ci>{NUMBER})")


def read(text: str, gpus: int | None) -> list[Imported]:
    """The measurements of a Horovod synthetic benchmark's output."""
    ended = last_ctime(text)
    versions = nccl_banner(text)
    text = _PREFIX.sub("", text)
    model = re.search(r"^Model:\s*(\S+)", text, re.M)
    batch = re.search(r"^Batch size:\s*(\d+)", text, re.M)
    per_gpu = re.search(rf"(\w+)/sec per (?:GPU|CPU|device):\s*({NUMBER})\s*\+-\s*({NUMBER})",
                        text)
    iters = [num(v) for v in re.findall(rf"Iter #\d+:\s*({NUMBER})\s*\w+/sec per", text)]
    out = []
    for m in _TOTAL.finditer(text):
        world = int(m[col.GPUS])
        per_rank = int(batch.group(1)) if batch else None
        out.append(Imported(
            {"model": model.group(1) if model else None, "world_size": world,
             "batch_size": per_rank, "global_batch": per_rank * world if per_rank else None},
            num(m["value"]), f"{m['unit']}/s",
            {"ci": num(m["ci"]), "per_gpu": num(per_gpu.group(2)) if per_gpu else None,
             "per_gpu_ci": num(per_gpu.group(3)) if per_gpu else None,
             "iterations": len(iters), **versions},
            ended=ended))
    return out
