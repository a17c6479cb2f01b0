"""`scalestudy publish`: the results store as a static site (report.publish writes it)."""

from __future__ import annotations

from pathlib import Path

from scalestudy.core.errors import ScalestudyError
from scalestudy.report.publish import Published, write_site
from scalestudy.results.history.pages import build
from scalestudy.results.history.store import as_utc
from scalestudy.study.history import known_system, open_store, since


def publish(out: Path, url: str | None = None, *, system: str | None = None,
            since_text: str | None = None, title: str = "Scaling results") -> Published:
    """Build the site of the stored attempts (of one system, ended since) under `out`;
    each study's report (its directory's report/, where one was written) is copied in
    beside its page."""
    start = since(since_text)
    store = open_store(url)
    try:
        known_system(store, system)
        rows = store.rows(system=system, since=start)
        kept = [f for f in store.forecasts(system)
                if start is None or as_utc(f["made"]) >= start] if rows else []
    finally:
        store.dispose()
    if not rows:
        raise ScalestudyError("the store holds no runs that match: nothing to publish; "
                              "`scalestudy history ingest results/` adds the studies there")
    site = build(rows, kept, title)
    return write_site(site, out, {path: Path(directory) / "report"
                                  for path, directory in site.directories.items()
                                  if not directory.startswith("import:")})
