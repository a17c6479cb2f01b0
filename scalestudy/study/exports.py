"""The `history export` use case: the stored history, filtered, written out for Bencher,
Apache Otava or a spreadsheet (results.history.exports), to a file (atomically, with
Otava's config beside the CSV) or for stdout."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from scalestudy.core.errors import ScalestudyError
from scalestudy.execute.workspace import write_text_atomic
from scalestudy.results.history import exports as fmt
from scalestudy.results.history.store import campaign_of
from scalestudy.study.history import history

#: Otava reads this far back unless its --since says otherwise (DataSelector's default).
OTAVA_WINDOW = timedelta(days=365)


@dataclass(frozen=True)
class Filters:
    """Which stored attempts an export holds (the `history` filters, and a campaign)."""

    system: str | None = None
    model: str | None = None
    since: str | None = None  # 30d, 12h, 2w
    tag: str | None = None
    study: str | None = None
    campaign: str | None = None

    def words(self) -> str:
        given = [f"{k} {v}" for k, v in self.__dict__.items() if v]
        return f" ({', '.join(given)})" if given else ""


@dataclass(frozen=True)
class Exported:
    """What an export made: its text for stdout (None: written to a file) and the lines
    that say what it holds, for stderr."""

    text: str | None
    notes: list[str]


def export(kind: str, url: str | None = None, filters: Filters = Filters(),
           output: Path | None = None, config: Path | None = None,
           now: datetime | None = None) -> Exported:
    """Export the stored attempts that match as `kind` (bencher, otava or csv), to
    `output` or for stdout; Otava's config goes to `config`, by default beside the CSV
    (`history.csv` -> `history.yaml`)."""
    if kind not in fmt.FORMATS:
        raise ScalestudyError(f"--format {kind!r}: give one of {', '.join(fmt.FORMATS)}")
    if config is not None and kind != "otava":
        raise ScalestudyError("--otava-config is for --format otava; leave it out")
    if kind == "otava" and config is not None and output is None:
        raise ScalestudyError("--otava-config: the config names the CSV's file; give -o "
                              "FILE.csv too")
    rows = history(url, system=filters.system, model=filters.model, since_text=filters.since,
                   tag=filters.tag, study=filters.study)
    if filters.campaign:
        rows = [r for r in rows if campaign_of(r) == filters.campaign]
    if not rows:
        raise ScalestudyError(
            f"the store holds no runs that match{filters.words()}: nothing to export; "
            "`scalestudy history` lists what it holds, `scalestudy history ingest results/` "
            "adds the studies there")
    if kind == "csv":
        return _write(output, fmt.attempts_csv(rows), [f"csv: {len(rows)} run attempt(s)"])
    if kind == "bencher":
        made = fmt.bencher(rows)
        _measured(made.bmf, filters)
        return _write(output, made.text(), [
            f"bencher: {len(made.bmf)} benchmark(s), the latest campaign of each point "
            f"({', '.join(made.campaigns)}); one `bencher run --adapter json --file FILE` "
            "sends them as one report"])
    return _otava(fmt.otava(rows), filters, output, config, now)


def _otava(made: fmt.OtavaExport, filters: Filters, output: Path | None,
           config: Path | None, now: datetime | None) -> Exported:
    _measured(made.metrics, filters)
    notes = [f"otava: {made.campaigns} campaign(s) of study {made.test}, "
             f"{len(made.metrics)} point(s)"
             + (f"; {made.carried} cell(s) not measured carry a neighbouring campaign's "
                f"value (column {fmt.NOT_MEASURED} names them)" if made.carried else "")]
    if output is None:
        return Exported(made.csv, [*notes, "otava: give -o FILE.csv to also write the "
                                   "config `otava analyze` reads"])
    where = config or output.with_suffix(".yaml")
    if where.resolve() == output.resolve():
        raise ScalestudyError(f"{output}: the CSV and Otava's config would be one file; "
                              "give the CSV another suffix, or --otava-config PATH")
    written = _write(output, made.csv, notes)
    _save(where, made.config(str(output.resolve())))
    since = ""
    if made.first is not None and made.first < (now or datetime.now(timezone.utc)) \
            - OTAVA_WINDOW:
        since = f" --since {made.first:%Y-%m-%d}"  # Otava reads a year unless told
    return Exported(None, [*written.notes, f"otava config: {where}; run: otava analyze "
                                           f"--config-file {where}{since} {made.test}"])


def _measured(found: object, filters: Filters) -> None:
    """An export of nothing is an error: the runs matched, but none measured a throughput."""
    if not found:
        raise ScalestudyError(f"no completed run with a throughput matches{filters.words()}: "
                              "nothing to export (`--format csv` writes every attempt)")


def _write(output: Path | None, text: str, notes: list[str]) -> Exported:
    """The export for stdout, or written to `output` (atomically: all of it or nothing)."""
    if output is None:
        return Exported(text, notes)
    _save(output, text)
    return Exported(None, [*notes, f"written: {output}"])


def _save(path: Path, text: str) -> None:
    try:
        write_text_atomic(path, text)
    except OSError as exc:
        raise ScalestudyError(f"{path}: cannot write it ({exc.strerror}); give -o a path in "
                              "a directory you can write") from None
