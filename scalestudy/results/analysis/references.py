"""References that gate: expected throughput or efficiency with tolerances (ReFrame
style), from the study's `references:` list and/or a separate YAML file.

A reference applies to every point of the scaling table whose parameters match its
`where:` (and whose system is its `system:`, when given). Each match passes when
value x (1 + lower) <= measured <= value x (1 + upper); a reference that matches no
measured point fails, so a CI check cannot pass on a run that never happened.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd
import yaml
from pydantic import ConfigDict, Field, ValidationError

from scalestudy.core.errors import Loc, SpecError, suggest, validation_messages, where
from scalestudy.core.load import yaml_lines
from scalestudy.core.spec import Reference
from scalestudy.core.specbase import Model
from scalestudy.results.analysis.efficiency import format_value

RESULT_COLUMNS: tuple[str, ...] = (
    "source", "metric", "where", "point", "global_batch", "value", "accepted", "measured",
    "deviation", "result",
)
#: Table column of each reference metric.
METRIC_COLUMN: dict[str, str] = {"throughput": "throughput_median", "efficiency": "efficiency"}
#: Columns a `where:` may name besides the study's group parameters.
POINT_KEYS: tuple[str, ...] = ("nodes", "ranks_per_node", "world_size", "batch_size",
                               "global_batch")
Locate = Callable[[Loc], str]


class ReferenceFile(Model):
    """A references YAML: `references: [...]` (a bare list is accepted too)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    references: list[Reference] = Field(description="reference values")


def load_references(path: Path) -> tuple[list[Reference], Locate]:
    """Read and validate a references file; (references, locator of their keys)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        data = yaml.safe_load(text)
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file (give the path of a references YAML)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: cannot read the references: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise SpecError(f"{path}{line}: not valid YAML: "
                        f"{getattr(exc, 'problem', None) or exc}") from None
    lines = yaml_lines(text)
    if isinstance(data, list):
        data = {"references": data}
        lines = {("references", *loc): n for loc, n in lines.items()}
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected `references:` with a list of references "
                        "(see docs/report.md)")
    try:
        refs = ReferenceFile.model_validate(data).references
    except ValidationError as exc:
        raise SpecError("\n".join(validation_messages(exc, ReferenceFile, path, lines))) from None
    return list(refs), lambda loc: where(path, loc, lines)


def _same(wanted: object, value: object) -> bool:
    if isinstance(wanted, bool) or isinstance(value, bool):
        return str(wanted).lower() == str(value).lower()
    if isinstance(wanted, (int, float)):
        if not isinstance(value, (numbers.Real, str)):
            return False
        try:
            return math.isclose(float(wanted), float(value))
        except ValueError:
            return False
    return format_value(value) == str(wanted)


def _accepted(ref: Reference) -> tuple[float, float]:
    low = ref.value * (1 + ref.lower)
    high = math.inf if ref.upper is None else ref.value * (1 + ref.upper)
    return low, high


def _fmt(metric: str, value: float) -> str:
    if not math.isfinite(value):
        return "∞"
    return f"{value:.1%}" if metric == "efficiency" else f"{value:,.1f}"


def check_references(refs: Sequence[Reference], table: pd.DataFrame, system: str,
                     locate: Locate, offset: int = 0) -> pd.DataFrame:
    """One row per (reference, matching point): measured value, accepted range, pass
    or fail; a reference with no matching point is one failing row."""
    cols = list(table.columns)
    keys = [*cols[1:cols.index("nodes")], *POINT_KEYS]  # group parameters, then shape
    rows = []
    for i, ref in enumerate(refs):
        loc: Loc = ("references", i + offset)
        for key in ref.where:
            if key not in keys:
                raise SpecError(f"{locate((*loc, 'where', key))}: unknown parameter "
                                f"({suggest(key, keys)}); a reference "
                                "matches points by the study's parameters")
        if ref.system is not None and ref.system != system:
            continue
        hit = pd.Series(True, index=table.index)
        for key, wanted in ref.where.items():
            hit &= table[key].map(lambda v, w=wanted: _same(w, v))
        low, high = _accepted(ref)
        accepted = f"{_fmt(ref.metric, low)} – {_fmt(ref.metric, high)}"
        cond = ", ".join(f"{k}={format_value(v)}" for k, v in ref.where.items()) or "every point"
        base = {"source": locate(loc), "metric": ref.metric, "where": cond,
                "value": ref.value, "accepted": accepted}
        matched = table[hit]
        if matched.empty:
            rows.append({**base, "point": "no measured point matches", "global_batch": None,
                         "measured": float("nan"), "deviation": float("nan"),
                         "result": "fail"})
            continue
        for r in matched.itertuples(index=False):
            measured = float(getattr(r, METRIC_COLUMN[ref.metric]))
            rows.append({**base, "point": f"{r.group}, {r.nodes} × {r.ranks_per_node}",
                         "global_batch": r.global_batch, "measured": measured,
                         "deviation": measured / ref.value - 1,
                         "result": "pass" if low <= measured <= high else "fail"})
    return pd.DataFrame(rows, columns=list(RESULT_COLUMNS))


def failed_lines(results: pd.DataFrame) -> list[str]:
    """One line per failing check, for stderr."""
    out = []
    for r in results[results["result"] == "fail"].itertuples(index=False):
        if math.isnan(r.measured):
            out.append(f"{r.source}: {r.metric} reference ({r.where}): no measured point "
                       "matches; run those points or fix `where:`")
        else:
            out.append(f"{r.source}: {r.metric} {_fmt(r.metric, r.measured)} at {r.point} "
                       f"(global batch {format_value(r.global_batch)}) is outside "
                       f"{r.accepted} (reference {_fmt(r.metric, r.value)})")
    return out
