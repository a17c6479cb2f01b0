"""The history use cases: a study's runs go into the results store as `run` and `report`
finish; `history ingest` takes older studies (or rebuilds a lost store); `history` lists
what the store holds over time."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from scalestudy.core.errors import ScalestudyError
from scalestudy.execute.workspace import read_run
from scalestudy.results.analysis import columns as col
from scalestudy.results.history.ledger import score, summary
from scalestudy.results.history.regression import check as compare
from scalestudy.results.history.regression import point_of
from scalestudy.results.history.rows import AttemptRow
from scalestudy.site.plan import Plan, make_plan
from scalestudy.study.imports import kept, reimport

if TYPE_CHECKING:
    from scalestudy.results.history.changes import ChangePoint, Noise
    from scalestudy.results.history.ledger import Score
    from scalestudy.results.history.regression import Verdict
    from scalestudy.results.history.store import Store

#: `--since` durations: 30d, 12h, 2w.
_SINCE = re.compile(r"^(\d+)([hdw])$")


def open_store(url: str | None = None, *, verify: bool = False) -> Store:
    """The results store (`--store`, $SCALESTUDY_STORE, or the embedded default);
    `verify`: a damaged SQLite file is refused before it is read or written."""
    from scalestudy.results.history.store import Store

    return Store(url, verify=verify)


def check_store(url: str | None = None) -> None:
    """Refuse a damaged store before `run` starts a job that would write into it (exit
    2, nothing written): a run's results would go into a store that cannot keep them."""
    store = open_store(url)
    try:
        store.check_intact()
    finally:
        store.dispose()


def store_study(plan: Plan, url: str | None = None) -> str:
    """Index the study's ended runs in the store; one line saying what was stored, or
    why not (the run directories stay the truth: a store that cannot be written never
    fails a run or a report)."""
    import sqlalchemy.exc

    from scalestudy.results.history.store import URL_VARIABLE, shown

    store = open_store(url, verify=True)
    try:
        count = store.ingest(plan.directory)
    except (ScalestudyError, sqlalchemy.exc.SQLAlchemyError, OSError) as exc:
        return (f"history: not stored: {exc}; the run directories keep everything: "
                f"`scalestudy history ingest {plan.directory}` later, or set ${URL_VARIABLE}")
    finally:
        store.dispose()
    return f"history: {count} run attempt(s) of {plan.study.name} in {shown(store.url)}"


@dataclass(frozen=True)
class Ingested:
    """What `history ingest` did per directory."""

    directory: Path
    attempts: int


def ingest(directories: list[Path], url: str | None = None) -> list[Ingested]:
    """Index study directories (results/<study>), or every study under a results
    directory and the imports it keeps (results/imports/); idempotent."""
    from scalestudy.results.history.store import study_dirs

    store = open_store(url, verify=True)
    out = []
    try:
        for directory in directories:
            if not Path(directory).is_dir():
                raise ScalestudyError(f"{directory}: no such directory; give a study's "
                                      "results directory (results/<study>) or results/")
            found = [Path(directory)] if (Path(directory) / "runs").is_dir() else \
                study_dirs(Path(directory))
            imported = kept(Path(directory))
            if not found and not imported:
                raise ScalestudyError(f"{directory}: holds no run directories (runs/<id>/); "
                                      "give results/<study> or the results directory")
            out += [Ingested(d, store.ingest(d)) for d in found]
            out += [Ingested(d, reimport(d, url).measurements) for d in imported]
    finally:
        store.dispose()
    return out


def since(text: str | None, now: datetime | None = None) -> datetime | None:
    """`--since 30d` (hours h, days d, weeks w) as the moment it names."""
    if text is None:
        return None
    match = _SINCE.match(text.strip())
    if match is None:
        raise ScalestudyError(f"--since {text!r}: give a number and h, d or w (e.g. 30d, 12h)")
    count, unit = int(match.group(1)), match.group(2)
    span = {"h": timedelta(hours=count), "d": timedelta(days=count),
            "w": timedelta(weeks=count)}[unit]
    return (now or datetime.now(timezone.utc)) - span


def history(url: str | None = None, *, system: str | None = None, model: str | None = None,
            since_text: str | None = None, tag: str | None = None,
            study: str | None = None, directory: str | None = None) -> list[AttemptRow]:
    """The stored run attempts, oldest first, filtered (`directory`: one study's)."""
    store = open_store(url)
    try:
        known_system(store, system)
        return store.rows(system=system, model=model, since=since(since_text), tag=tag,
                          study=study, directory=directory)
    finally:
        store.dispose()


def known_system(store: Store, system: str | None) -> None:
    """Refuse a `--system` the store holds no runs of (exit 2), naming those it holds: a
    filter that matches nothing must not read as "nothing changed"."""
    if system is None:
        return
    known = store.systems()
    if system in known:
        return
    hint = ""
    from scalestudy.results.history.schema import is_profile_file

    if is_profile_file(system):
        hint = " (a system is named by its profile's `name`, not by the profile's file)"
    else:
        import difflib

        close = difflib.get_close_matches(system, known, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
    holds = (f"it holds {', '.join(known)}" if known else
             "it holds none yet: `scalestudy history ingest results/` adds the studies there")
    raise ScalestudyError(f"--system {system}: the store holds no runs of that system{hint}; "
                          f"{holds}")


@dataclass(frozen=True)
class Checked:
    """What `history check` compared and found."""

    study: str
    newest: int  # completed attempts on the newest side
    baseline: int
    against: str  # what the baseline is, in words
    verdicts: list[Verdict]
    #: the recent change points of its points' series
    changes: list[ChangePoint] = field(default_factory=list)
    #: what the gate left out or could not tell, each a line (printed as notes)
    notes: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[Verdict]:
        """The verdicts that are regressions."""
        return [v for v in self.verdicts if v.regressed]

    @property
    def alarms(self) -> list[ChangePoint]:
        """The recent change points that are confirmed drops."""
        return [c for c in self.changes if c.alarm]


def check(target: str, url: str | None = None, *, baseline_tag: str | None = None,
          baseline_study: str | None = None, since_text: str | None = None,
          alpha: float = 0.01, min_drop: float = 0.03,
          results: Path = Path("results")) -> Checked:
    """The newest attempt of each run of a study (a spec, a results directory or a
    stored study's name) against a baseline: a tag, an earlier study, a time window, or
    by default the study's own earlier attempts."""
    from scalestudy.results.history.store import as_utc

    check_store(url)  # a damaged store is refused before it is read (or ingested into)
    name, directory = _study_name(target, url, results)
    rows = history(url, study=name, directory=directory)
    if not rows:
        raise ScalestudyError(f"the store holds no runs of study {name!r}; run it, or "
                              "`scalestudy history ingest results/` first")
    places = sorted({str(r[col.DIRECTORY]) for r in rows})
    if len(places) > 1:
        raise ScalestudyError(
            f"{len(places)} studies named {name!r} are in the store, in "
            + ", ".join(places[:6]) + (", ..." if len(places) > 6 else "")
            + ": give the one to check by its spec or its results directory "
            f"(`scalestudy history check {places[0]}`)")
    newest, notes = newest_campaign(rows)
    picked = {(r[col.DIRECTORY], r[col.RUN_ID], r[col.ATTEMPT]) for r in newest}
    systems = {r[col.SYSTEM] for r in newest}
    if baseline_study:
        pool, against = history(url, study=baseline_study), f"study {baseline_study}"
    elif baseline_tag:
        pool, against = history(url, tag=baseline_tag), f"tag {baseline_tag}"
    else:
        pool = history(url, study=name, directory=places[0], since_text=since_text)
        against = (f"its attempts of the last {since_text}" if since_text
                   else "its earlier attempts")
    base = [r for r in pool if r[col.SYSTEM] in systems
            and (r[col.DIRECTORY], r[col.RUN_ID], r[col.ATTEMPT]) not in picked]
    completed = [r for r in base if r[col.STATE] == "completed"]
    if not completed and (baseline_tag or baseline_study):
        raise ScalestudyError(f"no completed baseline runs ({against}) of the system(s) "
                              f"{', '.join(sorted(map(str, systems)))} in the store: "
                              "name another with --baseline-tag, --baseline-study or --since")
    if not completed:  # the first night: every point is new, and that is no failure
        notes.append(f"no completed baseline runs ({against}) yet: every point is new, "
                     "not tested; the next campaign is checked against this one")
    # a named baseline holds what came before it: only changes after it are gated
    after = max((as_utc(r[col.ENDED]) for r in completed if r[col.ENDED] is not None),
                default=None) if (baseline_tag or baseline_study) else None
    found, noises, before = recent_changes(newest, url, after)
    notes += [f"system {s}: its runs have no repeats and too few campaigns to measure the "
              "noise: the series cannot tell a change from noise (2 or more `repeats:` "
              "would)" for s, n in noises.items() if not n.known]
    # the noise between nights, measured without tonight (a step tonight is no noise)
    nights = max((n.tau for n in before.values() if n.known), default=0.0)
    verdicts = compare(newest, base, alpha, min_drop, nights)
    return Checked(name, sum(r[col.STATE] == "completed" for r in newest), len(completed),
                   against, verdicts, found, notes)


def newest_campaign(rows: list[AttemptRow]) -> tuple[list[AttemptRow], list[str]]:
    """The attempts of a study's newest campaign (the one that ended last; the newest
    attempt of each run in it), and a note on the runs it did not measure: points
    dropped from the grid are not checked again on their old runs as if they were
    new. Attempts stored before campaigns (no campaign named): the newest attempt of
    each run, as then."""
    from scalestudy.results.history.store import as_utc, latest_attempts

    ends: dict[str, datetime] = {}
    for r in rows:
        if r[col.ENDED] is not None:
            when, campaign = as_utc(r[col.ENDED]), str(r.get(col.CAMPAIGN) or "")
            ends[campaign] = max(ends.get(campaign, when), when)
    last = max(ends, key=lambda c: ends[c]) if ends else ""
    if not last:
        return latest_attempts(rows), []
    newest = latest_attempts(r for r in rows if r.get(col.CAMPAIGN) == last)
    left = {r[col.RUN_ID] for r in rows} - {r[col.RUN_ID] for r in newest}
    notes = [f"{len(left)} run(s) of earlier campaigns are not in the newest ({last}): "
             "not checked (their points are no longer measured)"] if left else []
    return newest, notes


def _study_name(target: str, url: str | None, results: Path) -> tuple[str, str | None]:
    """A spec's or a results directory's study and its directory (ingested first, so its
    newest attempts are in the store), or a stored study's name as it is (any
    directory)."""
    path = Path(target)
    if path.suffix in (".yaml", ".yml") and path.is_file():

        plan = make_plan(path, results)
        if (plan.directory / "runs").is_dir():
            ingest([plan.directory], url)
        return plan.study.name, str(plan.directory.resolve())
    if (path / "runs").is_dir():
        ingest([path], url)

        first = next((read_run(d) for d in sorted((path / "runs").iterdir())
                      if read_run(d)), None)
        return str((first or {}).get(col.STUDY) or path.name), str(path.resolve())
    return target, None


def changes(url: str | None = None, *, system: str | None = None, model: str | None = None,
            since_text: str | None = None) -> list[ChangePoint]:
    """The change points of every stored point's series of campaigns
    (results.history.changes.ChangePoint), oldest first."""
    from scalestudy.results.history.changes import changes as find

    return find(history(url, system=system, model=model, since_text=since_text))


def cannot_tell(url: str | None = None, *, system: str | None = None,
                model: str | None = None, since_text: str | None = None) -> list[str]:
    """The systems whose stored series cannot tell a change from noise (no repeats, too
    few campaigns): `history changes` claims none there, and says so."""
    from scalestudy.results.history.changes import cannot_tell as untold

    return untold(history(url, system=system, model=model, since_text=since_text))


def recent_changes(checked_rows: list[AttemptRow], url: str | None = None,
                   after: datetime | None = None
                   ) -> tuple[list[ChangePoint], dict[str, Noise], dict[str, Noise]]:
    """The change points of the checked study's points that are recent: among their
    series' latest RECENT campaigns (what `history check` also gates on), and after
    `after` (a named baseline's newest run) where given; each system's noise (`known`
    False: no repeats and too few campaigns, the series cannot tell); and each system's
    noise without the checked attempts."""
    from scalestudy.results.history.changes import changes as find
    from scalestudy.results.history.changes import noises as measure
    from scalestudy.results.history.store import as_utc

    points = {point_of(r) for r in checked_rows if r.get(col.STATE) == "completed"}
    systems = {r[col.SYSTEM] for r in checked_rows}
    checked = {(r[col.DIRECTORY], r[col.RUN_ID], r[col.ATTEMPT]) for r in checked_rows}
    found: list[ChangePoint] = []
    noises: dict[str, Noise] = {}
    before: dict[str, Noise] = {}
    for system in sorted(systems, key=str):
        rows = history(url, system=system)
        found += find(rows)
        noises.update(measure(rows))
        before.update(measure([r for r in rows if (r[col.DIRECTORY], r[col.RUN_ID],
                                                     r[col.ATTEMPT]) not in checked]))
    return [c for c in found if c.key in points and c.recent
            and (after is None or as_utc(c.when) > after)], noises, before


def junit(checked: Checked) -> str:
    """The verdicts as JUnit XML: one test case per point, a failure per regression."""
    from xml.etree import ElementTree as ET

    suspected = [c for c in checked.changes if not c.confirmed or c.fixed]
    suite = ET.Element("testsuite", name=f"scalestudy history check {checked.study}",
                       tests=str(len(checked.verdicts) + len(checked.changes)),
                       failures=str(len(checked.regressions) + len(checked.alarms)),
                       errors="0", skipped=str(
                           sum(v.status not in ("ok", "regression") for v in checked.verdicts)
                           + len(suspected)))
    names: dict[str, int] = {}

    def unique(name: str) -> str:  # two cases of one name would be one to a CI system
        names[name] = names.get(name, 0) + 1
        return name if names[name] == 1 else f"{name} #{names[name]}"

    for v in checked.verdicts:
        case = ET.SubElement(suite, "testcase", classname=checked.study, name=unique(v.name))
        if v.regressed:
            ET.SubElement(case, "failure", message=f"{v.cause} regression",
                          type="regression").text = v.line()
        elif v.status != "ok":  # not tested, new, undecided, unlike: could not tell
            ET.SubElement(case, "skipped", message=v.line())
        ET.SubElement(case, "system-out").text = v.line()
    for c in checked.changes:  # the series' change points: confirmed drops fail
        items = c.key[-1] if c.key and isinstance(c.key[-1], tuple) else ()
        work = " ".join(f"{k}={v}" for k, v in items if k not in ("system", "workload"))
        case = ET.SubElement(suite, "testcase", classname=f"{checked.study}.changes",
                             name=unique(f"{c.point}{' ' + work if work else ''} changed "
                                         f"{c.when:%Y-%m-%d}"))
        if c.alarm:
            ET.SubElement(case, "failure", message=f"confirmed {c.cause} change",
                          type="change").text = c.line()
        elif not c.confirmed or c.fixed:
            ET.SubElement(case, "skipped", message=c.line())
        ET.SubElement(case, "system-out").text = c.line()
    return ET.tostring(suite, encoding="unicode") + "\n"


def predictions(url: str | None = None, *, system: str | None = None
                ) -> tuple[list[Score], list[dict[str, object]]]:
    """The ledger's forecasts scored against the stored attempts; per system totals."""

    store = open_store(url)
    try:
        known_system(store, system)
        kept = store.forecasts(system)
        scores = score(kept, store.rows(system=system) if kept else [])
    finally:
        store.dispose()
    return scores, summary(scores)


def scored_here(system: str, world_sizes: set[int], url: str | None = None) -> list[str]:
    """The ledger's forecasts of `system` at these world sizes that runs have measured,
    each as its scored line, and a line of totals; [] when there are none or the store
    cannot be read (a store never fails a report)."""
    import sqlalchemy.exc

    try:
        scores, _ = predictions(url, system=system)
    except (ScalestudyError, sqlalchemy.exc.SQLAlchemyError, OSError):
        return []
    here = [s for s in scores if s.measured is not None
            and int(s.forecast[col.GPUS]) in world_sizes]
    if not here:
        return []
    inside = sum(1 for s in here if s.inside)
    return [s.line() for s in here] + [
        f"{inside} of {len(here)} inside their intervals"]
