"""Rich tables for people (the `--json` forms are for machines)."""

from __future__ import annotations

from typing import Any

from rich.table import Table


def plan_table(summary: dict[str, Any]) -> Table:
    """The expanded runs of a study, with run count and node-hours in the caption; a
    column per grid axis over a training option (precision always), "-" where the
    option does not apply to the run's backend."""
    from scalestudy.workload.options import OPTIONS

    table = Table(title=f"{summary['study']}: {summary['scaling']} scaling on "
                  f"{summary['system']}", title_justify="left")
    runs = summary["runs"]
    axes = [o.name for o in OPTIONS if o.name != "precision"
            and any(o.name in r for r in runs)]
    columns = (("run id", "left"), ("nodes", "right"), ("ranks/node", "right"),
               ("world size", "right"), ("per-GPU batch", "right"), ("global batch", "right"),
               ("backend", "left"), ("tuning", "left"), ("precision", "left"),
               *((a, "left") for a in axes), ("repeat", "right"), ("state", "left"))
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for r in runs:
        table.add_row(r["run_id"], str(r["nodes"]), str(r["ranks_per_node"]),
                      str(r["world_size"]), str(r["batch_size"]), str(r["global_batch"]),
                      r["backend"], r["tuning"], r.get("precision") or "-",
                      *("-" if r.get(a) is None else str(r[a]) for a in axes),
                      str(r["repeat"]), r["state"])
    table.caption = (f"{summary['run_count']} runs, at most {summary['node_hours_max']:g} "
                     f"node-hours (nodes x walltime {summary['walltime']})")
    table.caption_justify = "left"
    return table


def scaling_rich_table(table: Any, study: str) -> Table:
    """The scaling table (a DataFrame from analyze.scaling_table) for the terminal."""
    out = Table(title=f"{study}: throughput (img/s over all ranks, median over repeats)",
                title_justify="left")
    comm = "comm_overhead" in table and table["comm_overhead"].notna().any()
    flags = "flags" in table and (table["flags"].fillna("") != "").any()
    for name in ("group", "GPUs", "nodes x ranks", "batch/GPU", "global batch",
                 "img/s (min-max)", "img/s per GPU", "speedup", "efficiency", "repeats",
                 *(["comm"] if comm else []), *(["flags"] if flags else [])):
        out.add_column(name, justify="left" if name in ("group", "flags") else "right",
                       no_wrap=name != "flags", overflow="fold")
    for row in table.itertuples(index=False):
        extra = [f"{row.comm_overhead:.1%}" if row.comm_overhead == row.comm_overhead
                 else "n/a"] if comm else []
        extra += [str(row.flags or "")] if flags else []
        out.add_row(
            str(row.group), str(row.world_size), f"{row.nodes} x {row.ranks_per_node}",
            str(row.batch_size), str(row.global_batch),
            f"{row.throughput_median:,.1f} ({row.throughput_min:,.1f}-{row.throughput_max:,.1f})",
            f"{row.throughput_per_gpu:,.1f}", f"{row.speedup:.2f}", f"{row.efficiency:.1%}",
            str(row.n_repeats), *extra,
        )
    if not len(table):
        out.caption = "no completed runs yet"
    return out


def status_table(study: str, rows: list[dict[str, Any]]) -> Table:
    """Each run's state (and job id, and why it failed)."""
    table = Table(title=f"{study}: run states", title_justify="left")
    for name in ("run id", "job id", "nodes x ranks", "batch/GPU", "tuning", "repeat", "state",
                 "reason"):
        table.add_column(name, no_wrap=name != "reason")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
        table.add_row(r["run_id"], r.get("job_id") or "", f"{r['nodes']} x {r['ranks_per_node']}",
                      str(r["batch_size"]), r["tuning"], str(r["repeat"]), r["state"],
                      r.get("reason") or "")
    table.caption = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    table.caption_justify = "left"
    return table


def text_table(title: str, headers: list[str], rows: list[list[str]],
               caption: str = "") -> Table:
    """Any table of text cells (the first column left-aligned, the rest right)."""
    table = Table(title=title, title_justify="left")
    for i, name in enumerate(headers):
        table.add_column(name, justify="left" if i == 0 else "right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    if caption:
        table.caption = caption
        table.caption_justify = "left"
    return table
