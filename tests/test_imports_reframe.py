"""`history import --format reframe`: ReFrame 4.10.4's own run reports and perflogs (made
by tests/data/reframe/ on the local scheduler and on the Slurm testbed; see
tests/data/imports/SOURCES.md), read field by field against the report's own numbers,
and malformed ones refused in one line, leaving nothing behind. No ReFrame needed."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from scalestudy.core.errors import ScalestudyError
from scalestudy.results.history.imports import Imported, parse
from tests.conftest import run_cli

DATA = Path(__file__).parent / "data" / "imports"
REPORT = DATA / "reframe_4.10.4_report_testbed_cpu.json"
PERFLOGS = [DATA / f"reframe_4.10.4_perflog_testbed_cpu_{test}.log" for test in
            ("ScalestudyCopyCheck", "ScalestudyUnreachableCheck", "ScalestudyBrokenCheck")]
MULTILINE = DATA / "reframe_4.10.4_perflog_multiline_testbed_cpu_ScalestudyCopyCheck.log"
MULTILINE_REPORT = DATA / "reframe_4.10.4_report_testbed_cpu_multiline_run.json"
SLURM = DATA / "reframe_4.10.4_report_testbed_slurm.json"
SLURM_PERFLOG = DATA / "reframe_4.10.4_perflog_testbed_slurm_ScalestudyCopyCheck.log"
#: What a perflog and the report of one run both say of each measurement.
SHARED = ("system", "partition", "environ", "jobid", "perf_var", "reference", "lower_thres",
          "upper_thres", "result", "params")


def cases(report: Path) -> list[dict[str, Any]]:
    return [tc for run in json.loads(report.read_text())["runs"] for tc in run["testcases"]]


def by_key(found: list[Imported]) -> dict[tuple[str, str], Imported]:
    return {(i.point["model"], i.point["perf_var"]): i for i in found}


def test_report_every_field_is_the_reports_own() -> None:
    found = parse(REPORT, "reframe")
    assert len(found) == 8  # 4 test cases x 2 performance variables
    data = json.loads(REPORT.read_text())
    version = data["session_info"]["version"]
    for tc in cases(REPORT):
        for key, (value, ref, lower, upper, unit, var_result) in tc["perfvalues"].items():
            system, partition, var = key.split(":")
            item = by_key(found)[(tc["display_name"], var)]
            assert item.point == {"model": tc["display_name"], "world_size": tc["num_tasks"],
                                  "nodes": len(tc["job_nodelist"]),
                                  "partition": f"{system}:{partition}",
                                  "environ": tc["environ"], "perf_var": var}
            assert (item.value, item.unit) == (value, unit)
            d = item.details
            assert (d["reference"], d["lower_thres"], d["upper_thres"]) == (ref, lower, upper)
            assert (d["system"], d["partition"], d["environ"]) == (tc["system"],
                                                                  tc["partition"], tc["environ"])
            assert (d["jobid"], d["result"], d["perf_result"]) == (tc["jobid"], tc["result"],
                                                                  var_result)
            assert (d["hashcode"], d["check_file"], d["scheduler"]) == (
                tc["hashcode"], tc["filename"], "local")
            assert d["reframe"] == version == "4.10.4" and d["nodelist"] == tc["job_nodelist"]
            assert item.ended == datetime.fromtimestamp(tc["job_completion_time_unix"],
                                                        timezone.utc)
    copy = by_key(found)[("ScalestudyCopyCheck %size_mb=32", "copy_bw")]
    assert copy.status == "completed" and copy.details["params"] == {"size_mb": 32}
    assert copy.value == 577.7 and copy.unit == "MB/s" and copy.details["reference"] == 100.0


def test_a_missed_reference_is_a_measurement_and_an_error_before_it_is_not() -> None:
    found = by_key(parse(REPORT, "reframe"))
    missed = found[("ScalestudyUnreachableCheck", "copy_bw")]
    assert missed.status == "completed" and missed.value == 2144.9  # measured, too slow
    assert missed.details["result"] == "fail" and missed.details["perf_result"] == "fail"
    assert missed.details["fail_phase"] == "performance"
    assert found[("ScalestudyUnreachableCheck", "elapsed")].details["perf_result"] == "pass"
    for var in ("copy_bw", "elapsed"):
        broken = found[("ScalestudyBrokenCheck", var)]
        assert broken.status == "aborted" and broken.value is None
        assert broken.details["why"] == "sanity error: 0 != 1"  # ReFrame's fail_reason
        assert broken.details["result"] == "fail" and broken.details["fail_phase"] == "sanity"


def test_the_perflogs_and_the_report_of_one_run_say_the_same() -> None:
    report = by_key(parse(REPORT, "reframe"))
    logged = by_key([i for log in PERFLOGS for i in parse(log, "reframe")])
    assert logged.keys() == report.keys()
    for key, want in report.items():
        got = logged[key]
        assert (got.point, got.value, got.unit, got.status, got.ended) == (
            want.point, want.value, want.unit, want.status, want.ended), key
        assert {k: got.details[k] for k in SHARED} == {k: want.details[k] for k in SHARED}
    broken = logged[("ScalestudyBrokenCheck", "copy_bw")]  # the perflog has no fail_reason
    assert broken.status == "aborted" and "failed before it measured" in broken.details["why"]


def test_perflogs_appended_to_each_other_keep_their_headers(tmp_path: Path) -> None:
    joined = tmp_path / "all.log"
    joined.write_text("".join(p.read_text() for p in PERFLOGS))
    assert [(i.point, i.value) for i in parse(joined, "reframe")] == \
        [(i.point, i.value) for p in PERFLOGS for i in parse(p, "reframe")]


def test_a_multiline_perflog_is_read_by_its_decorated_header() -> None:
    """`perflog_multiline` with the pre-4.0 layout (`jobid=%(check_jobid)s|...|ref=...
    (l=..., u=...)`): one line per variable, its header names the fields among text."""
    logged = by_key(parse(MULTILINE, "reframe"))
    report = by_key(parse(MULTILINE_REPORT, "reframe"))
    assert len(logged) == 4
    for key, got in logged.items():
        want = report[key]
        assert got.point == {**want.point, "nodes": None}  # this layout has no nodelist
        assert (got.value, got.unit, got.status) == (want.value, want.unit, want.status)
        assert {k: got.details[k] for k in SHARED} == {k: want.details[k] for k in SHARED}
        assert got.details["reframe"] == "4.10.4" and got.details["hashcode"] == \
            want.details["hashcode"]
        assert got.ended == want.ended.replace(microsecond=0)  # its datefmt: %FT%T%:z
    assert logged[("ScalestudyCopyCheck %size_mb=8", "elapsed")].details["upper_thres"] == 9.0


def test_slurm_report_job_ids_nodes_and_its_perflog() -> None:
    found = by_key(parse(SLURM, "reframe"))
    for tc in cases(SLURM):
        for key in tc["perfvalues"]:
            item = found[(tc["display_name"], key.split(":")[-1])]
            assert item.point["partition"] == "testbed:slurm"
            assert item.point["world_size"] == 2 and item.details["scheduler"] == "slurm"
            # two tasks, one per node: two nodes, also where ReFrame's nodelist lost one
            assert item.point["nodes"] == 2 and item.details["nodelist"] == tc["job_nodelist"]
            assert item.details["jobid"] == tc["jobid"]
    assert found[("ScalestudyUnreachableCheck", "copy_bw")].details["nodelist"] == ["n1"]
    logged = by_key(parse(SLURM_PERFLOG, "reframe"))
    assert len(logged) == 4
    for key, got in logged.items():
        assert (got.point, got.value, got.ended) == (found[key].point, found[key].value,
                                                     found[key].ended)
    assert logged[("ScalestudyCopyCheck %size_mb=8", "copy_bw")].value == 271.20000000000005


def test_gpus_stand_in_only_where_reframe_says_no_tasks(tmp_path: Path) -> None:
    data = json.loads(REPORT.read_text())
    data["runs"][0]["testcases"][0]["num_tasks"] = 0  # flexible: as many as there are
    odd = tmp_path / "flexible.json"
    odd.write_text(json.dumps(data))
    found = parse(odd, "reframe", gpus=8)
    assert found[0].point["world_size"] == 8 and found[2].point["world_size"] == 1


def report_with(tmp_path: Path, change: Any) -> Path:
    data = json.loads(REPORT.read_text())
    change(data)
    path = tmp_path / "changed.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["runs"][0]["testcases"][1]["perfvalues"].__setitem__(
        "testbed:cpu:copy_bw", ["fast", 100.0, -0.9, None, "MB/s", "pass"]),
     r"runs\[0\]\.testcases\[1\]\.perfvalues\['testbed:cpu:copy_bw'\]\[0\]: 'fast' is not a "
     "number"),
    (lambda d: d["runs"][0]["testcases"][0].__setitem__("num_tasks", "two"),
     r"runs\[0\]\.testcases\[0\]\.num_tasks: 'two' is not a whole number"),
    (lambda d: d["runs"][0]["testcases"][0]["perfvalues"].__setitem__(
        "testbed:cpu:elapsed", [0.1, 1.0]), r"is not \[value, reference, lower, upper"),
    (lambda d: d.__setitem__("runs", {"0": []}), r"runs: \{'0': \[\]\} is not a list"),
    (lambda d: d.pop("session_info"), "not a ReFrame run report"),
    (lambda d: [tc.update(perfvars=[{"name": "x"}]) or tc.pop("perfvalues")
                for tc in d["runs"][0]["testcases"]], "a report of ReFrame 3"),
])
def test_a_report_of_wrong_types_is_refused_in_one_line(tmp_path: Path, change: Any,
                                                        message: str) -> None:
    path = report_with(tmp_path, change)
    with pytest.raises(ScalestudyError, match=message) as caught:
        parse(path, "reframe")
    assert str(caught.value).startswith(f"{path}: ") and "\n" not in str(caught.value)


def test_a_truncated_report_is_refused() -> None:
    truncated = DATA / "reframe_4.10.4_report_testbed_cpu_truncated.json"
    with pytest.raises(ScalestudyError, match=r"not complete JSON \(.*line \d+ column") as e:
        parse(truncated, "reframe")
    assert str(e.value).startswith(f"{truncated}: ") and "\n" not in str(e.value)


def perflog_with(tmp_path: Path, change: Any, source: Path = PERFLOGS[0]) -> Path:
    lines = source.read_text().splitlines()
    change(lines)
    path = tmp_path / "changed.log"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(("change", "message"), [
    (lambda lines: lines.pop(0),  # the header lost: a perflog cut from its first line
     "line 1: a perflog line before any header line"),
    (lambda lines: lines.__setitem__(0, lines[0].replace("copy_bw_unit", "copy_bw_units")),
     r"line 1 \(the header\): copy_bw_value without copy_bw_unit: add %\(check_perf_unit\)s"),
    (lambda lines: lines.__setitem__(0, lines[0].replace("_value", "_val")),
     r"line 1 \(the header\): names no performance value .* add %\(check_perfvalues\)s"),
    (lambda lines: lines.__setitem__(0, lines[0].replace("name", "title")),
     r"names no test \(display_name, name or info\): add %\(check_display_name\)s"),
    (lambda lines: lines.__setitem__(2, lines[2].replace("|{}|", "|{a|b}|", 1)),
     r"line 3: 37 fields where the header \(line 1\) has 36"),
    (lambda lines: lines.__setitem__(2, lines[2] + "|extra"), r"line 3: 37 fields"),
])
def test_a_perflog_it_cannot_read_safely_is_refused(tmp_path: Path, change: Any,
                                                    message: str) -> None:
    path = perflog_with(tmp_path, change)
    with pytest.raises(ScalestudyError, match=message) as caught:
        parse(path, "reframe")
    assert str(caught.value).startswith(f"{path}: ") and "\n" not in str(caught.value)


def test_a_perflog_value_that_is_no_number_names_its_line() -> None:
    bad = DATA / "reframe_4.10.4_perflog_testbed_cpu_ScalestudyCopyCheck_bad_value.log"
    with pytest.raises(ScalestudyError, match=r": line 3: copy_bw_value 'n/a' is not a "
                       "number$"):
        parse(bad, "reframe")


def test_a_decorated_field_that_does_not_match_its_header_is_refused(tmp_path: Path) -> None:
    path = perflog_with(tmp_path, lambda lines: lines.__setitem__(
        2, lines[2].replace("|ref=1.0 (l=null, u=9.0)|", "|ref=1.0|")), MULTILINE)
    with pytest.raises(ScalestudyError, match=r"line 3: 'ref=1.0' does not read as the "
                       r"header's field 'ref=perf_ref \(l=perf_lower_thres, "):
        parse(path, "reframe")


def test_text_that_is_no_reframe_output_has_no_results() -> None:
    with pytest.raises(ScalestudyError, match="no reframe results in it"):
        parse(DATA / "SOURCES.md", "reframe")


@pytest.mark.slow  # the CLI in subprocesses
def test_history_import_of_a_report_stores_each_variable(tmp_path: Path) -> None:
    env = {"SCALESTUDY_STORE": str(tmp_path / "h.sqlite")}
    done = run_cli("history", "import", str(REPORT), "--format", "reframe", cwd=tmp_path,
                   env_extra=env)
    assert done.returncode == 0, done.stderr
    assert "8 measurement(s) (reframe), 2 aborted (not a result)" in done.stdout
    rows = json.loads(run_cli("history", "--json", cwd=tmp_path, env_extra=env).stdout)
    assert len(rows) == 8 and {r["system"] for r in rows} == {"testbed"}  # the report's own
    expected = {(i.point["model"], i.point["perf_var"]): i for i in parse(REPORT, "reframe")}
    for row in rows:
        item = expected[(row["model"], row["params"]["perf_var"])]
        assert row["params"]["partition"] == "testbed:cpu" and row["world_size"] == 1
        assert row["metrics"]["value"] == item.value and row["unit"] == item.unit
        assert row["ended"].startswith(item.ended.strftime("%Y-%m-%d %H:%M:%S"))
        assert row["provenance"]["versions"] == {"reframe": "4.10.4"}
        if item.status == "aborted":  # failed before it measured: no value, the reason
            assert row["state"] == "failed" and row["metrics"]["failure"] == "aborted"
        elif item.unit == "MB/s":  # a rate: a throughput
            assert row["state"] == "completed" and row["throughput"] == item.value
        else:  # seconds: kept with its unit, not a throughput
            assert row["state"] == "completed" and row["throughput"] is None
    again = run_cli("history", "import", str(REPORT), "--format", "reframe", "--system",
                    "daint", cwd=tmp_path, env_extra=env)
    assert again.returncode == 0, again.stderr
    rows = json.loads(run_cli("history", "--json", cwd=tmp_path, env_extra=env).stdout)
    assert len(rows) == 8 and {r["system"] for r in rows} == {"daint"}  # --system wins


@pytest.mark.slow  # the CLI in subprocesses
def test_a_file_of_two_systems_needs_system(tmp_path: Path) -> None:
    env = {"SCALESTUDY_STORE": str(tmp_path / "h.sqlite")}
    two = tmp_path / "two.log"  # two systems' perflogs appended to each other
    other = PERFLOGS[0].read_text().replace("|testbed|", "|daint|")
    two.write_text(PERFLOGS[0].read_text() + other)
    refused = run_cli("history", "import", str(two), "--format", "reframe", cwd=tmp_path,
                      env_extra=env)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert f"{two}: results of 2 systems (daint, testbed): import each system's file on its " \
        "own, or give --system NAME" in refused.stderr
    done = run_cli("history", "import", str(two), "--format", "reframe", "--system", "both",
                   cwd=tmp_path, env_extra=env)
    assert done.returncode == 0, done.stderr
    rows = json.loads(run_cli("history", "--json", cwd=tmp_path, env_extra=env).stdout)
    assert sorted(r["params"]["partition"] for r in rows if r["params"]["perf_var"] ==
                  "copy_bw") == ["daint:cpu", "daint:cpu", "testbed:cpu", "testbed:cpu"]


@pytest.mark.slow
@pytest.mark.parametrize("bad", [
    "reframe_4.10.4_perflog_testbed_cpu_ScalestudyCopyCheck_bad_value.log",
    "reframe_4.10.4_report_testbed_cpu_truncated.json"])
def test_a_malformed_file_stores_nothing_and_keeps_nothing(tmp_path: Path, bad: str) -> None:
    env = {"SCALESTUDY_STORE": str(tmp_path / "h.sqlite")}
    done = run_cli("history", "import", str(REPORT), *map(str, PERFLOGS), str(DATA / bad),
                   "--format", "reframe", cwd=tmp_path, env_extra=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()  # one line: the file, where, what
    assert str(DATA / bad) in line and ("line 3: copy_bw_value" in line or
                                        "not complete JSON" in line)
    assert done.stdout == ""
    rows = json.loads(run_cli("history", "--json", cwd=tmp_path, env_extra=env).stdout)
    assert rows == []
    assert not list((tmp_path / "results").glob("imports/*"))  # no copy, no staging folder


@pytest.mark.slow  # the CLI in subprocesses
def test_each_case_keeps_its_own_date_through_a_rebuild(tmp_path: Path) -> None:
    store = tmp_path / "h.sqlite"
    env = {"SCALESTUDY_STORE": str(store)}
    done = run_cli("history", "import", str(SLURM), str(MULTILINE), "--format", "reframe",
                   cwd=tmp_path, env_extra=env)
    assert done.returncode == 0, done.stderr
    before = json.loads(run_cli("history", "--json", cwd=tmp_path, env_extra=env).stdout)
    ends = {tc["jobid"]: datetime.fromtimestamp(tc["job_completion_time_unix"], timezone.utc)
            for tc in cases(SLURM)}
    assert len(set(ends.values())) == 4  # four jobs, four ends
    for row in before:
        if row["study"] == SLURM.stem:
            assert row["ended"].startswith(ends[row["metrics"]["jobid"]].strftime(
                "%Y-%m-%d %H:%M:%S"))
    store.unlink()  # lost: the kept copies bring the same rows back
    assert run_cli("history", "ingest", "results", cwd=tmp_path,
                   env_extra=env).returncode == 0
    after = json.loads(run_cli("history", "--json", cwd=tmp_path, env_extra=env).stdout)
    key = ("study", "system", "run_id", "state", "ended", "throughput", "nodes", "model")
    assert sorted(tuple(str(r[k]) for k in key) for r in after) == \
        sorted(tuple(str(r[k]) for k in key) for r in before)


def _later(line: str, seconds: float, jobs: int) -> str:
    """A perflog line as the same case logs it `seconds` later, in a job `jobs` ids on:
    what a later session appends."""
    fields = line.split("|")
    fields[1] = (datetime.fromisoformat(fields[1]) + timedelta(seconds=seconds)).isoformat()
    fields[7] = str(float(fields[7]) + seconds)
    fields[10] = str(float(fields[10]) + seconds)
    fields[11] = str(int(fields[11]) + jobs)
    return "|".join(fields)


@pytest.mark.slow  # the CLI in subprocesses
def test_a_grown_perflog_adds_only_its_new_lines_one_campaign_a_session(
        tmp_path: Path) -> None:
    """Night 1's perflog is imported; night 2 appends its session to the same file, which
    is imported again: the store holds each measurement once, in two campaigns."""
    header, *lines = (DATA / "reframe_4.10.4_perflog_testbed_cpu_ScalestudyCopyCheck.log"
                      ).read_text().splitlines()
    assert header.split("|")[1] == "job_completion_time" and len(lines) == 2
    log = tmp_path / "perflog.log"
    log.write_text("\n".join([header, *lines]) + "\n")
    env = {"SCALESTUDY_STORE": str(tmp_path / "h.sqlite")}
    first = run_cli("history", "import", str(log), "--format", "reframe", cwd=tmp_path,
                    env_extra=env)
    assert first.returncode == 0, first.stderr
    log.write_text("\n".join([header, *lines, *(_later(x, 86400, 1000) for x in lines)]) + "\n")
    grown = run_cli("history", "import", str(log), "--format", "reframe", cwd=tmp_path,
                    env_extra=env)
    assert grown.returncode == 0, grown.stderr
    assert "8 measurement(s) (reframe); 4 of them held by an earlier import" in grown.stdout
    rows = json.loads(run_cli("history", "--json", cwd=tmp_path, env_extra=env).stdout)
    assert len(rows) == 8  # 2 nights x 2 cases x 2 variables, none twice
    assert len({(r["metrics"]["jobid"], r["params"]["perf_var"]) for r in rows}) == 8
    campaigns = {r["metrics"]["jobid"]: r["campaign"] for r in rows}
    assert len(set(campaigns.values())) == 2
    assert campaigns["4717"] == campaigns["4759"] != campaigns["5717"] == campaigns["5759"]
    # a second session right after the first (the same cases, 10 minutes on): its own
    twice = tmp_path / "twice.log"
    twice.write_text("\n".join([header, *lines, *(_later(x, 600, 100) for x in lines)]))
    sessions = [i.details["session"] for i in parse(twice, "reframe")]
    assert len(set(sessions[:4])) == 1 and len(set(sessions)) == 2


def test_a_report_is_one_campaign_its_session() -> None:
    found = parse(REPORT, "reframe")
    uuid = json.loads(REPORT.read_text())["session_info"]["uuid"]
    assert {i.details["session"] for i in found} == {f"reframe {uuid}"}
