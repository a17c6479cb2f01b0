"""The `predict` use case: from measured points (a table, a study, or a stored study or
import) to forecasts at the scales asked, each with its interval and what it came from."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from scalestudy.core.errors import ScalestudyError

if TYPE_CHECKING:
    import pandas as pd

    from scalestudy.results.forecast import Forecast


def predict(source: str, *, gpus: list[int] | None = None, nodes: list[int] | None = None,
            group: str | None = None, level: float = 0.9,
            results: Path = Path("results")) -> Forecast:
    """Forecast `source`'s throughput at `gpus` (or `nodes`, with its GPUs per node)."""
    from scalestudy.results.forecast import forecast

    if (gpus is None) == (nodes is None):
        raise ScalestudyError("give the scales to forecast: --gpus N,N... or --nodes N,N...")
    points, unit, per_node, name = _points(source, group, results)
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
    return found


def _points(source: str, group: str | None, results: Path
            ) -> tuple[pd.DataFrame, str, int | None, str]:
    """(points, unit, GPUs per node, what they are) of a table, study or stored study."""
    import pandas as pd

    from scalestudy.results.compare import load_side
    from scalestudy.results.forecast_table import read_table

    if source.endswith(".csv"):
        frame, unit, per_node = read_table(Path(source))
        return frame, unit, per_node, f"table {source}"
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
    return points, unit, int(per_node.max()) if len(per_node) else None, \
        f"{side.name}, {chosen}"
