"""The `predict` use case: from measured points (a table, a study, or a stored study or
import) to forecasts at the scales asked, each with its interval and what it came from."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from scalestudy.core.errors import ScalestudyError

if TYPE_CHECKING:
    import pandas as pd

    from scalestudy.results.forecast import Forecast


def predict(source: str, *, gpus: list[int] | None = None, nodes: list[int] | None = None,
            group: str | None = None, level: float = 0.9,
            results: Path = Path("results"), system: str | None = None,
            model: str | None = None, store: str | None = None,
            record: bool = True) -> Forecast:
    """Forecast `source`'s throughput at `gpus` (or `nodes`, with its GPUs per node), and
    keep the forecasts in the store's ledger where the system is known (a study's, or a
    table's `system` and `model`), so that a later study of that system scores them."""
    from scalestudy.results.forecast import forecast

    if (gpus is None) == (nodes is None):
        raise ScalestudyError("give the scales to forecast: --gpus N,N... or --nodes N,N...")
    points, unit, per_node, name, where = _points(source, group, results)
    if where is None and system:  # a table: what it is, as the user says
        where = {"system": system, "point": {
            **({"model": model} if model else {}),
            **({"batch_size": int(points["per_gpu_batch"].dropna().iloc[0])}
               if "per_gpu_batch" in points and points["per_gpu_batch"].notna().any()
               else {})}}
    if nodes is not None:
        if not per_node:
            raise ScalestudyError(f"{source}: its points do not say their GPUs per node: "
                                  "ask with --gpus, or add a gpus_per_node column")
        gpus = [n * per_node for n in nodes]
    asked = sorted(set(gpus or []))
    if not asked or min(asked) < 1:
        raise ScalestudyError("--gpus/--nodes: give whole numbers above 0, e.g. 64,128")
    found = forecast(points, asked, level=level, gpus_per_node=per_node, unit=unit)
    found.model["source"] = name
    found.model["ledger"] = (_keep(found, where, name, store) if record and where else
                             "not kept: give --system (and --model) to keep a table's "
                             "forecasts for scoring" if where is None else "not kept")
    return found


def _keep(found: Forecast, where: dict[str, Any], name: str, store: str | None) -> str:
    """Put the forecasts in the ledger; what was done, in words."""
    from scalestudy.results.ledger import entries
    from scalestudy.results.store import Store

    rows = entries(found.predictions, system=str(where["system"]), source=name,
                   point=where["point"], model={k: v for k, v in found.model.items()
                                                if k != "ledger"})
    ledger = Store(store)
    try:
        ledger.put_forecasts(rows)
    finally:
        ledger.dispose()
    return (f"kept {len(rows)} forecast(s) for system {where['system']}: a later study "
            "that measures these scales scores them (`scalestudy history predictions`)")


def _points(source: str, group: str | None, results: Path
            ) -> tuple[pd.DataFrame, str, int | None, str, dict[str, Any] | None]:
    """(points, unit, GPUs per node, what they are, their system and point where known)
    of a table, a study or a stored study."""
    import pandas as pd

    from scalestudy.results.compare import load_side
    from scalestudy.results.forecast_table import read_table
    from scalestudy.results.ledger import POINT_COLUMNS, POINT_PARAMS

    if source.endswith(".csv"):
        frame, unit, per_node = read_table(Path(source))
        return frame, unit, per_node, f"table {source}", None
    side = load_side(Path(source) if not source.startswith("history:") else source,
                     results)  # type: ignore[arg-type]
    table = side.table
    if table.empty:
        raise ScalestudyError(f"{source}: no completed runs to forecast from")
    groups = list(dict.fromkeys(table["group"]))
    if group is None and len(groups) > 1:
        raise ScalestudyError(f"{source} has {len(groups)} groups ({'; '.join(groups)}): "
                              "name the one to forecast with --group")
    chosen = group if group is not None else groups[0]
    if chosen not in groups:
        raise ScalestudyError(f"--group {chosen!r}: {source}'s groups are "
                              f"{'; '.join(groups)}")
    rows = table[table["group"] == chosen]
    if side.scaling != "weak":
        raise ScalestudyError(f"{source} is a strong-scaling study: predict forecasts weak "
                              "scaling (the per-GPU batch held) for now")
    per_node = rows["ranks_per_node"].dropna().astype(int)
    points = pd.DataFrame({"gpus": rows["world_size"].astype(int),
                           "throughput": rows["throughput_median"].astype(float),
                           "per_gpu_batch": rows["batch_size"].astype(float),
                           "nodes": rows["nodes"].astype(int)})
    unit = str(rows["throughput_unit"].iloc[0]) if "throughput_unit" in rows else "img/s"
    first = rows.iloc[0]
    point = {k: int(first[k]) if k in ("batch_size", "image_size") else first[k]
             for k in (*POINT_COLUMNS, *POINT_PARAMS) if k in rows and pd.notna(first[k])}
    where = ({"system": str(first["system"]), "point": point}
             if "system" in rows and pd.notna(first["system"]) else None)
    return points, unit, int(per_node.max()) if len(per_node) else None, \
        f"{side.name}, {chosen}", where
