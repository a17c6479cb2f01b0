"""A study spec from YAML: parse, validate, locate each key's line, cross-check; and the
JSON Schema editors read.

Every problem becomes one line `file:line: key.path: what is wrong (how to fix)` in a
SpecError; nothing here writes a file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from scalestudy.core.errors import Loc, SpecError, validation_messages, where
from scalestudy.core.spec import LR_FIELDS, Study
from scalestudy.core.workloads import DATA_KEYS
from scalestudy.workload.options import BY_NAME


def yaml_lines(text: str) -> dict[Loc, int]:
    """Map every key path in a YAML document to its 1-based line number."""
    lines: dict[Loc, int] = {}
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return lines

    def walk(node: yaml.Node, loc: Loc) -> None:
        lines[loc] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                # one name for the key's path: mypy reads `lines[(*loc, k)]` as 3.11's
                # `lines[*loc, k]`, which it refuses for Python 3.10
                here = (*loc, key.value)
                walk(value, here)
                lines[here] = key.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, (*loc, i))

    if root is not None:
        walk(root, ())
    return lines


def parse_study(text: str, source: str | Path = "<study>") -> Study:
    """YAML text -> Study, or SpecError with one line per problem."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(f"{source}{line}: not valid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise SpecError(
            f"{source}: the spec must be a YAML mapping with at least `name:` "
            f"(got {type(data).__name__}); see studies/example.yaml"
        )
    data = absolute_data(data, Path(source).parent if source != "<study>" else Path.cwd())
    lines = yaml_lines(text)
    unwritable = [f"{where(source, loc, lines)}: {msg}" for loc, msg in _bad_text(data)]
    if unwritable:
        raise SpecError("\n".join(unwritable))
    try:
        study = Study.model_validate(data)
    except ValidationError as exc:
        raise SpecError("\n".join(validation_messages(exc, Study, source, lines))) from None
    study.located(source, lines)
    problems = [f"{study.line_of(loc)}: {msg}" for loc, msg in _cross_checks(study)]
    if problems:
        raise SpecError("\n".join(problems))
    return study


def absolute_data(data: dict[str, Any], base: Path) -> dict[str, Any]:
    """The spec with its dataset paths (`workload.data` or its `path`, `grid.data`, a
    tuning variant's `options.data`) absolute: a relative one is relative to the spec's
    directory `base`, so the jobs (started elsewhere) find it. A copy; other values as
    they are (validation judges them)."""

    def absolute(value: object) -> object:
        if isinstance(value, str) and value and "\x00" not in value:
            return os.path.abspath(base / Path(value).expanduser())
        return value

    out = dict(data)
    workload = out.get("workload")
    if isinstance(workload, dict) and isinstance(workload.get("checkpoint"), dict) \
            and isinstance(workload["checkpoint"].get("path"), str):
        saved = workload["checkpoint"]
        workload = {**workload, "checkpoint": {**saved, "path": absolute(saved["path"])}}
        out["workload"] = workload
    if isinstance(workload, dict) and "data" in workload:
        given = workload["data"]
        given = ({**given, "path": absolute(given["path"])}
                 if isinstance(given, dict) and "path" in given else absolute(given))
        out["workload"] = {**workload, "data": given}
    grid = out.get("grid")
    if isinstance(grid, dict) and "data" in grid:
        axis = grid["data"]
        out["grid"] = {**grid, "data": [absolute(v) for v in axis]
                       if isinstance(axis, list) else absolute(axis)}
    tuning = out.get("tuning")
    if isinstance(tuning, dict):
        out["tuning"] = {
            name: {**v, "options": {**v["options"], "data": absolute(v["options"]["data"])}}
            if isinstance(v, dict) and isinstance(v.get("options"), dict)
            and "data" in v["options"] else v
            for name, v in tuning.items()}
    return out


def _bad_text(value: object, loc: Loc = ()) -> list[tuple[Loc, str]]:
    """Strings no file or script can hold: NUL bytes (a YAML "\\0" escape) and lone
    UTF-16 surrogates (a "\\ud800" escape), anywhere in the document."""
    if isinstance(value, str):
        if "\x00" in value:
            return [(loc, "contains a NUL character (\\0), which no script or file name can "
                          "hold: remove it")]
        if any("\ud800" <= ch <= "\udfff" for ch in value):
            return [(loc, "contains a lone surrogate (a \\uD800-\\uDFFF escape), "
                          "which is not text: write the character itself")]
        return []
    if isinstance(value, dict):
        out = []
        for key, item in value.items():
            out += _bad_text(key, loc) if isinstance(key, str) else []
            out += _bad_text(item, (*loc, key))
        return out
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in _bad_text(item, (*loc, i))]
    return []


def _cross_checks(study: Study) -> list[tuple[Loc, str]]:
    """Checks that span several keys, each with the key path where the fix goes."""
    problems: list[tuple[Loc, str]] = []
    known = {"default", *study.tuning}
    for i, name in enumerate(study.grid.tuning):
        if name not in known:
            problems.append((("grid", "tuning", i), (
                f"no tuning variant {name!r}; defined: {', '.join(sorted(known))} "
                "(add it under `tuning:` or fix the name)")))
    problems += _batch_checks(study)
    problems += _option_checks(study)
    problems += _checkpoint_checks(study)
    return problems


#: The backends whose runs save checkpoints (data parallel: tp = pp = 1).
CHECKPOINT_BACKENDS = ("ddp", "fsdp")


def _checkpoint_checks(study: Study) -> list[tuple[Loc, str]]:
    """workload.checkpoint with a backend or a layout the benchmark cannot checkpoint."""
    if getattr(study.workload, "checkpoint", None) is None:
        return []
    loc: Loc = ("workload", "checkpoint")
    others = [b for b in study.grid.backend if b not in CHECKPOINT_BACKENDS]
    if others:
        return [(loc, f"checkpoints are saved with the ddp and fsdp backends, not "
                 f"{', '.join(others)}: remove it from grid.backend or remove checkpoint")]
    axes = study.grid.option_axes()
    for name in ("tp", "pp"):
        values = [*(axes.get(name) or []), study.workload.option_values().get(name) or 1]
        if any(int(v or 1) > 1 for v in values):
            return [(loc, f"checkpoints are saved for data-parallel runs only: {name} > 1 "
                     "is set; remove checkpoint or the model parallelism")]
    return []


def _batch_checks(study: Study) -> list[tuple[Loc, str]]:
    """One meaning per key: `batch_size` is the per-GPU batch and `global_batch` the
    global one, in the grid as in `exclude`, `--only`, the tables and the record."""
    g = study.grid
    if study.scaling == "strong" and g.batch_size is not None:
        return [(("grid", "batch_size"), (
            "strong scaling holds the global batch fixed and splits it over the ranks: write "
            "the global batches as grid.global_batch (batch_size always means the per-GPU "
            "batch)"))]
    if study.scaling == "strong" and g.global_batch is None:
        return [(("grid",), "strong scaling needs grid.global_batch: the global batches to "
                           "split over the ranks, e.g. `global_batch: [256]`")]
    if study.scaling == "weak" and g.global_batch is not None:
        return [(("grid", "global_batch"), (
            "weak scaling holds the per-GPU batch fixed (the global batch grows with the "
            "ranks): write grid.batch_size, or set `scaling: strong`"))]
    return []


def _option_checks(study: Study) -> list[tuple[Loc, str]]:
    """Options that are set twice, or set where no backend of the grid reads them."""
    problems: list[tuple[Loc, str]] = []
    backends = study.grid.backend
    axes = study.grid.option_axes()
    set_by: list[tuple[Loc, str]] = [(("grid", name), name) for name in axes]
    # the workload's own settings that differ from their defaults (they change run ids)
    explicit = study.workload.model_fields_set
    set_by += [(("workload", name), name) for name, value in
               study.workload.option_values().items()
               if name in explicit and name not in axes and value != BY_NAME[name].default]
    for tname in study.grid.tuning:
        variant = study.tuning.get(tname)
        for name in variant.option_values() if variant else {}:
            loc: Loc = ("tuning", tname, "options", name)
            set_by.append((loc, name))
            if name in axes:
                problems.append((loc, (
                    f"{name} is also a grid axis (grid.{name}); set it in one place only")))
    for loc, name in set_by:
        option = BY_NAME[name]
        if not any(option.applies(b) for b in backends):
            problems.append((loc, (
                f"{name} applies to the {' and '.join(option.backends)} backend, which "
                f"grid.backend ({', '.join(backends)}) does not run: add the backend or "
                "remove the option")))
    if study.workload.placeholders() & set(LR_FIELDS) and study.workload.lr is None:
        problems.append((("workload", "command"), (
            "the command uses {lr}, {base_lr} or {lr_warmup_iters} but the workload "
            "has no `lr:` policy; add `lr: {base: 0.1, reference_batch: 256}`")))
    if not isinstance(study.workload.lr, (float, type(None))):  # a policy passes --lr
        setters: list[Loc] = [("grid", "lr")] if "lr" in axes else []
        setters += [("tuning", t, "options", "lr") for t, v in study.tuning.items()
                    if "lr" in v.option_values()]
        problems += [(loc, "workload.lr's policy sets the learning rate too: give "
                      "workload.lr as a number, or set lr in one place") for loc in setters]
    problems += study.target_problems()
    return problems


def load_study(path: str | Path) -> Study:
    """Read and validate a study file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file (give the path of a study YAML)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: cannot read the study: {exc}") from None
    return parse_study(text, path)


def study_schema() -> dict[str, Any]:
    """The JSON Schema of a study spec (for editors: `# yaml-language-server: $schema=`)."""
    schema = Study.model_json_schema()
    data = schema["$defs"]["SyntheticWorkload"]["properties"].get("data")
    if data is not None:  # also the mapping form (core.workloads.flatten_data)
        props = schema["$defs"]["SyntheticWorkload"]["properties"]
        keys = {k: {key: v for key, v in props[o].items() if key != "default"}
                for k, o in DATA_KEYS.items() if o in props}
        props["data"] = {"description": data.get("description", ""), "anyOf": [
            {k: v for k, v in data.items() if k != "description"},
            {"type": "object", "properties": keys, "required": ["path"],
             "additionalProperties": False}]}
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "scalestudy study spec"
    return schema
