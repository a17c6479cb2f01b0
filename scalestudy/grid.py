"""Study -> [Run]: the cross product of the grid axes, minus exclusions, times repeats.

Pure: no files, no processes. A run's id is a hash of everything that defines its
measurement (scale, batch, backend, the tuning variant's content, the workload,
the system, the repeat), so re-running a study finds the runs it already has, and
changing any of those gives new runs instead of mixing results.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from scalestudy.errors import ScalestudyError, SpecError
from scalestudy.spec import Study, walltime_seconds


@dataclass(frozen=True)
class Run:
    """One grid point x one repeat = one job."""

    run_id: str
    study: str
    system: str
    scaling: str
    nodes: int
    ranks_per_node: int
    world_size: int
    batch_size: int  # per GPU (per rank), whatever the scaling mode
    global_batch: int
    backend: str
    tuning: str
    repeat: int
    workload: str
    model: str | None
    image_size: int | None
    precision: str | None

    def params(self) -> dict[str, Any]:
        """The run's parameters as written to run.json and the tables."""
        return asdict(self)


def _run_id(study: Study, point: dict[str, Any], repeat: int) -> str:
    tuning = study.tuning.get(point["tuning"])
    identity = {
        "system": study.system,
        "workload": study.workload.model_dump(mode="json"),
        "tuning_settings": (
            tuning.model_dump(mode="json", exclude={"description"}) if tuning else {}
        ),
        "repeat": repeat,
        **point,
    }
    blob = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def _excluded(study: Study, point: dict[str, Any]) -> bool:
    return any(
        all(point.get(key) in values for key, values in rule.items()) for rule in study.exclude
    )


def expand(study: Study) -> list[Run]:
    """The study's runs in a stable order (grid axes in spec order, repeats innermost)."""
    g = study.grid
    workload = study.workload
    synthetic = workload.kind == "synthetic"
    runs: list[Run] = []
    for nodes, rpn, batch, backend, tuning in itertools.product(
        g.nodes, g.ranks_per_node, g.batch_size, g.backend, g.tuning
    ):
        world = nodes * rpn
        if study.scaling == "strong":
            if batch % world:
                if _excluded(study, _point(nodes, rpn, 0, batch, backend, tuning)):
                    continue
                line = study.line_of(("grid", "batch_size", g.batch_size.index(batch)))
                raise SpecError(
                    f"{line}: strong scaling splits the global batch {batch} over "
                    f"{world} ranks ({nodes} nodes x {rpn} ranks/node), which does not "
                    f"divide evenly: use a global batch divisible by {world}, or add "
                    f"`{{global_batch: {batch}, world_size: {world}}}` to `exclude`"
                )
            per_gpu, global_batch = batch // world, batch
        else:
            per_gpu, global_batch = batch, batch * world
        point = _point(nodes, rpn, per_gpu, global_batch, backend, tuning)
        if _excluded(study, point):
            continue
        for repeat in range(study.repeats):
            runs.append(Run(
                run_id=_run_id(study, point, repeat),
                study=study.name,
                system=study.system,
                scaling=study.scaling,
                repeat=repeat,
                workload=workload.kind,
                model=workload.model if synthetic else None,
                image_size=workload.image_size if synthetic else None,
                precision=workload.precision if synthetic else None,
                **point,
            ))
    if not runs:
        raise SpecError(
            f"{study.line_of(('exclude',))}: every grid point is excluded; "
            "loosen `exclude` or widen `grid`"
        )
    return runs


def _point(nodes: int, rpn: int, per_gpu: int, global_batch: int, backend: str,
           tuning: str) -> dict[str, Any]:
    return {
        "nodes": nodes, "ranks_per_node": rpn, "world_size": nodes * rpn,
        "batch_size": per_gpu, "global_batch": global_batch,
        "backend": backend, "tuning": tuning,
    }


def node_hours(study: Study, runs: Sequence[Run]) -> float:
    """Upper bound of the node-hours the runs can use: nodes x walltime, summed."""
    hours = walltime_seconds(study.job.walltime) / 3600
    return sum(r.nodes for r in runs) * hours


_CONDITION = re.compile(r"^\s*([a-z_]+)\s*(==|!=|<=|>=|=|<|>)\s*(.+?)\s*$")
FILTER_KEYS = ("run_id", "nodes", "ranks_per_node", "world_size", "batch_size",
               "global_batch", "backend", "tuning", "repeat")


def select(runs: Iterable[Run], expr: str | None) -> list[Run]:
    """Keep the runs matching `--only`: `key OP value` terms joined by `,` (all must hold).

    OP is one of = == != < <= > >=; `=`/`!=` take alternatives separated by `|`
    (`tuning=default|nccl`); `run_id` matches by prefix.
    """
    runs = list(runs)
    if not expr:
        return runs
    tests = [_parse_condition(term) for term in expr.split(",") if term.strip()]
    return [r for r in runs if all(test(r) for test in tests)]


def _parse_condition(term: str) -> Any:
    match = _CONDITION.match(term)
    if not match:
        raise ScalestudyError(
            f"--only: cannot read {term!r}; write terms like `nodes<=2,tuning=default` "
            f"with keys {', '.join(FILTER_KEYS)}"
        )
    key, op, raw = match.groups()
    if key not in FILTER_KEYS:
        raise ScalestudyError(f"--only: unknown key {key!r}; valid keys: {', '.join(FILTER_KEYS)}")
    numeric = key not in ("run_id", "backend", "tuning")
    values = raw.split("|")
    if numeric:
        try:
            nums = [int(v) for v in values]
        except ValueError:
            raise ScalestudyError(f"--only: {key} takes whole numbers, got {raw!r}") from None
    if op in ("<", "<=", ">", ">="):
        if not numeric or len(values) != 1:
            raise ScalestudyError(f"--only: {op} needs one number, as in `{key}{op}4`")
        bound = nums[0]
        compare = {"<": int.__lt__, "<=": int.__le__, ">": int.__gt__, ">=": int.__ge__}[op]
        return lambda r: compare(getattr(r, key), bound)
    negate = op == "!="
    if key == "run_id":
        return lambda r: any(r.run_id.startswith(v) for v in values) != negate
    wanted = set(nums) if numeric else set(values)
    return lambda r: (getattr(r, key) in wanted) != negate
