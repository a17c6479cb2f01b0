"""`scalestudy publish`: the results store as a static site that people can open (offline,
from `file://`, or on GitHub Pages) and machines can read (a JSON file per page)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from scalestudy.cli.app import app, err, out
from scalestudy.cli.history import StoreOpt


@app.command("publish")
def publish(
    output: Annotated[Path, typer.Option("-o", "--output", help="the site's directory "
                                         "(made, or a site published there before)")
                      ] = Path("results/site"),
    system: Annotated[str | None, typer.Option(help="only this system")] = None,
    since: Annotated[str | None, typer.Option(help="only runs ended since, e.g. 180d")] = None,
    title: Annotated[str, typer.Option(help="the index page's title")] = "Scaling results",
    store: StoreOpt = None,
) -> None:
    """Publish the store as a static site (a JSON file beside each page).

    An index of systems and models; per system and model, throughput and efficiency per
    scale over time with repeat bands, change points and provenance changes, the
    best-known front, forecasts and how they scored, slow nodes; a page per study with
    its report. A rebuild writes only what changed."""
    from scalestudy.study.publish import publish as build

    done = build(output, store, system=system, since_text=since, title=title)
    err.print(f"{len(done.written)} file(s) written, {done.unchanged} unchanged, "
              f"{len(done.removed)} removed; {done.drawn} static chart(s) drawn",
              highlight=False)
    out.print(f"site: {output / 'index.html'}", highlight=False)
