"""Plugins: what an entry-point group names, loaded, each one that fails to load one
error naming its package (schedulers and launchers load through here)."""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import entry_points

from scalestudy.core.errors import ScalestudyError


def loaded(group: str, kind: str) -> Iterator[tuple[str, object, str, str]]:
    """(name, loaded object, how an error names it, its package) for each entry point of
    `group`; `kind` ("scheduler", "launcher") words the errors."""
    for point in entry_points(group=group):
        dist = point.dist.name if point.dist else "?"
        where = f"{kind} plugin {point.name!r} ({point.value}, package {dist})"
        try:
            thing = point.load()
        except Exception as err:  # a broken plugin: say which, and how to get rid of it
            raise ScalestudyError(f"{where} does not load: {type(err).__name__}: {err}; "
                                  f"fix or uninstall {dist}") from err
        yield point.name, thing, where, dist
