"""`history changes`, `history nodes` and `history failures`: a system watched over
months, its points' change points, its slow nodes and its failure rate, from the results
store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from scalestudy.cli.app import JsonOpt, err, out, print_json
from scalestudy.cli.history import StoreOpt, history_app
from scalestudy.execute.workspace import write_text_atomic
from scalestudy.results.history.nodes import slow_nodes


@history_app.command("changes")
def changes(
    system: Annotated[str | None, typer.Option(help="only this system")] = None,
    model: Annotated[str | None, typer.Option(help="only this model")] = None,
    since: Annotated[str | None, typer.Option(help="only runs ended since, e.g. 180d")] = None,
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """Find change points in each point's series of campaigns: when its per-GPU throughput
    stepped or drifted, by how much (95 % interval), compute or communication, and what
    changed in the provenance there."""
    from scalestudy.study import history as uc

    found = uc.changes(store, system=system, model=model, since_text=since)
    if as_json:
        print_json([{**c.as_dict(), "line": c.line()} for c in found])
        return
    for c in found:
        out.print(c.line(), highlight=False, markup=False, soft_wrap=True)
    for name in uc.cannot_tell(store, system=system, model=model, since_text=since):
        err.print(f"note: system {name}: its runs have no repeats and too few campaigns to "
                  "measure the noise: no change point is claimed there (2 or more "
                  "`repeats:` would tell)", highlight=False, markup=False)
    confirmed = sum(c.confirmed for c in found)
    err.print(f"{len(found)} change point(s), {confirmed} confirmed (2 or more campaigns "
              "after them)" if found else "no change point: every series is level within "
              "its noise", highlight=False)


@history_app.command("nodes")
def nodes(
    system: Annotated[str | None, typer.Option(help="only this system")] = None,
    since: Annotated[str | None, typer.Option(help="only runs ended since, e.g. 30d")] = None,
    write_exclude: Annotated[Path | None, typer.Option(
        "--write-exclude", help="also write the slow hosts to this file, one per line, for "
        "`run --exclude-nodes`")] = None,
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """Name the nodes slower than their runs' other nodes beyond the noise, pooled over
    every stored run (each rank's host and compute time, from ordinary runs)."""
    from scalestudy.study import history as uc

    found = slow_nodes(uc.history(store, system=system, since_text=since))
    if write_exclude is not None:

        write_text_atomic(write_exclude, "".join(
            f"{n.host}  # {n.line()}\n" for n in found.slow))
        err.print(f"exclude list: {write_exclude} ({len(found.slow)} host(s))",
                  highlight=False)
    if as_json:
        print_json(found.as_dict())
        return
    for n in found.slow:
        out.print(n.line(), highlight=False, markup=False, soft_wrap=True)
    err.print(f"{found.hosts} host(s) in {found.testable_runs} run(s) tested: "
              f"{len(found.slow)} slower beyond the noise", highlight=False)
    for why, count in found.untestable.items():
        err.print(f"untestable: {count} run(s): {why}", highlight=False, markup=False)


@history_app.command("failures")
def failures(
    system: Annotated[str | None, typer.Option(help="only this system")] = None,
    since: Annotated[str | None, typer.Option(help="only runs ended since, e.g. 90d")] = None,
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """Each system's failure rate per node-hour (90 % interval): attempts that ended by a
    node failure, walltime, broken communication or the scheduler/launcher, over the
    node-hours of all its attempts (docs/goodput.md)."""
    from scalestudy.results.history.failures import failure_rates
    from scalestudy.study import history as uc

    found = failure_rates(uc.history(store, system=system, since_text=since))
    if as_json:
        print_json([r.as_dict() for r in found])
        return
    for r in found:
        out.print(r.line(), highlight=False, markup=False, soft_wrap=True)
    if not found:
        err.print("no runs of scalestudy's own in the store match; `scalestudy history "
                  "ingest results/` adds the studies there", highlight=False)
