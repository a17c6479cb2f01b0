"""ReFrame: each performance variable of each test case, read from a JSON run report
(`--report-file`) or from a performance log (the `filelog` handler's perflog, whose
columns its own header line names); each names its ReFrame session (details["session"],
the campaign): a report's uuid, a perflog's as `_Sessions` finds them."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Final, NamedTuple

from scalestudy.core.errors import ScalestudyError
from scalestudy.core.values import JSON, JSONObject, number
from scalestudy.results.analysis import columns as col
from scalestudy.results.history.imports.common import Imported, ImportPoint

EXPECTED = ("a ReFrame JSON run report (session_info, runs) or a perflog that starts "
            "with its header line")
#: The point's keys besides model, world size and nodes: the partition as ReFrame names
#: it in full (`system:partition`, so two systems' partitions never mix), the
#: programming environment and the performance variable.
PARTITION: Final = "partition"
ENVIRON: Final = "environ"
PERF_VAR: Final = "perf_var"
#: Results of test cases that never ran (ReFrame skipped them): nothing to import.
NOT_RUN = frozenset({"skip", "skipped", "fail_deps"})
#: A perflog's value that says "none" (ReFrame writes None, or null after json).
_NONE = frozenset({"", "None", "null"})
#: `Name %param=value ... /hash @system:partition+environ` (check_info).
_INFO4 = re.compile(r"^(?P<name>.+?)(?: /(?P<hash>[0-9a-f]{8}))?(?: @(?P<system>[^:+\s]+)"
                    r"(?::(?P<partition>[^+\s]+))?(?:\+(?P<environ>\S+))?)?$")
_PARAM = re.compile(r"%([\w.]+)=(\S+)")
_WORDS = re.compile(r"([A-Za-z_]\w*)")  # split: text, word, text, ..., text
#: What only a data line holds: a date, or a field that is a number or a result.
_DATA = re.compile(r"\d{4}-\d\d-\d\d|(?:^|\|)(?:[-+]?\d[\d.eE+-]*|pass|fail|None|null)(?:\||$)")
#: The columns a perflog may start with: a later line that starts with one is the
#: header of another perflog appended to the first (`cat perflogs/*/*/*.log`).
#: A perflog line whose job started this long after the line before ended: a new session.
SESSION_GAP = timedelta(hours=1)
_HEADER_FIRST = frozenset({"result", "job_completion_time", "job_completion_time_unix",
                           "asctime", "info", "name", "display_name", "system", "jobid"})


@dataclass
class _Case:
    """One test case, as the report or a perflog line says it."""

    name: str | None
    system: str | None
    partition: str | None
    environ: str | None
    result: str | None
    jobid: str | None = None
    num_tasks: int | None = None
    per_node: int | None = None  # num_tasks_per_node
    nodelist: list[str] = field(default_factory=list)
    ended: datetime | None = None
    extra: JSONObject = field(default_factory=dict)  # version, hashcode, file, ...


class _Perf(NamedTuple):
    """One performance variable of a case, as ReFrame gives it (thresholds: fractions
    of the reference; result: the variable's own pass or fail, where it says one)."""

    value: float | None
    unit: str | None
    ref: float | None
    lower: float | None
    upper: float | None
    result: str | None


def read(text: str, gpus: int | None) -> list[Imported]:
    """The measurements of a ReFrame run report or perflog."""
    if text.lstrip().startswith("{"):
        return _report(text, gpus)
    return _perflog(text, gpus)


def _measurement(case: _Case, var: str, perf: _Perf, gpus: int | None) -> Imported | None:
    """One performance variable of a case: a measurement where ReFrame has its value
    (also where it missed its reference: ReFrame's `fail` is then in details.result),
    aborted where the case failed before it measured; None where the case never ran."""
    if case.result in NOT_RUN:
        return None
    params = {k: _scalar(v) for k, v in _PARAM.findall(case.name or "")}
    tasks = case.num_tasks if case.num_tasks and case.num_tasks > 0 else None
    # the nodes the test asked for, where it says its tasks per node (the nodelist that
    # ReFrame reads back from the scheduler can miss some), else those of the nodelist
    nodes = (-(-tasks // case.per_node) if tasks and case.per_node and case.per_node > 0
             else len(set(case.nodelist)) or None)
    point: ImportPoint = {col.MODEL: case.name, col.WORLD_SIZE: tasks or gpus,
             col.NODES: nodes,
             PARTITION: f"{case.system}:{case.partition}" if case.system else case.partition,
             ENVIRON: case.environ, PERF_VAR: var}
    details = {col.SYSTEM: case.system, "partition": case.partition, "environ": case.environ,
               "jobid": case.jobid, "perf_var": var, "reference": perf.ref,
               "lower_thres": perf.lower, "upper_thres": perf.upper, "result": case.result,
               "perf_result": perf.result,
               "params": params, "nodelist": case.nodelist or None, **case.extra}
    if perf.value is None:
        why = (case.extra.get("fail_reason") or
               f"ReFrame has no value of {var}: the test case's result is "
               f"{case.result or 'not given'}, so it failed before it measured")
        return Imported(point, None, perf.unit or "", {**details, "why": why},
                        status="aborted", ended=case.ended)
    return Imported(point, perf.value, perf.unit or "", details, ended=case.ended)


# ------------------------------------------------------------------------- the report

def _report(text: str, gpus: int | None) -> list[Imported]:
    """A JSON run report of ReFrame 4: per test case, `perfvalues` {"sys:part:var":
    [value, reference, lower, upper, unit(, result since 4.x)]}."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ScalestudyError(f"not complete JSON ({exc}): a ReFrame report cut off? "
                              "import the report ReFrame wrote at the end of its session, "
                              "or the perflog") from None
    if not isinstance(data, dict) or "runs" not in data or "session_info" not in data:
        raise ScalestudyError("JSON, but not a ReFrame run report (it has no session_info "
                              "and runs): give the file of `reframe --report-file`")
    session = _dict(data["session_info"], "session_info")
    runs = _list(data["runs"], "runs")
    version = session.get("version")
    session_end = _unix(session.get("time_end_unix"), "session_info.time_end_unix")
    out: list[Imported] = []
    for r, run in enumerate(runs):
        cases = _list(_dict(run, f"runs[{r}]").get("testcases", []), f"runs[{r}].testcases")
        for c, raw in enumerate(cases):
            where = f"runs[{r}].testcases[{c}]"
            tc = _dict(raw, where)
            case = _report_case(tc, where, session_end)
            case.extra.update({"reframe": str(version) if version else None,
                               "run_index": r, "session": _session_of(session, tc)})
            out += [m for var, perf in _report_perf(tc, where)
                    if (m := _measurement(case, var, perf, gpus)) is not None]
    return out


def _session_of(session: JSONObject, tc: JSONObject) -> str | None:
    """A report's session: its uuid (ReFrame 4.7 on), else when it started."""
    uuid = session.get("uuid") or tc.get("session_uuid")
    start = session.get("time_start")
    return f"reframe {uuid}" if uuid else (f"reframe {start}" if start else None)


def _report_case(tc: JSONObject, where: str, session_end: datetime | None) -> _Case:
    """A report's test case."""
    tasks, per_node = (_whole_json(tc.get(k), f"{where}.{k}")
                       for k in ("num_tasks", "num_tasks_per_node"))
    nodes = tc.get("job_nodelist") or []
    if not isinstance(nodes, list):
        raise ScalestudyError(f"{where}.job_nodelist: {nodes!r} is not a list of nodes")
    ended = _unix(tc.get("job_completion_time_unix"), f"{where}.job_completion_time_unix")
    jobid = tc.get("jobid")
    return _Case(
        name=_text(tc.get("display_name") or tc.get("name"), f"{where}.display_name"),
        system=_text(tc.get("system"), f"{where}.system"),
        partition=_text(tc.get("partition"), f"{where}.partition"),
        environ=_text(tc.get("environ"), f"{where}.environ"),
        result=_text(tc.get("result"), f"{where}.result"),
        jobid=None if jobid is None else str(jobid), num_tasks=tasks, per_node=per_node,
        nodelist=[str(n) for n in nodes], ended=ended or session_end,
        extra={"hashcode": tc.get("hashcode"), "check_file": tc.get("filename"),
               "scheduler": tc.get("scheduler"), "fail_phase": tc.get("fail_phase"),
               "fail_reason": tc.get("fail_reason")})


def _report_perf(tc: JSONObject, where: str) -> list[tuple[str, _Perf]]:
    """The case's performance variables, by name."""
    if "perfvalues" not in tc and "perfvars" in tc:
        raise ScalestudyError(f"{where}: `perfvars`, a report of ReFrame 3, which this "
                              "reader does not know: import its perflog, or rerun with "
                              "ReFrame 4")
    found: list[tuple[str, _Perf]] = []
    for key, info in _dict(tc.get("perfvalues") or {}, f"{where}.perfvalues").items():
        at = f"{where}.perfvalues[{key!r}]"
        if not isinstance(info, list) or len(info) not in (5, 6):
            raise ScalestudyError(f"{at}: {_short(info)} is not [value, reference, lower, "
                                  "upper, unit(, result)]")
        value, ref, lower, upper, unit, *result = info
        found.append((str(key).split(":")[-1], _Perf(
            _number(value, f"{at}[0]"), _text(unit, f"{at}[4]"), _number(ref, f"{at}[1]"),
            _number(lower, f"{at}[2]"), _number(upper, f"{at}[3]"),
            _text(result[0], f"{at}[5]") if result else None)))
    return found


def _dict(value: object, where: str) -> JSONObject:
    if not isinstance(value, dict):
        raise ScalestudyError(f"{where}: {_short(value)} is not an object")
    return value


def _list(value: object, where: str) -> list[JSON]:
    if not isinstance(value, list):
        raise ScalestudyError(f"{where}: {_short(value)} is not a list")
    return value


def _text(value: object, where: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ScalestudyError(f"{where}: {_short(value)} is not text")
    return value


def _number(value: object, where: str) -> float | None:
    """A report's number (None: not measured, no reference or no threshold)."""
    found = number(value, finite=False)
    if found is None and value is not None:
        raise ScalestudyError(f"{where}: {_short(value)} is not a number")
    return found


def _whole_json(value: object, where: str) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ScalestudyError(f"{where}: {_short(value)} is not a whole number")
    return value


def _unix(value: object, where: str) -> datetime | None:
    seconds = _number(value, where)
    return None if seconds is None else datetime.fromtimestamp(seconds, timezone.utc)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _scalar(text: str) -> int | float | str:
    """A parameter's value as the display name prints it: a number where it is one."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


# ------------------------------------------------------------------------ the perflog

class _Layout:
    """The columns of a perflog, from its header line: a field that is one name is that
    column; a field with text around its names (`jobid=jobid`, `ref=perf_ref (l=...)`)
    is matched as a pattern, a word whose value is itself being that text."""

    def __init__(self, header: str, lineno: int) -> None:
        self.header, self.lineno = header, lineno
        self.fields: list[tuple[str, list[str], re.Pattern[str] | None]] = []
        for text in header.split("|"):
            parts = _WORDS.split(text)
            if parts[::2] == ["", ""]:  # one name, nothing around it
                self.fields.append((text, parts[1:2], None))
                continue
            pattern = "".join(re.escape(p) if i % 2 == 0 else "(.*?)" for i, p in enumerate(parts))
            self.fields.append((text, parts[1::2], re.compile(f"^{pattern}$")))
        names = {n for _, words, _ in self.fields for n in words}
        self.vars = sorted(n.removesuffix("_value") for n in names
                           if n.endswith("_value") and n != "perf_value"
                           and (f"{n[:-6]}_unit" in names or f"{n[:-6]}_ref" in names))
        self.names = names
        self._check()

    def _check(self) -> None:
        """Refuse a header whose perflog cannot be read safely, saying what to add."""
        where = f"line {self.lineno} (the header)"
        fix = ("to the perflog handler's `format` (or read the JSON report of "
               "`reframe --report-file` instead)")
        if "perf_value" in self.names:
            for need, spec in (("perf_var", "%(check_perf_var)s"),
                               ("perf_unit", "%(check_perf_unit)s")):
                if need not in self.names:
                    raise ScalestudyError(f"{where}: perf_value without {need}: add {spec} "
                                          f"{fix}")
        elif not self.vars:
            raise ScalestudyError(
                f"{where}: names no performance value (neither perf_value, one line per "
                "variable, nor <var>_value with <var>_unit): add %(check_perfvalues)s (or "
                f"%(check_#ALL)s) {fix}, with format_perfvars holding %(check_perf_value)s "
                "and %(check_perf_unit)s")
        else:
            for var in self.vars:
                if f"{var}_unit" not in self.names:
                    raise ScalestudyError(f"{where}: {var}_value without {var}_unit: add "
                                          "%(check_perf_unit)s to format_perfvars")
        if not self.names & {"display_name", "name", "info", "short_name", "unique_name"}:
            raise ScalestudyError(f"{where}: names no test (display_name, name or info): "
                                  f"add %(check_display_name)s or %(check_info)s {fix}")

    def row(self, line: str, lineno: int) -> dict[str, str]:
        """A data line's values by column name."""
        parts = line.split("|")
        if len(parts) != len(self.fields):
            raise ScalestudyError(
                f"line {lineno}: {len(parts)} fields where the header (line {self.lineno}) "
                f"has {len(self.fields)}: a value holding `|`, or a line of another "
                "layout without its header; remove it, or import the JSON report")
        row: dict[str, str] = {}
        for (text, words, pattern), part in zip(self.fields, parts, strict=True):
            if pattern is None:
                row[words[0]] = part
                continue
            found = pattern.match(part)
            if found is None:
                raise ScalestudyError(f"line {lineno}: {part!r} does not read as the "
                                      f"header's field {text!r}")
            for word, value in zip(words, found.groups(), strict=True):
                if value != word:
                    row[word] = value
        return row


def _perflog(text: str, gpus: int | None) -> list[Imported]:
    """A perflog: a header line, then one line per test case (ReFrame 4's default: every
    variable's <var>_value, <var>_unit, ... on it) or per variable (perflog_multiline:
    perf_var, perf_value, ...); perflogs appended to each other keep their headers."""
    layout: _Layout | None = None
    out: list[Imported] = []
    sessions = _Sessions()
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        first = line.split("|", 1)[0]
        if layout is None or line == layout.header or first in _HEADER_FIRST:
            if "|" not in line:
                return []  # not a perflog at all
            if _DATA.search(line):
                raise ScalestudyError(
                    f"line {lineno}: a perflog line before any header line: ReFrame 4 "
                    "writes the header first; put it back (from another perflog of the "
                    "same handler), or import the JSON report of `reframe --report-file`")
            layout = _Layout(line, lineno)
            continue
        row = layout.row(line, lineno)
        out += _perflog_line(layout, row, lineno, gpus, sessions.of(row, lineno))
    return out


class _Sessions:
    """The sessions of a perflog's lines, which name none: one starts at the first line,
    and where a case (with its variable) comes back or SESSION_GAP passed."""

    def __init__(self) -> None:
        self.name: str | None = None
        self.seen: set[tuple[str | None, ...]] = set()
        self.last: datetime | None = None

    def of(self, row: dict[str, str], lineno: int) -> str:
        case = tuple(row.get(k) for k in ("display_name", "name", "info", "unique_name",
                                          "hashcode", "system", "partition", "environ",
                                          "perf_var"))
        ended = _when(row, lineno)
        started = _unix_text(row.get("job_submit_time")) or ended
        if self.name is None or case in self.seen or (
                started and self.last and started - self.last > SESSION_GAP):
            self.name = f"reframe perflog {started.isoformat() if started else lineno}"
            self.seen = set()
        self.seen.add(case)
        self.last = ended or self.last
        return self.name


def _unix_text(text: str | None) -> datetime | None:
    """A perflog's Unix time (job_submit_time), where it is one."""
    try:
        return datetime.fromtimestamp(float(text or ""), timezone.utc)
    except (ValueError, OverflowError, OSError):
        return None


def _perflog_line(layout: _Layout, row: dict[str, str], lineno: int,
                  gpus: int | None, session: str) -> list[Imported]:
    """The measurements of one perflog line."""
    info = row.get("info", "")
    said = _INFO4.match(info) if info else None
    parts = said.groupdict() if said else {}

    def get(name: str) -> str | None:
        value = row.get(name, parts.get(name))
        return None if value is None or value in _NONE else value

    case = _Case(
        name=get("display_name") or get("name") or get("short_name") or get("unique_name"),
        system=get("system"), partition=get("partition"), environ=get("environ"),
        result=get("result"), jobid=get("jobid"),
        num_tasks=_whole(get("num_tasks"), "num_tasks", lineno),
        per_node=_whole(get("num_tasks_per_node"), "num_tasks_per_node", lineno),
        nodelist=[n for n in (get("job_nodelist") or "").split(",") if n],
        ended=_when(row, lineno),
        extra={"hashcode": get("hashcode") or get("hash"), "reframe": get("version"),
               "fail_phase": get("fail_phase"), "fail_reason": get("fail_reason"),
               "session": session})
    if "perf_value" in layout.names:
        prefixes = {str(row.get("perf_var")): "perf"}
    else:
        prefixes = {var: var for var in layout.vars}
    out = []
    for var, p in prefixes.items():
        value, ref, lower, upper = (_value(row.get(f"{p}_{k}"), f"{p}_{k}", lineno)
                                    for k in ("value", "ref", "lower_thres", "upper_thres"))
        perf = _Perf(value, row.get(f"{p}_unit"), ref, lower, upper, row.get(f"{p}_result"))
        if (found := _measurement(case, var, perf, gpus)) is not None:
            out.append(found)
    return out


def _value(text: str | None, name: str, lineno: int) -> float | None:
    """A perflog's number (None where it says None or null)."""
    if text is None or text in _NONE:
        return None
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if math.isnan(number):
        raise ScalestudyError(f"line {lineno}: {name} {text!r} is not a number")
    return int(number) if number.is_integer() and "." not in text else number


def _whole(text: str | None, name: str, lineno: int) -> int | None:
    number = _value(text, name, lineno)
    if number is not None and not float(number).is_integer():
        raise ScalestudyError(f"line {lineno}: {name} {text!r} is not a whole number")
    return None if number is None else int(number)


def _when(row: dict[str, str], lineno: int) -> datetime | None:
    """When the case's job completed: job_completion_time_unix, else
    job_completion_time or asctime (UTC where they name no offset)."""
    unix = _value(row.get("job_completion_time_unix"), "job_completion_time_unix", lineno)
    if unix is not None:
        return datetime.fromtimestamp(unix, timezone.utc)
    for name in ("job_completion_time", "asctime"):
        text = row.get(name)
        if text is None or text in _NONE:
            continue
        try:
            moment = datetime.fromisoformat(text.replace(",", "."))
        except ValueError:
            raise ScalestudyError(
                f"line {lineno}: {name} {text!r} is not an ISO date: set the handler's "
                "datefmt to %FT%T%:z, or add %(check_job_completion_time_unix)s") from None
        return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    return None
