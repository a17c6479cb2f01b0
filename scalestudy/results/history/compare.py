"""Compare two studies (e.g. before/after an NCCL tuning change or a software upgrade):
the points both measured, aligned, with throughput and efficiency and B / A ratios.

Points are aligned on their shape (nodes, ranks per node, per-GPU and global batch)
and on the parameters both studies share, except those whose values differ entirely
between them: those are what is being compared (a tuning variant, a backend, the
study name) and are named in the output instead, with every setting the two specs set
differently (a workload option such as `bucket_cap_mb` too). Studies in different
units (img/s and tokens/s) are refused. Each side keeps its repeat band and count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from scalestudy.core.errors import ScalestudyError
from scalestudy.core.load import load_study
from scalestudy.core.spec import LEGACY_KEYS
from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.collect import read_runs
from scalestudy.results.analysis.efficiency import format_value, scaling_table, unit_of
from scalestudy.results.history.compare_side import is_stored, stored_runs
from scalestudy.results.history.provenance import read_env

SHAPE: tuple[str, ...] = ("nodes", "ranks_per_node", "world_size", "batch_size",
                          "global_batch")
COLUMNS: tuple[str, ...] = ("throughput_a", "throughput_b", "throughput_ratio",
                            "efficiency_a", "efficiency_b", "efficiency_ratio",
                            "node_hours_a", "node_hours_b", "node_hours_ratio",
                            "energy_kwh_a", "energy_kwh_b", "energy_ratio")
#: The repeat band of each side and whether the ratio is within it.
BAND: tuple[str, ...] = ("throughput_min_a", "throughput_max_a", "n_repeats_a",
                         "throughput_min_b", "throughput_max_b", "n_repeats_b", "within_band")
#: What one cost is of in a comparison: a million samples (as the report without `target:`).
PER = 1e6


@dataclass
class Side:
    """One study of a comparison: its name, where its runs are, its scaling table, and
    its spec's settings flattened (`workload.bucket_cap_mb`: value), defaults included."""

    name: str
    runs_csv: Path
    scaling: str
    table: pd.DataFrame
    settings: dict[str, str] = field(default_factory=dict)


#: Spec keys that name or describe a study rather than set how it measures.
NOT_SETTINGS = ("name", "description", "grid", "exclude", "repeats", "references")


def _flatten(value: object, prefix: str = "") -> dict[str, str]:
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for key, inner in value.items():
            out.update(_flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: format_value(value) if not isinstance(value, list) else
            ", ".join(format_value(v) for v in value)}


def spec_settings(spec: Path) -> dict[str, str]:
    """A spec's settings, flattened, with every default filled in ({} when it cannot be
    read: the comparison then names only what the runs' parameters show)."""
    try:
        study = load_study(spec)
    except (ScalestudyError, OSError):
        return {}
    data = study.model_dump(mode="json", exclude={"source"})
    return _one_form(_flatten({k: v for k, v in data.items() if k not in NOT_SETTINGS}))


def _one_form(settings: dict[str, str]) -> dict[str, str]:
    """Settings with a scheduler's option written the old way (`job.qos`) and the new
    (`job.slurm.qos`) under one name, the old one, so that a spec moved to the new form
    compares equal to its old self; an option whose sections disagree stays apart."""
    out = dict(settings)
    for key in LEGACY_KEYS:
        found = {k: v for k, v in settings.items()
                 if k.startswith("job.") and k.count(".") == 2 and k.endswith(f".{key}")}
        if len(set(found.values())) == 1 and settings.get(f"job.{key}") in (None, "none"):
            for k in found:
                del out[k]
            out[f"job.{key}"] = next(iter(found.values()))
    return out


def load_side(arg: Path | str, results: Path) -> Side:
    """A study spec (its results/<name>/runs.csv), a results directory, or a study in the
    results store (`history:NAME`, imported results too) -> Side."""
    if is_stored(arg):
        name, runs = stored_runs(arg)
        scaling = str(runs["scaling"].iloc[0]) if len(runs) else "weak"
        return Side(name, Path(str(arg)), scaling, scaling_table(runs, scaling), {})
    arg = Path(arg)
    if arg.is_dir():
        directory, spec = arg, arg / "study.yaml"
    elif arg.suffix in (".yaml", ".yml"):
        directory, spec = Path(results) / load_study(arg).name, arg
    else:
        raise ScalestudyError(f"{arg}: neither a study spec (.yaml) nor a results directory; "
                              "give a spec or results/<study>")
    csv = directory / "runs.csv"
    if not csv.is_file():
        raise ScalestudyError(f"{csv}: no runs.csv; run `scalestudy collect STUDY` (or "
                              "`report`) for that study first")
    runs = read_runs(csv)
    scaling = str(runs["scaling"].dropna().iloc[0]) if "scaling" in runs and runs[
        "scaling"].notna().any() else "weak"
    name = str(runs[col.STUDY].dropna().iloc[0]) if "study" in runs and runs[
        col.STUDY].notna().any() else directory.name
    settings = spec_settings(spec) if spec.is_file() else {}
    return Side(name, csv, scaling, scaling_table(runs, scaling),
                {**settings, **image_digests(directory)})


def image_digests(directory: Path) -> dict[str, str]:
    """`image LABEL`: the digest each container image of the study's runs had (from the
    jobs' env.txt; two sides that ran one image name with different contents differ)."""
    found: dict[str, set[str]] = {}
    for env in sorted(directory.glob("runs/*/env.txt")):
        values = read_env(env)
        label = values.get("SCALESTUDY_CONTAINER")
        if label:
            found.setdefault(f"image {label}", set()).add(
                values.get("SCALESTUDY_CONTAINER_DIGEST") or "not read")
    return {k: "/".join(sorted(v)) for k, v in found.items()}


def _params(table: pd.DataFrame) -> list[str]:
    cols = list(table.columns)
    return cols[1:cols.index("nodes")] if "nodes" in cols else []


def _as_text(table: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    out = table.copy()
    for c in cols:
        out[c] = out[c].map(format_value)
    return out


def align(a: Side, b: Side) -> tuple[pd.DataFrame, dict[str, tuple[str, str]]]:
    """(aligned frame, {parameter: (A's values, B's values)} of what differs)."""
    ua, ub = unit_of(a.table), unit_of(b.table)
    if ua != ub:
        raise ScalestudyError(
            f"{a.name} measures {ua} and {b.name} {ub}: a ratio of the two means nothing; "
            "compare two studies of the same unit (two image studies, or two transformer "
            "studies)")
    shared = [c for c in _params(a.table) if c in _params(b.table) and c != "study"]
    ta, tb = _as_text(a.table, [*shared, *SHAPE]), _as_text(b.table, [*shared, *SHAPE])
    differs = {c: (", ".join(sorted(set(ta[c]))), ", ".join(sorted(set(tb[c]))))
               for c in shared if not set(ta[c]) & set(tb[c])}
    for key in sorted(set(a.settings) | set(b.settings)):  # what the specs set differently
        va, vb = a.settings.get(key, "(not set)"), b.settings.get(key, "(not set)")
        if va != vb and key.split(".")[-1] not in differs and a.settings and b.settings:
            differs[key] = (va, vb)
    keys = [*SHAPE, *[c for c in shared if c not in differs]]
    for t in (ta, tb):  # the cost of a million samples at each point (results.analysis.cost's rule)
        rate = t[col.THROUGHPUT_MEDIAN] / (t[col.SEQ_LEN].astype(float) if "seq_len" in t
                                         else 1.0)
        t[col.NODE_HOURS] = t[col.NODES].astype(float) * PER / rate / 3600
        per_sample = t["energy_j_per_sample"] if "energy_j_per_sample" in t else float("nan")
        t[col.ENERGY_KWH] = per_sample * PER / 3.6e6
    keep = ["group", "throughput_median", "throughput_min", "throughput_max", "n_repeats",
            "efficiency", "node_hours", "energy_kwh"]
    unit = [c for c in ("throughput_unit",) if c in ta and c in tb]
    merged = ta[[*keys, *keep, *unit]].merge(tb[[*keys, *keep]], on=keys,
                                              suffixes=("_a", "_b"))
    merged = merged.rename(columns={"throughput_median_a": "throughput_a",
                                    "throughput_median_b": "throughput_b"})
    # B / A is within the noise when the two repeat bands overlap
    merged["within_band"] = ((merged["throughput_min_b"] <= merged["throughput_max_a"])
                             & (merged["throughput_min_a"] <= merged["throughput_max_b"]))
    merged["throughput_ratio"] = merged["throughput_b"] / merged["throughput_a"]
    merged["efficiency_ratio"] = merged["efficiency_b"] / merged["efficiency_a"]
    merged["node_hours_ratio"] = merged["node_hours_b"] / merged["node_hours_a"]
    merged["energy_ratio"] = merged["energy_kwh_b"] / merged["energy_kwh_a"]
    merged[col.WORLD_SIZE] = merged[col.WORLD_SIZE].astype(int)
    merged = merged.sort_values(["group_a", "world_size"], kind="stable")
    return merged[["group_a", "group_b", *keys, *COLUMNS, *BAND, *unit]].reset_index(
        drop=True), differs
