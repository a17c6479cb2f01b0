"""`scalestudy publish`: write the site's pages (results.history.pages) as static HTML, each
with its JSON beside it and embedded in it (so its charts draw from `file://` too), the
vendored chart library (uPlot, report/vendor/), static PNG fallbacks, the JSON Schema of
the pages, and the studies' reports. A rebuild writes only the files whose bytes changed,
draws a fallback only when its page's data changed, and removes what the site no longer
has (by the manifest it keeps, .scalestudy-site.json).

The manifest is written first (a new directory is a site from its first byte), and each
file written is noted in a journal (.scalestudy-site.pending) until the manifest is
brought up to date at the end: a publish that was interrupted, or ran out of space,
leaves a directory the next `publish` recognises, rewrites and cleans up."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata, resources
from pathlib import Path
from typing import Any

import jinja2

from scalestudy.core.errors import ScalestudyError
from scalestudy.execute.workspace import write_atomic
from scalestudy.results.history import site_schema as s
from scalestudy.results.history.pages import Site

#: The manifest: every file the site holds, with its hash (and a fallback's data hash).
MANIFEST = ".scalestudy-site.json"
MANIFEST_VERSION = 1
#: The files a publish has written so far, one a line, until it brings the manifest up to
#: date (it is there only while a publish runs, or after one was interrupted).
JOURNAL = ".scalestudy-site.pending"
#: Files shipped into assets/ (from the package: report/vendor and templates/site).
VENDOR = ("uPlot.iife.min.js", "uPlot.min.css", "uPlot.LICENSE")
OWN_ASSETS = ("site.js", "site.css")


@dataclass
class Published:
    """What a build did: files written (new or changed), left as they were, removed."""

    root: Path
    written: list[str] = field(default_factory=list)
    unchanged: int = 0
    removed: list[str] = field(default_factory=list)
    drawn: int = 0  # fallback PNGs drawn (the others' data had not changed)


class _Writer:
    """Writes a file only when its bytes differ from what is there; remembers each."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.old = _manifest(root)
        # what an interrupted publish wrote: ours, its hashes unknown (so rewritten)
        for rel in _journal(root):
            self.old.setdefault(rel, {})
        self.files: dict[str, dict[str, str]] = {}
        self.done = Published(root)
        self.current = ""  # the file being written (for an error's message)
        if not (root / MANIFEST).is_file():  # the manifest first: a site from now on
            write_atomic(root / MANIFEST, _manifest_text(self.old))
        self.journal = (root / JOURNAL).open("a", encoding="utf-8")

    def put(self, rel: str, content: bytes, **extra: str) -> None:
        digest = hashlib.sha256(content).hexdigest()
        path = self.root / rel
        self.files[rel] = {"sha256": digest, **extra}
        if self.old.get(rel, {}).get("sha256") == digest and path.is_file() and \
                _sha256(path) == digest:
            self.done.unchanged += 1
            return
        self.current = rel
        self.journal.write(rel + "\n")
        self.journal.flush()
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, content)
        self.done.written.append(rel)

    def keep(self, rel: str, data_hash: str) -> bool:
        """Keep a drawn file whose data has not changed (True), without drawing it."""
        entry = self.old.get(rel, {})
        path = self.root / rel
        if entry.get("data") != data_hash or not path.is_file() or \
                _sha256(path) != entry.get("sha256"):
            return False
        self.files[rel] = dict(entry)
        self.done.unchanged += 1
        return True

    def finish(self) -> Published:
        for rel in sorted(set(self.old) - set(self.files)):
            path = self.root / rel
            path.unlink(missing_ok=True)
            self.done.removed.append(rel)
            for folder in path.parents:  # the folders it leaves empty go too
                if folder == self.root or any(folder.iterdir()):
                    break
                folder.rmdir()
        text = _manifest_text(self.files)
        self.current = MANIFEST
        path = self.root / MANIFEST
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            write_atomic(path, text)
        self.close()
        (self.root / JOURNAL).unlink(missing_ok=True)
        return self.done

    def close(self) -> None:
        self.journal.close()


def write_site(site: Site, out: Path, reports: Mapping[str, Path]) -> Published:
    """Write `site` under `out`; `reports`: a study page's path -> its report directory
    (copied in beside the page)."""
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ScalestudyError(f"{out}: cannot create it ({exc.strerror}); give -o a "
                              "directory you can write") from None
    if any(out.iterdir()) and not (out / MANIFEST).is_file() and not (out / JOURNAL).is_file():
        raise ScalestudyError(f"{out}: not empty and not a site scalestudy published (no "
                              f"{MANIFEST}); give -o an empty or new directory")
    w: _Writer | None = None
    try:
        w = _Writer(out)
        return _write(w, site, reports)
    except OSError as exc:
        where = out / (w.current if w is not None and w.current else MANIFEST)
        why = ("no space left on its device" if exc.errno in (errno.ENOSPC, errno.EDQUOT)
               else f"cannot write it ({exc.strerror})")
        raise ScalestudyError(f"{where}: {why}, so publish stopped part way: free space (or "
                              "fix the directory) and run publish again, which resumes "
                              "there", exit_code=1) from None
    finally:
        if w is not None:
            w.close()


def _write(w: _Writer, site: Site, reports: Mapping[str, Path]) -> Published:
    """Every file of the site, through the writer."""
    for name in VENDOR:
        w.put(f"assets/{name}", (resources.files("scalestudy.report") / "vendor" / name
                                 ).read_bytes())
    for name in OWN_ASSETS:
        w.put(f"assets/{name}", (resources.files("scalestudy.report") / "templates" / "site"
                                 / name).read_bytes())
    w.put("schema/page.schema.json", _schema().encode())
    env = _environment()
    for path, study in sorted(site.studies.items()):
        report = reports.get(path)
        if report is not None:
            copied = _copy_report(w, report, f"{path}/report")
            study["report"] = f"{Path(path).name}/report/index.html" if copied else None
    for path, page in sorted(site.systems.items()):
        _fallback(w, path, page)
        _page(w, env, "site/system.html.j2", path, page, charts=True)
    for path, study in sorted(site.studies.items()):
        _page(w, env, "site/study.html.j2", path, study)
    _page(w, env, "site/index.html.j2", "index", site.index)
    return w.finish()


def _page(w: _Writer, env: jinja2.Environment, template: str, path: str,
          page: Mapping[str, Any], charts: bool = False) -> None:
    """A page's JSON and its HTML (the JSON embedded, `</` escaped)."""
    data = json.dumps(page, indent=1, sort_keys=True, ensure_ascii=False)
    w.put(f"{path}.json", (data + "\n").encode())
    root = "../" * path.count("/")
    html = env.get_template(template).render(
        page=page, root=root, json=f"{Path(path).name}.json", schema=s.SCHEMA,
        data=jinja2.utils.markupsafe.Markup(
            json.dumps(page, sort_keys=True, separators=(",", ":")).replace("<", "\\u003c")),
        charts=charts, version=_version())
    w.put(f"{path}.html", html.encode())


def _fallback(w: _Writer, path: str, page: s.SystemPage) -> None:
    """The system page's static PNG, drawn only when its data changed."""
    import pandas as pd

    from scalestudy.report.timeline_plot import draw_timeline
    from scalestudy.results.history.timeline import Change

    if not page["series"]:
        return
    rel = f"{path}.png"
    page["fallback"] = Path(rel).name
    basis = json.dumps([page["title"], page["series"], page["changes"], page["provenance"]],
                       sort_keys=True).encode()
    data_hash = hashlib.sha256(basis).hexdigest()
    if w.keep(rel, data_hash):
        return
    rows = [{"group": series["label"], "when": pd.Timestamp(p["when"]),
             "world_size": scale["world_size"], "per_gpu": p["per_gpu"],
             "per_gpu_min": p["low"], "per_gpu_max": p["high"],
             "efficiency": p["efficiency"] if p["efficiency"] is not None else float("nan"),
             "repeats": p["repeats"], "unit": series["unit"]}
            for series in page["series"] for scale in series["scales"] for p in scale["points"]]
    changes = [Change(pd.Timestamp(m["when"]), m["what"], page["system"])
               for m in page["provenance"]]
    with tempfile.TemporaryDirectory(prefix=".fallback-", dir=w.root) as tmp:
        target = Path(tmp) / "chart.png"
        draw_timeline(pd.DataFrame(rows), changes, page["title"], target)
        w.put(rel, target.read_bytes(), data=data_hash)
    w.done.drawn += 1


def _copy_report(w: _Writer, report: Path, rel: str) -> bool:
    """A study's report directory into the site (False: it has no index.html)."""
    if not (report / "index.html").is_file():
        return False
    for item in sorted(report.rglob("*")):
        if item.is_file() and not item.name.startswith("."):
            w.put(f"{rel}/{item.relative_to(report).as_posix()}", item.read_bytes())
    # what the report links beside it in its study (../runs.csv) comes along
    study = report.parent.resolve()
    for target in sorted(_outside_links(report)):
        source = (report / target).resolve()
        if source.is_file() and source.is_relative_to(study):
            w.put(f"{Path(rel).parent.as_posix()}/{source.relative_to(study).as_posix()}",
                  source.read_bytes())
    return True


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("scalestudy.report", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters.update(day=_day, rate=_rate, percent=_percent, point=_point)
    return env


def _day(value: str | None) -> str:
    return "?" if not value else value[:16].replace("T", " ")


def _rate(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def _point(point: Mapping[str, object]) -> str:
    return ", ".join(f"{k} {v}" for k, v in point.items())


def _schema() -> str:
    """The JSON Schema of every page (a page is one of the three kinds)."""
    from pydantic import TypeAdapter

    schema = TypeAdapter(s.IndexPage | s.SystemPage | s.StudyPage).json_schema()
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema",
              "$id": s.SCHEMA, **schema}
    return json.dumps(schema, indent=1, sort_keys=True) + "\n"


_LINK = re.compile(r"""\b(?:href|src)=["']([^"'#?]+)""")


def _outside_links(report: Path) -> set[str]:
    """The relative links of a report's pages that lead out of its directory."""
    found: set[str] = set()
    for page in report.rglob("*.html"):
        base = page.parent.relative_to(report)
        for target in _LINK.findall(page.read_text(encoding="utf-8", errors="replace")):
            if ":" in target or target.startswith("/"):
                continue  # data:, http:, an absolute path: nothing to copy
            parts = (base / target).parts
            depth = 0
            for part in parts:
                depth += -1 if part == ".." else (0 if part == "." else 1)
                if depth < 0:
                    found.add((base / target).as_posix())
                    break
    return found


def _manifest_text(files: Mapping[str, Mapping[str, str]]) -> str:
    return json.dumps({"version": MANIFEST_VERSION, "files": files}, indent=0,
                      sort_keys=True) + "\n"


def _journal(root: Path) -> list[str]:
    """The files an interrupted publish wrote (none: no journal), each inside the site."""
    try:
        lines = (root / JOURNAL).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    return [rel for rel in dict.fromkeys(lines) if rel and not os.path.isabs(rel)
            and ".." not in Path(rel).parts]


def _manifest(root: Path) -> dict[str, dict[str, str]]:
    try:
        data = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != MANIFEST_VERSION:
        return {}
    files = data.get("files")
    return files if isinstance(files, dict) else {}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _version() -> str:
    try:
        return metadata.version("scalestudy")
    except metadata.PackageNotFoundError:
        return "?"
