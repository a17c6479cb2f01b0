"""Rich tables for people (the `--json` forms are for machines)."""

from __future__ import annotations

from typing import Any

from rich.table import Table


def plan_table(summary: dict[str, Any]) -> Table:
    """The expanded runs of a study, with run count and node-hours in the caption."""
    table = Table(title=f"{summary['study']}: {summary['scaling']} scaling on "
                  f"{summary['system']}", title_justify="left")
    for name, justify in (("run id", "left"), ("nodes", "right"), ("ranks/node", "right"),
                          ("world size", "right"), ("per-GPU batch", "right"),
                          ("global batch", "right"), ("backend", "left"), ("tuning", "left"),
                          ("repeat", "right"), ("state", "left")):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for r in summary["runs"]:
        table.add_row(r["run_id"], str(r["nodes"]), str(r["ranks_per_node"]),
                      str(r["world_size"]), str(r["batch_size"]), str(r["global_batch"]),
                      r["backend"], r["tuning"], str(r["repeat"]), r["state"])
    table.caption = (f"{summary['run_count']} runs, at most {summary['node_hours_max']:g} "
                     f"node-hours (nodes x walltime {summary['walltime']})")
    table.caption_justify = "left"
    return table
