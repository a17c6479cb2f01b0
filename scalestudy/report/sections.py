"""The report's Cost, Parallelism and time-to-target sections: blocks, sentences, tables.

Cost (results.analysis.cost): time to solution, node-hours, GPU-hours and energy per point, the
Pareto front of time against node-hours, and the points a deadline or a budget picks.
Parallelism (results.analysis.parallelism): tokens/s, model TFLOP/s and MFU per point of a
transformer study, what each factorisation sends and idles, and which is fastest.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from scalestudy.core.target import Target
from scalestudy.report.page import Block, Heading, Image, Items, Link, Note, Para, Table
from scalestudy.report.tables import Cells, num, pct
from scalestudy.results.analysis import columns as col
from scalestudy.results.analysis.cost import hours, node_hours_text, point_name
from scalestudy.results.analysis.efficiency import format_value, unit_of
from scalestudy.results.analysis.parallelism import factorisation_findings, layout_label, why
from scalestudy.results.analysis.quality import IMPLAUSIBLE
from scalestudy.results.analysis.waits import Wait
from scalestudy.results.history.nodes import MIN_SLOWER, Z


def front_sentences(costs: pd.DataFrame) -> list[str]:
    """One front across every alternative that does the same work (any batch, backend,
    tuning or layout), walked from the cheapest point: what each faster point saves and
    what it costs more, and which points are dominated."""
    out = []
    for work, rows in costs.groupby("work", sort=False):
        front = rows[rows[col.PARETO]].sort_values("node_hours")
        left_out = rows[rows["doubt"].map(lambda d: any(c in str(d) for c in IMPLAUSIBLE))]
        several = rows[col.GROUP].nunique() > 1

        def name(row: pd.Series, several: bool = several) -> str:
            label = point_name(row) + (f" ({row['group']})" if several else "")
            once = "measured-once" in str(row["doubt"])
            return label + (" (predicted)" if row["predicted"] else "") + (
                " (measured once: not a conclusion)" if once else "")

        doubts = [f"{point_name(r)}" + (f" ({r['group']})" if several else "")
                  + f" is left out of the front: {_why_doubted(str(r['doubt']))}"
                  for _, r in left_out.iterrows()]
        if front.empty:
            out += [d[0].upper() + d[1:] + "." for d in doubts]
            continue

        first = front.iloc[0]
        parts = [f"{name(first)} finishes in {hours(first['time_s'])} for "
                 f"{node_hours_text(first['node_hours'])}"]
        previous = first
        for _, row in front.iloc[1:].iterrows():
            parts.append(f"{name(row)} saves {hours(previous['time_s'] - row['time_s'])} for "
                         f"{row['node_hours'] - previous['node_hours']:,.3g} more node-hours")
            previous = row
        dominated = rows[~rows[col.PARETO] & ~rows.index.isin(left_out.index)]
        if len(dominated):
            names = ", ".join(name(r) for _, r in dominated.iterrows())
            parts.append(f"{names} {'is' if len(dominated) == 1 else 'are'} dominated "
                         "(another point is both faster and cheaper)")
        energy = rows.dropna(subset=[col.ENERGY_KWH])
        if len(energy):
            low = energy.loc[energy[col.ENERGY_KWH].idxmin()]
            parts.append(f"the least energy is {low['energy_kwh']:,.3g} kWh at {name(low)}")
        head = (f"One front across the {rows['group'].nunique()} groups"
                + (f" of {work}" if work else "") + ": ") if several else (
            f"{rows['group'].iloc[0]}: ")
        out.append(head + "; ".join([*parts, *doubts]) + ".")
    return out


def _why_doubted(codes: str) -> str:
    """Why a point decides no front, in words."""
    words = {"superlinear": "its efficiency is above 100 % (implausible: check the "
                            "baseline point and the repeats)",
             "negative-comm": "its comm overhead is negative (timing noise larger than "
                              "what it measures)"}
    return " and ".join(words[c] for c in codes.split(",") if c in words)


def cost_cells(costs: pd.DataFrame) -> Cells:
    """The cost table as text cells."""
    energy = costs[col.ENERGY_KWH].notna().any() if len(costs) else False
    units = "tokens" if len(costs) and (costs[col.UNIT] == "tokens").any() else "samples"
    waits = "queue_wait_s" in costs and costs[col.QUEUE_WAIT_S].notna().any()
    headers = ["group", "nodes", "GPUs", "global batch", units, "time [band]",
               *(["queue wait"] if waits else []),
               "node-hours [band]", "GPU-hours", *(["energy kWh"] if energy else []),
               "front", "group's front"]
    rows = []
    for r in costs.itertuples(index=False):
        wait = getattr(r, "queue_wait_s", math.nan)
        front = ("predicted, " if r.predicted else "") + (
            "on the front" if r.pareto else
            f"left out ({r.doubt})" if any(c in str(r.doubt) for c in IMPLAUSIBLE)
            else "dominated")
        rows.append([str(r.group), str(r.nodes), str(r.world_size),
                     format_value(r.global_batch), f"{r.units:,.0f}",
                     f"{hours(r.time_s)} [{hours(r.time_s_low)}–{hours(r.time_s_high)}]",
                     *([hours(wait) if math.isfinite(wait) else "not known"]
                       if waits else []),
                     f"{r.node_hours:,.3g} [{r.node_hours_low:,.3g}–{r.node_hours_high:,.3g}]",
                     f"{r.gpu_hours:,.3g}",
                     *([f"{r.energy_kwh:,.3g}" if math.isfinite(r.energy_kwh) else "n/a"]
                       if energy else []), front, "yes" if r.pareto_group else "no"])
    return headers, rows


def energy_note(runs: pd.DataFrame, costs: pd.DataFrame) -> str:
    """Where energy comes from, or why the study has none."""
    if len(costs) and costs[col.ENERGY_KWH].notna().any():
        sources = sorted({str(s) for s in costs["energy_source"].dropna()})
        return ("Energy is measured (" + "; ".join(sources) + ") and priced over the time to "
                "solution; points without a measurement show n/a.")
    why_not = sorted({str(w) for w in runs.get("energy_unavailable", pd.Series(dtype=str))
                      .dropna()}) if "energy_unavailable" in runs else []
    reason = "; ".join(why_not) if why_not else "no run recorded an energy measurement"
    return (f"No energy: {reason}. Energy is measured, never estimated: NVML's counter on "
            "NVIDIA GPUs, or the scheduler's energy accounting (Slurm's ConsumedEnergy).")


def cost_blocks(costs: pd.DataFrame, runs: pd.DataFrame, target: Target | None,
                picks: Sequence[str], waits: Sequence[Wait] = ()) -> list[Block]:
    """The Cost section."""
    units = "tokens" if len(costs) and (costs[col.UNIT] == "tokens").any() else "samples"
    what = (f"one training run to the target: {target.describe()}" if target is not None
            else f"a million {units} (add `target:` to the spec to price one training run)")
    blocks: list[Block] = [Heading("Cost"), Note(
        f"Priced per {what}. Time = samples / measured throughput (median; [band] = the "
        "fastest and slowest repeat); node-hours = nodes × time; GPU-hours = GPUs × time. "
        "A point is on the front when no alternative that does the same work (the same "
        "model and input, in any group: another batch size, backend, tuning variant or "
        "layout) is both faster and cheaper; the time includes the target's extra epochs "
        "at a larger global batch. \"group's front\" says whether it is on its own "
        "group's front (the plot's thin lines). Predictions (marked) come from the "
        "communication model, only where it qualifies.")]
    if costs.empty:
        return [*blocks, Para("No point could be priced (no completed runs, or global "
                               "batches outside the target's table).")]
    known = [w for w in waits if w.seconds is not None]
    blocks += [Items([*picks, *front_sentences(costs)]), Table.of(cost_cells(costs)),
               *([Note("Queue wait: the expected wait of a job of that many nodes, "
                       "counted in a deadline's pick (time to result = wait + run): "
                       + "; ".join(f"{w.nodes} node(s): {w.source}" for w in known) + ".")]
                 if known else []),
               Note(energy_note(runs, costs)),
               Image("cost.png", "Time to solution vs node-hours")]
    return blocks


def not_measured_blocks(points: Sequence[dict[str, object]]) -> list[Block]:
    """An adaptive study's section: each point it did not measure, and the evidence."""
    if not points:
        return []
    from scalestudy.results.analysis.adaptive import RULE

    rows = [[str(p["alternative"]), str(p[col.NODES]),
             node_hours_text(float(str(p[col.NODE_HOURS]))), str(p["why"])] for p in points]
    return [Heading("What was not measured, and why", 3),
            Note(f"An adaptive study (run --adaptive). {RULE} Node-hours: what the point's "
                 "runs could have used (nodes x walltime)."),
            Table(["alternative", "nodes", "node-hours saved", "why"], rows)]


def straggler_blocks(found: dict[str, Any]) -> list[Block]:
    """The study's own slow nodes (results.history.nodes), when any of its runs could tell."""
    if not found or not found.get("testable_runs"):
        return []

    slow = found["slow"]
    lines: list[str | Link] = [
        f"{n['host']} is {n['slower']:.1%} slower [{n['low']:.1%}, {n['high']:.1%}] than "
        f"its runs' other nodes in {n['where']}, over {n['runs']} run(s): `scalestudy "
        "history nodes --write-exclude FILE`, then `run --exclude-nodes FILE`" for n in slow]
    if not slow:
        lines = [f"None: {found['hosts']} node(s) over {found['testable_runs']} run(s), "
                 "none slower beyond the noise."]
    lines += [f"Untestable: {count} run(s): {why}." for why, count in
              found.get("untestable", {}).items()]
    return [Heading("Stragglers", 3),
            Note(f"Each rank's compute-only step time against its run's other nodes; a node "
                 f"is named at {Z:g} standard errors and {MIN_SLOWER:.0%} slower, the noise "
                 "pooled over the study's runs (docs/gate.md, history nodes)."),
            Items(lines)]


def _span(values: pd.Series) -> str:
    low, high = float(values.min()), float(values.max())
    return f"{low:.3g}" if math.isclose(low, high) else f"{low:.3g}–{high:.3g}"


def parallelism_blocks(table: pd.DataFrame) -> list[Block]:
    """The Parallelism section of a transformer study (nothing for other models)."""
    if table.empty or ("mfu" not in table and "tokens_per_s_per_gpu" not in table):
        return []
    rows = table.dropna(subset=["tokens_per_s_per_gpu"]) if "tokens_per_s_per_gpu" in table \
        else table[:0]
    if rows.empty:
        return []
    unit = unit_of(table)
    headers = ["layout", "GPUs", "global batch", unit, f"per-GPU {unit}",
               "model TFLOP/s per GPU", "MFU", "what it pays"]
    cells = []
    for _, r in rows.iterrows():
        mfu = r.get(col.MFU)
        cells.append([layout_label(r), str(int(r[col.WORLD_SIZE])),
                      format_value(r[col.GLOBAL_BATCH]), num(r[col.THROUGHPUT_MEDIAN]),
                      num(r["tokens_per_s_per_gpu"]), f"{r.get('model_tflops_per_gpu'):.3g}"
                      if pd.notna(r.get("model_tflops_per_gpu")) else "n/a",
                      pct(mfu) if pd.notna(mfu) else "n/a", why(r)])
    peak = rows[col.PEAK_TFLOPS].dropna() if "peak_tflops" in rows else pd.Series(dtype=float)
    seq = rows[col.SEQ_LEN].dropna() if "seq_len" in rows else pd.Series(dtype=float)
    share = (rows["attention_flops_share"].dropna() if "attention_flops_share" in rows
             else pd.Series(dtype=float))
    note = ("MFU = achieved model TFLOP/s per GPU / one peak per GPU for the whole study, "
            "the system's accelerator in the run's precision (the site profile's, with its "
            "source; `measure`: a large matmul timed on the rank's device, and where runs "
            "measured different peaks, the highest of them for every run). Model FLOPs per "
            "token = 6N + 12·L·H·Q·T (PaLM, appendix B), recomputation not counted; "
            "attention is counted in full, as PaLM and torchtitan do, although a causal "
            "kernel does about half of it"
            + (f" (attention is {_span(share * 100)} % of the counted FLOPs here)"
               if len(share) else "") + "."
            + (f" Sequence length {_span(seq)}." if len(seq) else "")
            + (f" Peak per GPU: {_span(peak)} TFLOP/s"
               + (f" ({rows['peak_source'].dropna().iloc[0]})"
                  if "peak_source" in rows and rows["peak_source"].notna().any() else "")
               + "." if len(peak) else " No peak was given: MFU is n/a."))
    return [Heading("Parallelism"), Note(note),
            Items(factorisation_findings(rows, unit) or [
                "Each scale has one factorisation: nothing to compare."]),
            Table(headers, cells)]


def container_blocks(costs: pd.DataFrame, unit: str) -> list[Block]:
    """What the container costs: each containerised point beside the same point bare."""
    if costs.empty:
        return []

    def band(r: pd.Series, side: str) -> str:
        return (f"{num(r[f'throughput_{side}'])} [{num(r[f'throughput_{side}_min'])}, "
                f"{num(r[f'throughput_{side}_max'])}] ({int(r[f'n_repeats_{side}'])})")

    def seconds(value: float, digits: int = 3) -> str:
        return f"{value:.{digits}g} s" if pd.notna(value) else "n/a"

    rows = [[str(r["container"]), f"{r['point']}, {int(r['nodes'])} node(s)",
             band(r, "bare"), band(r, "container"), f"{r['throughput_change']:+.1%}",
             f"{seconds(r['step_time_bare'])} / {seconds(r['step_time_container'])}",
             f"{seconds(r['startup_bare'])} / {seconds(r['startup_container'])}",
             str(r["verdict"])] for _, r in costs.iterrows()]
    return [Heading("What the container costs", 3),
            Note(f"Each point run in a container beside the same point run bare: {unit} "
                 "over all GPUs, median [min, max] (repeats); the step time is the "
                 "diagnostics' median; start-up is the job's launch line to the last "
                 "rank's first step. A difference counts only where the repeat bands do "
                 "not overlap."),
            Table(["container", "point", f"bare {unit}", f"container {unit}", "change",
                   "step time bare / container", "start-up bare / container", "verdict"],
                  rows)]


def to_target_blocks(points: pd.DataFrame, front: pd.DataFrame | None = None,
                     picks: Sequence[str] = ()) -> list[Block]:
    """The section "Time and node-hours to the target" (nothing when no run measured one):
    the measured points, what --deadline/--budget pick (`picks`) and the forecast points
    of the front (`front`: target_front's points)."""
    if points.empty:
        return []
    from scalestudy.results.analysis.totarget import INTERVAL_TEXT, sentence

    def band(value: float, low: float, high: float, say: Callable[[float], str]) -> str:
        if not math.isfinite(value):
            return "not reached"
        return say(value) + ("" if math.isclose(low, high) else f" [{say(low)}–{say(high)}]")

    def nh(value: float) -> str:
        return f"{value:,.3g}"

    rows = []
    for _, r in points.iterrows():
        best = r["best_not_reached"]
        missed = str(int(r["not_reached"])) + (
            f" (best {best:.4g})" if pd.notna(best) and math.isfinite(float(best)) else "")
        marks = [m for m, on in (("fastest", r["fastest"]), ("cheapest", r["cheapest"]),
                                 ("on the front", r["pareto"])) if on]
        rows.append([str(r["group"]), str(int(r["nodes"])), str(int(r["world_size"])),
                     format_value(r["global_batch"]), f"{int(r['reached'])}/{int(r['runs'])}",
                     missed,
                     band(float(r["time_to_target_s"]), float(r["time_low"]),
                          float(r["time_high"]), hours),
                     band(float(r["node_hours"]), float(r["node_hours_low"]),
                          float(r["node_hours_high"]), nh),
                     num(r["samples_to_target"]) if pd.notna(r["samples_to_target"]) else "n/a",
                     ", ".join(marks) or ("dominated" if math.isfinite(
                         float(r["time_to_target_s"])) else "—")])
    return [Heading("Time and node-hours to the target"),
            Note("Measured, not priced: each run trained until its held-out metric reached "
                 "the target (docs/target.md). Time = the median time to the target over "
                 "the repeats that reached it; node-hours = nodes × that time. A run that "
                 "did not reach the target is counted under \"not reached\" (with the best "
                 "value it got), never averaged in. " + INTERVAL_TEXT + " A point is on the "
                 "front when no other point reached the target both faster and with fewer "
                 "node-hours."),
            Items([sentence(points), *picks]),
            Table(["group", "nodes", "GPUs", "global batch", "reached", "not reached",
                   "time [interval]", "node-hours [interval]", "samples (median)",
                   "front"], rows),
            *forecast_front_blocks(front)]


def _level(level: float) -> str:
    """An interval's level: `90 %`, "not stated" (0), "—" (no interval: NaN)."""
    return "—" if math.isnan(level) else f"{level * 100:.0f} %" if level > 0 else "not stated"


def forecast_front_blocks(front: pd.DataFrame | None) -> list[Block]:
    """The front's forecast points: time and node-hours to the target, each interval with
    its level, and whether the point is on the front of measured and forecast points."""
    if front is None or not (front["kind"] == "forecast").any():
        return []

    def band(value: float, low: float, high: float, say: Callable[[float], str]) -> str:
        return say(value) + ("" if math.isclose(low, high) else f" [{say(low)}–{say(high)}]")

    rows = [[str(r["group"]), str(int(r["nodes"])), str(int(r["world_size"])),
             format_value(r["global_batch"]), str(r["basis"]),
             band(float(r["samples"]), float(r["samples_low"]), float(r["samples_high"]), num),
             band(float(r["time_to_target_s"]), float(r["time_low"]), float(r["time_high"]),
                  hours),
             band(float(r["node_hours"]), float(r["node_hours_low"]),
                  float(r["node_hours_high"]), lambda v: f"{v:,.3g}"),
             _level(float(r["level"])),
             "on the front" if r["pareto"] else "dominated"]
            for _, r in front[front["kind"] == "forecast"].iterrows()]
    return [Heading("Forecast points to the target", 3),
            Note("Points not trained to the target: a throughput (the forecast's, or a "
                 "measured one whose runs did not reach the target) times the samples to "
                 "the target (the forecast from the runs that reached it, or the target's "
                 "rule). Both intervals are carried end to end: the short end is the fewest "
                 "samples at the fastest throughput, the long end the most at the slowest; "
                 "the level is the smaller of the two. \"front\": against the measured "
                 "and the forecast points together. --deadline and --budget choose among "
                 "all of them; a point whose interval only partly meets a limit \"likely "
                 "meets\" it."),
            Table(["group", "nodes", "GPUs", "global batch", "from", "samples [interval]",
                   "time [interval]", "node-hours [interval]", "level", "front"], rows)]
