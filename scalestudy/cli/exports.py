"""`history export`: the results store's history for the regression trackers teams use
(Bencher's BMF JSON, an Apache Otava CSV with its config) or as a plain CSV."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from scalestudy.cli.app import err
from scalestudy.cli.history import StoreOpt, history_app


@history_app.command("export")
def export(
    kind: Annotated[str, typer.Option(
        "--format", help="bencher (BMF JSON: the latest campaign of each point), otava (CSV "
        "of one study's campaigns, and its YAML config beside -o), csv (every attempt)")],
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="the file to write [default: stdout]", show_default=False)
    ] = None,
    otava_config: Annotated[Path | None, typer.Option(
        "--otava-config", help="where Otava's config goes [default: beside -o, as .yaml]",
        show_default=False)] = None,
    system: Annotated[str | None, typer.Option(help="only this system")] = None,
    model: Annotated[str | None, typer.Option(help="only this model")] = None,
    since: Annotated[str | None, typer.Option(help="only runs ended since, e.g. 90d")] = None,
    tag: Annotated[str | None, typer.Option(help="only runs with this tag")] = None,
    study: Annotated[str | None, typer.Option(help="only this study (its name)")] = None,
    campaign: Annotated[str | None, typer.Option(
        help="only this campaign (its id, as `history` lists it)")] = None,
    store: StoreOpt = None,
) -> None:
    """Write the stored history for Bencher (`bencher run --adapter json`), Apache Otava
    (`otava analyze`) or a spreadsheet; each throughput with its per-GPU and global batch."""
    from scalestudy.study import exports as uc

    filters = uc.Filters(system, model, since, tag, study, campaign)
    done = uc.export(kind, store, filters, output, otava_config)
    if done.text is not None:
        sys.stdout.write(done.text)
        sys.stdout.flush()
    for line in done.notes:
        err.print(line, highlight=False, markup=False, soft_wrap=True)
