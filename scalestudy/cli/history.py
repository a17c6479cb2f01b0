"""`scalestudy history`: what the results store holds over time, and `history ingest`."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Annotated, Any

import typer

from scalestudy.cli.app import JsonOpt, app, err, out, print_json

history_app = typer.Typer(help="The results store: every study's runs over time "
                          "(SQLite by default; a team's PostgreSQL with --store)",
                          no_args_is_help=False, invoke_without_command=True)
app.add_typer(history_app, name="history")

StoreOpt = Annotated[str | None, typer.Option(
    "--store", help="the results store: a SQLAlchemy URL (postgresql+psycopg://...) or a "
    "SQLite file [default: $SCALESTUDY_STORE, else ~/.local/state/scalestudy/history.sqlite]",
    show_default=False)]


@history_app.callback()
def history(
    ctx: typer.Context,
    system: Annotated[str | None, typer.Option(help="only this system")] = None,
    model: Annotated[str | None, typer.Option(help="only this model")] = None,
    since: Annotated[str | None, typer.Option(help="only runs ended since, e.g. 30d, 12h")
                     ] = None,
    tag: Annotated[str | None, typer.Option(help="only runs with this tag")] = None,
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """List the studies and points the store holds, oldest first."""
    if ctx.invoked_subcommand is not None:
        return
    from scalestudy.study import history as uc

    rows = uc.history(store, system=system, model=model, since_text=since, tag=tag)
    if as_json:
        print_json(rows)
        return
    if not rows:
        err.print("the store holds no runs that match; `scalestudy history ingest results/` "
                  "adds the studies there", highlight=False)
        return
    from scalestudy.report.terminal import text_table

    out.print(text_table("studies", ["study", "system", "tags", "ended", "completed",
                                     "failed"], _studies(rows), width=out.width))
    out.print(text_table("points over time (per-GPU throughput, median of the repeats)",
                         ["point", "study", "ended", "repeats", "per GPU", "unit"],
                         _points(rows), width=out.width))


@history_app.command("ingest")
def ingest(directories: Annotated[list[Path], typer.Argument(
        help="results/<study> directories, or results directories")],
        store: StoreOpt = None) -> None:
    """Add studies' runs to the store (again: the same rows; a lost store comes back)."""
    from scalestudy.study import history as uc

    done = uc.ingest(directories, store)
    for item in done:
        out.print(f"{item.directory}: {item.attempts} run attempt(s)", highlight=False)
    out.print(f"ingested {sum(d.attempts for d in done)} run attempt(s) of {len(done)} "
              "study(ies)")


def _studies(rows: list[dict[str, Any]]) -> list[list[str]]:
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(str(r["directory"]), []).append(r)
    table = []
    for items in by.values():
        tags = sorted({t for r in items for t in r["tags"] or []})
        ended = [r["ended"] for r in items if r["ended"] is not None]
        table.append([str(items[0]["study"]), str(items[0]["system"] or "?"),
                      ",".join(tags) or "-", _when(max(ended)) if ended else "?",
                      str(sum(r["state"] == "completed" for r in items)),
                      str(sum(r["state"] == "failed" for r in items))])
    return table


def _points(rows: list[dict[str, Any]]) -> list[list[str]]:
    by: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        if r["throughput_per_gpu"] is None:
            continue
        key = (r["model"], r["nodes"], r["ranks_per_node"], r["batch_size"], r["backend"],
               r["tuning"], r["directory"], ",".join(r["tags"] or []))
        by.setdefault(key, []).append(r)
    table = []
    for (model, nodes, rpn, batch, backend, tuning, _, tags), items in by.items():
        ends = [r["ended"] for r in items if r["ended"] is not None]
        ended = max(ends) if ends else "?"
        per_gpu = statistics.median(r["throughput_per_gpu"] for r in items)
        table.append([f"{model} {nodes}x{rpn} b{batch} {backend}/{tuning}",
                      str(items[0]["study"]) + (f" [{tags}]" if tags else ""), _when(ended),
                      str(len(items)), f"{per_gpu:,.4g}", str(items[0]["unit"])])
    return table


def _when(moment: Any) -> str:
    return moment.strftime("%Y-%m-%d %H:%M") if hasattr(moment, "strftime") else str(moment)
