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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields

from scalestudy.core.containers import label
from scalestudy.core.errors import ScalestudyError, SpecError
from scalestudy.core.spec import Study, walltime_seconds
from scalestudy.workload.options import BY_NAME, DEFAULTS, Value, applicable


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
    batch_size: int  # per GPU (per data-parallel replica under tp/pp), whatever the mode
    global_batch: int  # batch_size x dp
    backend: str
    tuning: str
    repeat: int
    workload: str
    model: str | None
    image_size: int | None
    precision: str | None
    # Grid axes over training options other than precision, as (name, value); None
    # where the option does not apply to this run's backend.
    axes: tuple[tuple[str, Value], ...] = ()
    # Data-parallel replicas: world_size / (tp x pp) (the world size without a split).
    dp: int | None = None
    # The container its ranks run in (core.containers label; `none`: bare beside
    # containerised runs); None: the study has no container (no such parameter).
    container: str | None = None

    def params(self) -> dict[str, Value]:
        """The run's parameters as written to run.json and the tables (axes as columns).
        Every field is a plain value, so no deep copy (asdict) is needed."""
        out = {name: getattr(self, name) for name in _PARAM_FIELDS}
        if self.container is None:
            del out["container"]
        out.update(self.axes)
        return out


#: Run's fields in their order, but the axes (which become columns of their own).
_PARAM_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Run) if f.name != "axes")


#: The per-GPU batch of a weak-scaling grid that names none.
DEFAULT_BATCH = 32


def job_name(study_name: str, run_id: str) -> str:
    """The name a run's job has on a scheduler: `<study>-<run id>`. The job script is
    rendered with it, and a restart after a crash finds an interrupted submission's job
    by it: both read it here."""
    return f"{study_name}-{run_id}"


def describe_run(study: Study, run: Run, short: bool = False) -> str:
    """A run in words, for job script headers and progress lines: its ranks, and for a
    transformer its dp x tp x pp layout and batch in sequences per data-parallel
    replica; its per-GPU batch otherwise; backend and tuning (`short`: for a progress
    bar)."""
    options = run_options(study, run)
    lm = study.workload.language_model
    tp, pp = (int(options.get("tp") or 1), int(options.get("pp") or 1)) if lm else (1, 1)
    dp = run.dp or run.world_size // (tp * pp)
    if short:
        return (f"{run.nodes}x{run.ranks_per_node} b{run.batch_size}"
                + (f" dp{dp} tp{tp} pp{pp}" if lm else "") + f" {run.backend}")
    shape = f"{run.nodes} node(s) x {run.ranks_per_node} rank(s)/node = {run.world_size} rank(s)"
    if lm:
        batch = (f"dp {dp} x tp {tp} x pp {pp}; batch {run.batch_size} sequences per "
                 f"data-parallel replica ({run.global_batch} global) of "
                 f"{options.get('seq_len')} tokens")
    else:
        batch = f"per-GPU batch {run.batch_size}, global batch {run.global_batch}"
    return f"{shape}; {batch}; backend {run.backend}, tuning {run.tuning}"


def run_options(study: Study, run: Run) -> dict[str, Value]:
    """The training options in effect for a run (those its backend reads): the
    workload's values, the tuning variant's overrides, then the run's grid axes (made once
    per combination of a study's runs: many runs share one)."""
    global _RUN_OPTIONS
    if _RUN_OPTIONS[0] is not study:
        _RUN_OPTIONS = (study, {})
    key = (run.backend, run.tuning, run.axes, run.precision)
    held = _RUN_OPTIONS[1].get(key)
    if held is None:
        held = _RUN_OPTIONS[1][key] = _options(study, run.backend, run.tuning, dict(run.axes),
                                               run.precision)
    return dict(held)


#: The last study's run options by (backend, tuning, axes, precision).
_RUN_OPTIONS: tuple[object, dict[tuple[object, ...], dict[str, Value]]] = (None, {})


#: The last workload and its option values (the spec models are frozen: they cannot change).
_BASE: tuple[object, dict[str, Value]] = (None, {})


def _base_values(study: Study) -> dict[str, Value]:
    """Every option's value from the workload, else its default (once per workload: a
    model_dump per run was a tenth of planning 10,000 runs)."""
    global _BASE
    workload = study.workload
    if _BASE[0] is not workload:
        base = workload.option_values()
        _BASE = (workload, {name: base.get(name, default) for name, default in DEFAULTS.items()})
    return _BASE[1]


def _options(study: Study, backend: str, tuning: str, axes: dict[str, Value],
             precision: str | None) -> dict[str, Value]:
    values = dict(_base_values(study))
    variant = study.tuning.get(tuning)
    if variant is not None:
        values.update(variant.option_values())
    values.update({k: v for k, v in axes.items() if v is not None})
    if precision is not None:
        values["precision"] = precision
    return applicable(values, backend)


def _dp(study: Study, backend: str, tuning: str, chosen: dict[str, Value], world: int,
        batch: int) -> int:
    """Data-parallel replicas of a point: world / (tp x pp) for a transformer split over
    ranks (core of workload.layout, checked here so `plan` refuses an impossible split),
    else the world size. SpecError says why a split cannot work."""
    asked = chosen.get("precision")
    precision = str(asked) if asked else _base_precision(study, tuning)
    o = _options(study, backend, tuning, chosen, precision)
    try:
        return study.workload.data_parallel(backend, world, batch, o)
    except ValueError as exc:
        where = ", ".join(f"{k} {v}" for k, v in chosen.items() if v is not None)
        raise SpecError(
            f"{study.line_of(('grid',))}: at {world} rank(s) with backend {backend}, tuning "
            f"{tuning}{', ' + where if where else ''}: {str(exc).replace('--', '')}; change "
            "the grid or add the point to `exclude`") from None


def lr_values(study: Study, run: Run) -> dict[str, float | None]:
    """{lr, base_lr, lr_warmup_iters} of the run's learning-rate policy ({} without one)."""
    policy = study.workload.lr
    if policy is None or isinstance(policy, float):  # a number is the option `lr`
        return {}
    return {"lr": policy.lr(run.global_batch), "base_lr": policy.base,
            "lr_warmup_iters": policy.warmup_iters}


def _run_ids(study: Study) -> Callable[[dict[str, Value], int], str]:
    """A run's id from its point and repeat: a hash of what the run measures. The parts
    every run of the study shares are dumped once (a 10,000-run grid dumps its workload
    once, not 10,000 times); the ids are those of earlier releases."""
    # Defaults left out: an option added later does not change existing runs' ids.
    shared: dict[str, object] = {
        "system": study.system_identity,
        "workload": study.workload.model_dump(mode="json", exclude_defaults=True)}
    tunings = {name: t.model_dump(mode="json", exclude={"description"}, exclude_defaults=True)
               for name, t in study.tuning.items()}
    # what a run trains to (after the point's keys, as it always was)
    target = (study.target.workload_args()
              if study.target is not None and study.target.measured else None)

    def run_id(point: dict[str, Value], repeat: int) -> str:
        identity: dict[str, object] = {
            **shared, "tuning_settings": tunings.get(str(point["tuning"]), {}),
            "repeat": repeat, **point}
        if target is not None:
            identity["target"] = target
        blob = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:10]

    return run_id


def _excluded(study: Study, point: dict[str, Value], used: set[int] | None = None) -> bool:
    """Whether an `exclude` rule matches the point (the rules that do are added to `used`)."""
    hits = [i for i, rule in enumerate(study.exclude)
            if all(point.get(key) in values for key, values in rule.items())]
    if used is not None:
        used.update(hits)
    return bool(hits)


def _order(value: object) -> tuple[int, float | str]:
    """Numbers in numeric order, then everything else as text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, value)
    return (1, str(value))


def _unused_rules(study: Study, used: set[int], points: list[dict[str, Value]]) -> None:
    """An exclude rule that matches no grid point is a mistake, never silent."""
    problems = []
    for i, rule in enumerate(study.exclude):
        if i in used:
            continue
        seen = {key: sorted({p.get(key) for p in points}, key=_order) for key in rule}
        problems.append(
            f"{study.line_of(('exclude', i))}: matches no grid point; the grid has "
            + "; ".join(f"{k} {', '.join(map(str, v))}" for k, v in seen.items())
            + " (batch_size is the per-GPU batch, global_batch the global one): fix the "
            "rule or remove it")
    if problems:
        raise SpecError("\n".join(problems))


def expand(study: Study, ranks_per_node: Sequence[int] | None = None) -> list[Run]:
    """The study's runs in a stable order (grid axes in spec order, repeats innermost);
    `ranks_per_node`: the axis resolved against the system (else the grid's, else [1])."""
    g = study.grid
    rpns = list(ranks_per_node or g.ranks_per_node or [1])
    recorded = study.workload.run_fields()
    runs: list[Run] = []
    axes = g.option_axes()
    seen: set[str] = set()
    used: set[int] = set()
    points: list[dict[str, Value]] = []
    strong = study.scaling == "strong"
    batches = (g.global_batch if strong else g.batch_size) or [DEFAULT_BATCH]
    boxes = [label(e) for e in study.container_entries()]
    run_id = _run_ids(study)
    for nodes, rpn, batch, backend, tuning, box, *axis_values in itertools.product(
        g.nodes, rpns, batches, g.backend, g.tuning, boxes, *axes.values()
    ):
        # An option the backend does not read is no axis for it: one run, value None.
        chosen: dict[str, Value] = {name: (value if BY_NAME[name].applies(backend) else None)
                                    for name, value in zip(axes, axis_values, strict=True)}
        if box is not None:  # keys of studies without containers stay as they were
            chosen = {"container": box, **chosen}
        key = json.dumps([nodes, rpn, batch, backend, tuning, chosen], sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        world = nodes * rpn
        if _excluded(study, {**_point(nodes, rpn, None, batch if strong else None, backend,
                                      tuning), **chosen}, used):
            points.append({**_point(nodes, rpn, None, batch if strong else None, backend,
                                    tuning), **chosen})
            continue  # excluded before its batch is split (it may not split)
        dp = _dp(study, backend, tuning, chosen, world, batch if not strong else 1)
        if strong:
            if batch % dp:
                line = study.line_of(("grid", "global_batch", batches.index(batch)))
                replicas = f"{dp} data-parallel replicas" if dp != world else f"{world} ranks"
                raise SpecError(
                    f"{line}: strong scaling splits the global batch {batch} over "
                    f"{replicas} ({nodes} nodes x {rpn} ranks/node), which does not "
                    f"divide evenly: use a global batch divisible by {dp}, or add "
                    f"`{{global_batch: {batch}, world_size: {world}}}` to `exclude`"
                )
            per_gpu, global_batch = batch // dp, batch
            if dp != world:  # the per-replica batch must still split into micro-batches
                _dp(study, backend, tuning, chosen, world, per_gpu)
        else:
            per_gpu, global_batch = batch, batch * dp
        point = {**_point(nodes, rpn, per_gpu, global_batch, backend, tuning), **chosen}
        points.append(point)
        if _excluded(study, point, used):
            continue
        chosen.pop("container", None)
        asked = chosen.pop("precision", None)
        precision = str(asked) if asked else _base_precision(study, tuning)
        for repeat in range(study.repeats):
            runs.append(Run(
                run_id=run_id(point, repeat),
                study=study.name,
                system=study.system,
                scaling=study.scaling,
                repeat=repeat,
                precision=precision,
                axes=tuple(chosen.items()),
                dp=dp,
                container=box,
                **recorded,
                nodes=nodes, ranks_per_node=rpn, world_size=world, batch_size=per_gpu,
                global_batch=global_batch, backend=backend, tuning=tuning,
            ))
    _unused_rules(study, used, points)
    if not runs:
        raise SpecError(
            f"{study.line_of(('exclude',))}: every grid point is excluded; "
            "loosen `exclude` or widen `grid`"
        )
    return runs


def _base_precision(study: Study, tuning: str) -> str | None:
    """The precision of a run without a precision axis (None for a `command` workload
    unless its tuning variant sets one)."""
    variant = study.tuning.get(tuning)
    override = variant.option_values().get("precision") if variant else None
    chosen = override or study.workload.option_values().get("precision")
    return str(chosen) if chosen else None


def _point(nodes: int, rpn: int, per_gpu: int | None, global_batch: int | None,
           backend: str, tuning: str) -> dict[str, Value]:
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
               "global_batch", "backend", "tuning", "repeat", "container", *BY_NAME)
_NUMERIC_KEYS = ("nodes", "ranks_per_node", "world_size", "batch_size", "global_batch", "repeat")


def _text(value: object) -> str:
    """An option value as `--only` spells it: true/false, 50, 50.0 -> "50"."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


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


def _parse_condition(term: str) -> Callable[[Run], bool]:
    match = _CONDITION.match(term)
    if not match:
        raise ScalestudyError(
            f"--only: cannot read {term!r}; write terms like `nodes<=2,tuning=default` "
            f"with keys {', '.join(FILTER_KEYS)}"
        )
    key, op, raw = match.groups()
    if key not in FILTER_KEYS:
        raise ScalestudyError(f"--only: unknown key {key!r}; valid keys: {', '.join(FILTER_KEYS)}")
    numeric = key in _NUMERIC_KEYS
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
    if numeric:
        return lambda r: (getattr(r, key) in set(nums)) != negate
    return lambda r: (_text(r.params().get(key)) in set(values)) != negate
