"""Points over time, from the results store's rows: per campaign (one `run` of one study
directory; before campaigns were recorded, one attempt number), each scale's median
per-GPU throughput with its repeat band, the efficiency against the campaign's smallest
scale, and where the provenance changed between consecutive campaigns on one system
(`history plot` draws it). A series never joins systems or points of other work."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from scalestudy.results.analysis import columns as col
from scalestudy.results.history import rows as stored
from scalestudy.results.history.regression import provenance_changes, work_of
from scalestudy.results.history.rows import AttemptRow
from scalestudy.results.history.store import campaign_of

#: Columns of the timeline frame.
COLUMNS: tuple[str, ...] = ("group", "campaign", "when", "world_size", "per_gpu",
                            "per_gpu_min", "per_gpu_max", "efficiency", "repeats", "unit")


@dataclass(frozen=True)
class Change:
    """Provenance that changed between two consecutive campaigns, and when."""

    when: pd.Timestamp
    what: list[str]
    system: str = ""  # the system whose campaigns it is between

    def label(self, most: int = 2) -> str:
        """The first changes, e.g. `nccl 2.21.5 -> 2.23.4`, and how many more."""
        more = len(self.what) - most
        return "; ".join(self.what[:most]) + (f" (+{more} more)" if more > 0 else "")


def timeline(rows: Sequence[AttemptRow]) -> tuple[pd.DataFrame, list[Change]]:
    """The timeline of completed attempts, and the provenance changes along it."""
    done = [r for r in rows if r.get(col.STATE) == "completed" and r.get(col.THROUGHPUT_PER_GPU)
            and r.get(col.ENDED) is not None]
    if not done:
        return pd.DataFrame(columns=list(COLUMNS)), []
    frame = pd.DataFrame({
        "group": [series_label(r) for r in done],
        "campaign": [f"{r['study']} [{','.join(r.get('tags') or []) or 'untagged'}]"
                     for r in done],
        "key": [_campaign(r) for r in done],
        "when": pd.to_datetime([r[col.ENDED] for r in done], utc=True),
        "world_size": [stored.world_size(r) for r in done],
        "per_gpu": [stored.per_gpu(r) for r in done],
        "unit": [str(r.get(col.UNIT) or "img/s") for r in done],
    })
    points = (frame.groupby(["group", "key", "world_size"], sort=False)
              .agg(campaign=("campaign", "first"), when=("when", "median"),
                   per_gpu=("per_gpu", "median"), per_gpu_min=("per_gpu", "min"),
                   per_gpu_max=("per_gpu", "max"), repeats=("per_gpu", "size"),
                   unit=("unit", "first"))
              .reset_index())
    base = points.groupby(["group", "key"])[col.WORLD_SIZE].transform("min")
    smallest = points[points[col.WORLD_SIZE] == base].set_index(["group", "key"])["per_gpu"]
    # against the campaign's smallest scale; a campaign that measured one scale of more
    # than one GPU (a published 2-GPU figure) has nothing to compare with: unknown
    scales = points.groupby(["group", "key"])[col.WORLD_SIZE].transform("nunique")
    points[col.EFFICIENCY] = [row.per_gpu / smallest[(row.group, row.key)]
                            if count > 1 or row.world_size == 1 else float("nan")
                            for row, count in zip(points.itertuples(), scales, strict=True)]
    by_key: dict[Any, list[AttemptRow]] = {}
    for r in done:
        by_key.setdefault(_campaign(r), []).append(r)
    changes = []
    for system in dict.fromkeys(str(r.get(col.SYSTEM)) for r in done):
        mine = points[points["key"].map(lambda k, s=system: str(by_key[k][0].get(col.SYSTEM))
                                        == s)]
        campaigns = mine.groupby("key", sort=False)["when"].min().sort_values()
        for before, after in itertools.pairwise(campaigns.index):
            what = provenance_changes(by_key[after], by_key[before])
            if what:
                changes.append(Change(campaigns[after], what, system))
    out = points.drop(columns=["key"]).sort_values(["group", "world_size", "when"])
    return out[list(COLUMNS)].reset_index(drop=True), changes


def _campaign(row: AttemptRow) -> tuple[object, ...]:
    """One campaign's key: its study directory and campaign id (its attempt number for
    attempts stored before campaigns were)."""
    return (row[col.DIRECTORY], campaign_of(row))


def series_label(row: AttemptRow) -> str:
    """The point's group: its system, model, per-GPU batch, backend, tuning and the rest
    of its work (not its scale); an import: its system, model and source format."""
    system = row.get(col.SYSTEM) or "?"
    if (row.get(col.SOURCE) or "scalestudy") != "scalestudy":
        return f"{system}: {row.get('model')} ({row.get('source')})"
    work = " ".join(f"{k} {v}" for k, v in sorted(work_of(row).items())
                    if k not in ("system", "workload"))
    return (f"{system}: {row.get('model')} batch {row.get('batch_size')} "
            f"{row.get('backend')}/{row.get('tuning')}" + (f" {work}" if work else ""))
