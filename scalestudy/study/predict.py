"""The `predict` use case: from measured points (a table, a study, or a stored study or
import) to forecasts at the scales asked, each with its interval and what it came from."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, TypedDict

from scalestudy.core.errors import ScalestudyError
from scalestudy.core.load import load_study
from scalestudy.core.values import JSONObject
from scalestudy.results.analysis import columns as col
from scalestudy.results.history.ledger import NO_MODEL, POINT_COLUMNS, POINT_PARAMS, entries
from scalestudy.site.profiles import load_system
from scalestudy.study.wall import WallAsk, wall_clock

if TYPE_CHECKING:
    import pandas as pd

    from scalestudy.results.analysis.forecast import Forecast, Prediction
    from scalestudy.results.analysis.forecast_records import ScaleCost
    from scalestudy.results.analysis.target_forecast import TargetForecast
    from scalestudy.site.profiles import SystemProfile


class _Where(TypedDict):
    """What a forecast is of, for the ledger: its system and point (model, batch, ...)."""

    system: str
    point: JSONObject


def predict(source: str, *, gpus: list[int] | None = None, nodes: list[int] | None = None,
            group: str | None = None, level: float = 0.9,
            results: Path = Path("results"), system: str | None = None,
            model: str | None = None, store: str | None = None,
            record: bool = True, beyond: bool = False) -> Forecast:
    """Forecast `source`'s throughput at `gpus` (or `nodes`, with its GPUs per node), and
    keep the forecasts in the store's ledger where the system is known (a study's, or a
    table's `system` and `model`), so that a later study of that system scores them. A
    study's group forecasts only where its report would (commmodel.prediction_verdict);
    a scale beyond what the forecast supports (forecast_limits.beyond: 8× the largest
    measured, the system's max_nodes) is refused, or with `beyond` flagged and not kept;
    one where a GPU would get under one sample (or micro-batch) always is."""
    from scalestudy.results.analysis.forecast import forecast
    from scalestudy.results.analysis.forecast_study import probe_of

    if (gpus is None) == (nodes is None):
        raise ScalestudyError("give the scales to forecast: --gpus N,N... or --nodes N,N...")
    found_in = _points(source, group, results)
    points, unit, per_node, name, where = found_in[:5]
    if where is None and system:  # a table: what it is, as the user says
        point: JSONObject = {"model": model} if model else {}
        if "per_gpu_batch" in points and points["per_gpu_batch"].notna().any():
            point["batch_size"] = int(points["per_gpu_batch"].dropna().iloc[0])
        where = {"system": system, "point": point}
    if nodes is not None:
        if not per_node:
            raise ScalestudyError(f"{source}: its points do not say their GPUs per node: "
                                  "ask with --gpus, or add a gpus_per_node column")
        gpus = [n * per_node for n in nodes]
    asked = sorted(set(gpus or []))
    if not asked or min(asked) < 1:
        raise ScalestudyError("--gpus/--nodes: give whole numbers above 0, e.g. 64,128")
    rows, spec, scaling = found_in[5:]
    if rows is not None:
        _as_the_report_would(source, rows, scaling)
    profile = _profile(str(where[col.SYSTEM])) if where else None
    per = per_node or (profile.gpus_per_node if profile else None)
    max_gpus = (profile.max_nodes * per if profile is not None and per else None)
    try:
        found = forecast(points, asked, level=level, gpus_per_node=per_node, unit=unit,
                         probe=probe_of(rows) if rows is not None else None,
                         max_gpus=max_gpus)
    except ScalestudyError as exc:
        raise ScalestudyError(f"{source}: {exc}") from None
    refused = [p for p in found.predictions if p.limit and (p.hard or not beyond)]
    if refused:
        most = max((p.gpus for p in found.predictions if not p.limit), default=None)
        raise ScalestudyError(
            f"{source}: no forecast at " + "; ".join(p.limit for p in refused)
            + (f" (the largest supported here: {most:,} GPUs)" if most else "")
            + ": ask fewer GPUs" + ("" if all(p.hard for p in refused) else
                                    ", or add --beyond to see them flagged as a rough "
                                    "guide (docs/forecast.md)"))
    found.model[col.SOURCE] = name
    if rows is not None:
        found.costs.extend(_costs(found, rows, spec))
    kept = [p for p in found.predictions if not p.limit]
    found.model["ledger"] = (
        _keep(found, kept, where, name, store) if record and where and kept else
        "not kept: give --system (and --model) to keep a table's forecasts for scoring"
        if where is None else "not kept" + (": every scale asked is beyond what the "
                                            "forecast supports" if not kept else ""))
    return found


def predict_to_target(source: str, batches: list[float], *, level: float = 0.9,
                      beyond: bool = False, wall: WallAsk | None = None) -> TargetForecast:
    """Forecast the samples (or epochs) to the target at `batches` global batches from a
    table of runs (global_batch, samples_to_target or epochs_to_target; seeds repeat a
    batch): target_forecast says how, target_table what the table holds; `beyond`: past
    8× the largest measured batch, flagged instead of refused. With `wall`, also the wall
    clock with checkpoints and failures at each batch (model["wall_clock"])."""
    from scalestudy.results.analysis.target_forecast import forecast_to_target
    from scalestudy.results.analysis.target_table import read_target_table

    if not source.endswith(".csv"):
        raise ScalestudyError(f"{source}: --to-target reads a CSV table (global_batch, "
                              "samples_to_target or epochs_to_target), one row per run")
    batch, value, unit = read_target_table(Path(source))
    try:
        found = forecast_to_target(batch, value, batches, level=level, unit=unit,
                                   beyond=beyond)
    except ScalestudyError as exc:
        raise ScalestudyError(f"{source}: {exc}") from None
    found.model["source"] = f"table {source}"
    if wall is not None:
        found.model["wall_clock"] = wall_clock(found, wall)
    return found


def _as_the_report_would(source: str, rows: pd.DataFrame, scaling: str) -> None:
    """Refuse a study group's forecast where its report withholds it (the same points
    and rules: at least two node counts, enough world sizes, a fit)."""
    from scalestudy.results.analysis.commmodel import model_study

    fits, _, _ = model_study(rows, scaling)
    withheld = str(fits["withheld"].iloc[0] or "") if len(fits) else ""
    if withheld:
        raise ScalestudyError(f"{source}: no forecast, as its report gives none: {withheld}")


def _profile(system: str) -> SystemProfile | None:
    """The loaded profile of `system` (its max_nodes, GPUs per node), or None where it
    names no profile this installation knows (a table's free label)."""
    try:
        return load_system(system)
    except ScalestudyError:
        return None


def _keep(found: Forecast, kept: list[Prediction], where: _Where, name: str,
          store: str | None) -> str:
    """Put the forecasts in the ledger (once: the same source, point and scale update
    one entry); what was done, in words."""
    from scalestudy.results.history.store import Store

    rows = entries(kept, system=str(where[col.SYSTEM]), source=name,
                   point=where["point"], model={k: v for k, v in found.model.items()
                                                if k != "ledger"})
    ledger = Store(store)
    try:
        changed = ledger.put_forecasts(rows)
    finally:
        ledger.dispose()
    held = f"{len(rows)} forecast(s) for system {where['system']} in the ledger"
    held = (f"kept {held} ({changed} new or updated)" if changed
            else f"already held: {held}, unchanged")
    if not where["point"].get("model"):
        return held + f"; {NO_MODEL}"
    return held + (": a later study that measures these scales scores them (`scalestudy "
                   "history predictions`)")


def keep_report_forecasts(system: str, study: str, table: pd.DataFrame,
                          preds: pd.DataFrame, unit: str, url: str | None = None) -> str:
    """Put the forecasts a report shows in the ledger (once: the same report drawn again
    adds nothing); one line saying what was kept, or why not (a store that cannot be
    written never fails a report)."""
    import sqlalchemy.exc

    from scalestudy.results.history.store import Store

    rows = []
    for group, shown in preds.groupby("group", sort=False):
        first = table[table[col.GROUP] == group].iloc[0]
        asked = [SimpleNamespace(gpus=int(r.world_size), throughput=float(
            r.throughput_predicted), low=float(r.low), high=float(r.high),
            level=float(r.level), unit=unit) for r in shown.itertuples(index=False)]
        rows += entries(asked, system=system, source=f"report {study}, {group}",
                        point=_point_of(first), model={"form": str(shown["forecast_model"]
                                                                   .iloc[0])})
    if not rows:
        return ""
    ledger = Store(url)
    try:
        kept = ledger.put_forecasts(rows, once=True)
    except (ScalestudyError, sqlalchemy.exc.SQLAlchemyError, OSError) as exc:
        return f"ledger: the report's forecasts not kept: {exc}"
    finally:
        ledger.dispose()
    return (f"ledger: {kept} new forecast(s) of {system} kept (`scalestudy history "
            "predictions` scores them once a later study measures those scales)"
            if kept else "")


def _costs(found: Forecast, rows: pd.DataFrame, spec: Path | None) -> list[ScaleCost]:
    """Time and node-hours of each forecast scale: to the study's target where its spec
    has one, else per million of the throughput's units; the interval's band with it."""
    import pandas as pd

    from scalestudy.results.analysis.cost import costs_of

    target = load_study(spec).cost_target if spec is not None and spec.is_file() else None
    first = rows.iloc[0]
    strong = rows[col.GLOBAL_BATCH].nunique() == 1 and rows[col.WORLD_SIZE].nunique() > 1 \
        and rows[col.BATCH_SIZE].nunique() > 1
    asked = [p for p in found.predictions if p.nodes]
    preds = pd.DataFrame([{
        "group": first[col.GROUP], "factor": p.extrapolation, "nodes": p.nodes,
        "world_size": p.gpus,
        "batch_size": (float(first[col.GLOBAL_BATCH]) / p.gpus if strong
                       else float(first[col.BATCH_SIZE])),
        "global_batch": (float(first[col.GLOBAL_BATCH]) if strong
                         else float(first[col.BATCH_SIZE]) * p.gpus),
        "throughput_predicted": p.throughput, "low": p.low, "high": p.high}
        for p in asked])
    if preds.empty:
        return []
    costs = costs_of(rows, target, preds)
    costs = costs[costs["predicted"].astype(bool)]
    return [{"gpus": int(c.world_size), "nodes": int(c.nodes), "time_s": float(c.time_s),
             "time_s_low": float(c.time_s_low), "time_s_high": float(c.time_s_high),
             "node_hours": float(c.node_hours), "node_hours_low": float(c.node_hours_low),
             "node_hours_high": float(c.node_hours_high),
             "of": "to the target" if target is not None else f"per million {c.unit}"}
            for c in costs.itertuples(index=False)]


def _point_of(first: pd.Series) -> JSONObject:
    """A ledger point (the work and the way it ran) from a scaling table's row."""
    import pandas as pd

    return {k: int(first[k]) if k in ("batch_size", "image_size") else first[k]
            for k in (*POINT_COLUMNS, *POINT_PARAMS) if k in first and pd.notna(first[k])}


def _points(source: str, group: str | None, results: Path
            ) -> tuple[pd.DataFrame, str, int | None, str, _Where | None,
                       pd.DataFrame | None, Path | None, str]:
    """(points, unit, GPUs per node, what they are, their system and point where known,
    the study group's scaling table and its spec where there are, its scaling) of a
    table, a study or a stored study."""
    import pandas as pd

    from scalestudy.results.analysis.forecast_study import study_points
    from scalestudy.results.analysis.forecast_table import read_table
    from scalestudy.results.history.compare import load_side

    if source.endswith(".csv"):
        frame, unit, per_node = read_table(Path(source))
        return frame, unit, per_node, f"table {source}", None, None, None, "weak"
    side = load_side(Path(source) if not source.startswith("history:") else source,
                     results)
    table = side.table
    if table.empty:
        raise ScalestudyError(f"{source}: no completed runs to forecast from")
    groups = list(dict.fromkeys(table[col.GROUP]))
    if group is None and len(groups) > 1:
        raise ScalestudyError(f"{source} has {len(groups)} groups ({'; '.join(groups)}): "
                              "name the one to forecast with --group")
    chosen = group if group is not None else groups[0]
    if chosen not in groups:
        raise ScalestudyError(f"--group {chosen!r}: {source}'s groups are "
                              f"{'; '.join(groups)}")
    rows = table[table[col.GROUP] == chosen]
    per_node = rows[col.RANKS_PER_NODE].dropna().astype(int)
    points, _ = study_points(rows, side.scaling)
    unit = str(rows[col.THROUGHPUT_UNIT].iloc[0]) if "throughput_unit" in rows else "img/s"
    first = rows.iloc[0]
    where: _Where | None = ({"system": str(first[col.SYSTEM]), "point": _point_of(first)}
             if "system" in rows and pd.notna(first[col.SYSTEM]) else None)
    path = Path(source)
    spec = (None if source.startswith("history:") else
            path if path.suffix in (".yaml", ".yml") else path / "study.yaml")
    return (points, unit, int(per_node.max()) if len(per_node) else None,
            f"{side.name}, {chosen}", where, rows, spec, side.scaling)
