"""A study's workspace on disk: file names, the one atomic writer, tails of logs and
records, the study lock, and the attempts kept when a run is run again.

The layout is documented in docs/results-layout.md. Every write goes through
`write_atomic` (temporary file, fsync, rename): a crash never leaves half a file.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from scalestudy.core.errors import ScalestudyError
from scalestudy.core.values import JSON, JSONMapping, JSONObject, number
from scalestudy.workload import record as metrics_record
from scalestudy.workload.record import MetricsRecord

METRICS = "metrics.jsonl"
STATUS = "status.json"
RUN_JSON = "run.json"
SCRIPT = "job.sh"
#: How much of the end of metrics.jsonl is read to find its last record.
METRICS_TAIL_BYTES = 64 * 1024
NO_RECORD = "no metrics record in metrics.jsonl"
BAD_THROUGHPUT = "throughput is not a finite positive number"
#: The campaign (one `scalestudy run`) an attempt belongs to, written as it starts.
CAMPAIGN = "campaign"
# What a new attempt moves aside so that earlier attempts' logs are kept.
ATTEMPT_FILES = ("stdout.log", "stderr.log", STATUS, METRICS, "env.txt", "hosts.txt",
                 "exit_code", CAMPAIGN)


#: The version of run.json this release writes (version 1 has no `schema` key).
RUN_SCHEMA = "scalestudy.run/2"


def write_run(directory: Path, params: JSONMapping) -> None:
    """run.json: the run's parameters (core.grid.Run.params), with its schema."""
    write_json_atomic(Path(directory) / RUN_JSON, {"schema": RUN_SCHEMA, **params})


def read_run(directory: Path) -> JSONObject | None:
    """The parameters run.json holds (either version), or None where it is missing or
    unreadable."""
    try:
        data = json.loads((Path(directory) / RUN_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    data.pop("schema", None)
    return data


def write_atomic(path: Path, data: str | bytes, mode: int = 0o644) -> None:
    """Write a file so that readers see the old or the new content, never a part: a
    temporary file in the same directory, fsynced, then renamed over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Text through `write_atomic`."""
    write_atomic(path, text, mode)


def write_json_atomic(path: Path, data: JSON) -> None:
    """JSON (sorted keys, indented) written atomically."""
    write_text_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def _read_tail(path: Path, max_bytes: int) -> bytes:
    """The last `max_bytes` of a file, starting at a line boundary (OSError if unreadable)."""
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size <= max_bytes:
            fh.seek(0)
            return fh.read()
        # Read one byte more: if it is a newline, the cut falls on a line boundary.
        fh.seek(size - max_bytes - 1)
        data = fh.read()
    cut = data.find(b"\n")
    return b"" if cut < 0 else data[cut + 1 :]


def read_record(path: Path, max_bytes: int = METRICS_TAIL_BYTES) -> MetricsRecord | None:
    """The last line of metrics.jsonl that parses as a JSON object, else None.

    Only the last `max_bytes` are read; a missing or unreadable file gives None.
    """
    try:
        data = _read_tail(Path(path), max_bytes)
    except OSError:
        return None
    for raw in reversed(data.split(b"\n")):
        raw = raw.strip()
        if not raw:
            continue
        try:
            obj = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            continue
        record = metrics_record.parse(obj)
        if record is not None:
            return record
    return None


def record_problem(record: JSONMapping | None) -> str | None:
    """Why a metric record cannot count as a completed run, or None when it can."""
    if record is None:
        return NO_RECORD
    newer = metrics_record.problem(record)
    if newer:
        return newer
    value = number(record.get("throughput"))
    if value is None or value <= 0:
        return BAD_THROUGHPUT
    return None


def tail_text(path: Path, lines: int = 20, max_bytes: int = 16384) -> str:
    """The last `lines` lines of a text file (at most `max_bytes` read); "" if unreadable."""
    if lines <= 0:
        return ""
    try:
        data = _read_tail(Path(path), max_bytes)
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


#: File descriptors of the study locks this process holds. Scheduler commands inherit
#: them (execute.commands): an sbatch left running by a `run` killed with SIGKILL keeps
#: the study locked until it has ended, so no second `run` can submit meanwhile.
HELD_LOCKS: set[int] = set()


@contextlib.contextmanager
def study_lock(directory: Path) -> Iterator[None]:
    """Hold results/<study>/.lock while running or submitting: a second `run` of the same
    study refuses instead of running or submitting the same runs twice. Directories it
    made for the lock alone are removed again when nothing else was written (a `run`
    refused by its preflight leaves no results/<study>/ behind)."""
    made = [d for d in (directory, *directory.parents) if not d.exists()]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / ".lock"
    with path.open("a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            pid = holder.removeprefix("pid ")
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                raise ScalestudyError(
                    f"{directory}: a scheduler command started by `scalestudy run` ({holder}, "
                    "which has ended) is still running and holds the study's lock; run again "
                    "in a few seconds, once it has ended") from None
            raise ScalestudyError(
                f"{directory}: another `scalestudy run` ({holder}) is working on this study; "
                "wait for it to finish (or stop it), then run again"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()}\n")
        fh.flush()
        HELD_LOCKS.add(fh.fileno())
        try:
            yield
        finally:
            HELD_LOCKS.discard(fh.fileno())
            fh.truncate(0)
            if made and os.listdir(directory) == [".lock"]:
                with contextlib.suppress(OSError):
                    path.unlink()
                    for created in made:  # innermost first; stops at one not empty
                        created.rmdir()
            fcntl.flock(fh, fcntl.LOCK_UN)


def archive_attempt(directory: Path, campaign: str | None = None) -> Path | None:
    """Move the previous attempt's logs and status to attempts/<n>/ (nothing is lost);
    the new attempt's `campaign` file names the `run` that starts it."""
    present = [name for name in ATTEMPT_FILES if (directory / name).exists()]
    target = None
    if present:
        attempts = directory / "attempts"
        attempts.mkdir(exist_ok=True)
        number = 1 + sum(1 for p in attempts.iterdir() if p.is_dir())
        target = attempts / str(number)
        target.mkdir()
        for name in present:
            os.replace(directory / name, target / name)
    if campaign:
        write_text_atomic(directory / CAMPAIGN, f"{campaign}\n")
    return target


def read_campaign(directory: Path) -> str | None:
    """The campaign an attempt (a run directory or attempts/<n>/) belongs to, if known."""
    try:
        return (Path(directory) / CAMPAIGN).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def new_campaign() -> str:
    """A campaign id: its start in UTC, sortable, and 4 random hex digits."""
    import secrets
    from datetime import datetime, timezone

    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{secrets.token_hex(2)}"


def attempt_count(directory: Path) -> int:
    """Attempts a run has had: those kept in attempts/<n>/, plus the current one when it
    left files (a pending run has had none)."""
    attempts = directory / "attempts"
    kept = sum(1 for p in attempts.iterdir() if p.is_dir()) if attempts.is_dir() else 0
    return kept + any((directory / name).exists() for name in ATTEMPT_FILES)


def extract_throughput(log: Path, pattern: str) -> float | None:
    """The last match of a `command` workload's pattern in its stdout (tail only)."""
    regex = re.compile(pattern)
    text = tail_text(log, lines=100000, max_bytes=4 << 20)
    matches = list(regex.finditer(text))
    if not matches:
        return None
    match = matches[-1]
    raw = match.group("throughput") if "throughput" in regex.groupindex else match.group(1)
    try:
        return float(raw)
    except (TypeError, ValueError):
        return None


def record_command_throughput(run_dir: Path, params: Mapping[str, int], pattern: str
                              ) -> str | None:
    """Write a `command` workload's record from the throughput its pattern finds in
    stdout.log; the reason when there is none (None when written)."""
    value = extract_throughput(run_dir / "stdout.log", pattern)
    if value is None:
        return f"the throughput pattern {pattern!r} matched nothing in stdout.log"
    record = metrics_record.command_record(value, params)
    extra = program_record(run_dir / "stdout.log")
    record.update({k: v for k, v in extra.items() if k not in record})  # type: ignore[typeddict-item]
    write_text_atomic(run_dir / METRICS, json.dumps(record, sort_keys=True) + "\n")
    return None


#: A `command` program's own record keys: the last stdout line starting with this,
#: followed by a JSON object (e.g. `scalestudy-record: {"input_wait_fraction": 0.12}`).
RECORD_PREFIX = "scalestudy-record:"


def program_record(log: Path) -> JSONObject:
    """The scalar keys of the last `scalestudy-record: {...}` line in a program's stdout
    (empty when there is none, or it is not a JSON object): they join its record, so its
    input wait and read bandwidth land in the bundled benchmark's columns."""
    text = tail_text(log, lines=100000, max_bytes=4 << 20)
    for line in reversed(text.splitlines()):
        if line.startswith(RECORD_PREFIX):
            try:
                found = json.loads(line[len(RECORD_PREFIX):])
            except ValueError:
                return {}
            return ({k: v for k, v in found.items() if isinstance(k, str)
                     and (v is None or isinstance(v, (str, int, float, bool)))}
                    if isinstance(found, dict) else {})
    return {}


_NOTABLE = re.compile(r"error|exception|traceback|killed|out of memory|timed? ?out", re.I)

# What a launcher writes about a failed program, as opposed to what the program wrote.
# torchrun's logger ("E1123 11:19:48.783000 17076 torch/distributed/elastic/...] failed"):
_AGENT_LOG = re.compile(
    r"^[IWEF]\d{4} [\d:.]+ +\d+ torch/distributed/(?:run\.py|elastic/|launcher/)")
# a frame of torchrun's own code (its traceback ends in ChildFailedError):
_AGENT_FRAME = re.compile(r'^\s*File ".*torch/distributed/(?:run\.py|elastic/|launcher/)')
_FRAME = re.compile(r'^\s*File "')
_BORDER = re.compile(r"^={20,}$")
# launchers' one-line summaries of how the ranks ended:
_SUMMARY = re.compile(
    r"^srun: error: \S+: tasks? [\d,-]+: (?:Exited with exit code|Terminated)|"
    r"^mpirun (?:detected|noticed) that|^Primary job +terminated normally|"
    r"rank \d+ exited with code \d+|^application \d+ exit codes?:")
# the fields of an entry of torchrun's report that say which rank failed, and how
_REPORT_FIELD = re.compile(r"^\s*(?:host|rank|exitcode)\s*:")
# Open MPI's boxed messages about how the ranks ended, between lines of dashes
_MPI_RULE = re.compile(r"^-{20,}$")
_MPI_BOX = re.compile(r"mpirun|Primary job|MPI_ABORT|ORTE|PRTE|Open MPI|prterun")


def _mpi_boxes(lines: Sequence[str]) -> set[int]:
    """The indices of Open MPI's boxed reports (a rule, the words, a rule)."""
    marked: set[int] = set()
    rules = [i for i, line in enumerate(lines) if _MPI_RULE.match(line.strip())]
    for start, end in itertools.pairwise(rules):
        if end - start <= 12 and any(_MPI_BOX.search(lines[i]) for i in range(start, end)):
            marked.update(range(start, end + 1))
    return marked


def root_cause_lines(lines: Sequence[str]) -> list[int]:
    """The indices of the host, rank and exitcode lines of torchrun's "Root Cause"
    entries (which rank failed first, and how)."""
    found, inside = [], False
    for i, line in enumerate(lines):
        if line.startswith("Root Cause"):
            inside = True
        elif _BORDER.match(line):
            inside = False
        elif inside and _REPORT_FIELD.match(line):
            found.append(i)
    return found


def _agent_traceback(lines: Sequence[str], i: int) -> bool:
    """Whether line i starts torchrun's own traceback (its first frame past runpy's is
    torchrun's code)."""
    if not lines[i].startswith("Traceback (most recent call last)"):
        return False
    frames = [ln for ln in lines[i + 1:i + 12] if _FRAME.match(ln) and "<frozen runpy>" not in ln]
    return bool(frames) and bool(_AGENT_FRAME.match(frames[0]))


def launcher_lines(lines: Sequence[str]) -> set[int]:
    """The indices of the lines a launcher wrote about a failed program: torchrun's
    traceback, its "Root Cause" report and its log lines, srun's and MPI's exit
    summaries, Open MPI's boxed reports. The other lines are the program's (and the job
    script's)."""
    marked: set[int] = set()
    report = root_seen = frame = False
    for i, line in enumerate(lines):
        if report:
            marked.add(i)
            root_seen = root_seen or line.startswith("Root Cause")
            report = not (root_seen and _BORDER.match(line))
            continue
        if _BORDER.match(line) and i + 1 < len(lines) and lines[i + 1].endswith(" FAILED"):
            marked.add(i)
            report, root_seen = True, False
            continue
        if _FRAME.match(line):
            frame = bool(_AGENT_FRAME.match(line)) or (
                "<frozen runpy>" in line and i - 1 in marked)
        elif not line.startswith("    "):
            frame = False
        if (frame or "ChildFailedError" in line or _AGENT_LOG.match(line)
                or _SUMMARY.search(line) or _agent_traceback(lines, i)):
            marked.add(i)
    # Two agents' tracebacks interleave: a code line next to torchrun's frame is its own.
    marked.update(i for i, line in enumerate(lines) if line.startswith("    ") and any(
        _AGENT_FRAME.match(n) for n in lines[max(i - 1, 0):i + 2]))
    return marked | _mpi_boxes(lines)


def log_tail(run_dir: Path, lines: int = 20) -> str:
    """Of each log: the program's lines that look like errors, its last lines, then the
    launcher's summary (torchrun's report, srun's exit lines), which would bury them."""
    parts = []
    for name in ("stderr.log", "stdout.log"):
        text = tail_text(run_dir / name, lines=400, max_bytes=65536)
        if not text.strip():
            continue
        all_lines = text.splitlines()
        marked = launcher_lines(all_lines)
        program = [ln for i, ln in enumerate(all_lines) if i not in marked]
        root_cause = root_cause_lines(all_lines)
        notable = [ln for ln in program[:-lines] if _NOTABLE.search(ln)][-8:]
        if notable:
            parts.append(f"--- {name} (lines that look like errors) ---\n" + "\n".join(notable))
        if program:
            parts.append(f"--- {name} (last lines) ---\n" + "\n".join(program[-lines:]))
        summary = [ln for i, ln in enumerate(all_lines) if i in marked and (
            _AGENT_LOG.match(ln) or _SUMMARY.search(ln) or i in root_cause)]
        if summary:
            parts.append(f"--- {name} (the launcher's summary) ---\n"
                         + "\n".join(summary[-8:]))
    return "\n".join(parts)
