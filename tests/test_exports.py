"""`history export`: the stored history as Bencher's BMF JSON (checked against Bencher's
published schema), an Apache Otava CSV with its config, and a CSV of every attempt, from
a small store of known values; filters, gaps, and the errors a user can meet."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from scalestudy.core.errors import ScalestudyError
from scalestudy.results.history import exports
from scalestudy.results.history.store import Store
from scalestudy.study.exports import Filters, export
from tests.conftest import run_cli

SCHEMA = Path(__file__).parent / "data" / "exports" / "bmf.schema.json"
START = datetime(2026, 6, 1, tzinfo=timezone.utc)
NAME4 = "lab resnet50 1x4 (4 GPUs) batch 32/GPU (128 global) ddp/default image_size=224"
NAME8 = "lab resnet50 2x4 (8 GPUs) batch 32/GPU (256 global) ddp/default image_size=224"
#: per-GPU throughput of each campaign's repeats, at 4 and 8 GPUs
NIGHTS = {"c1": {4: [100.0, 102.0, 98.0], 8: [90.0, 91.0, 92.0]},
          "c2": {4: [104.0, 100.0, 102.0], 8: [80.0, 84.0, 82.0]}}


def attempt(campaign: str, night: int, world: int, repeat: int, per_gpu: float | None, *,
            state: str = "completed", model: str = "resnet50", **more: Any) -> dict[str, Any]:
    nodes = world // 4
    return {"run_id": f"n{nodes}-r{repeat}", "attempt": night + 1, "state": state,
            "nodes": nodes, "ranks_per_node": 4, "world_size": world, "batch_size": 32,
            "global_batch": 32 * world, "backend": "ddp", "tuning": "default",
            "model": model, "repeat": repeat,
            "throughput": None if per_gpu is None else per_gpu * world,
            "throughput_per_gpu": per_gpu, "unit": "img/s",
            "started": START + timedelta(days=night, minutes=10 * repeat),
            "ended": START + timedelta(days=night, minutes=10 * repeat + 5),
            "params": {"image_size": 224, "scaling": "weak"},
            "metrics": None if per_gpu is None else {"step_time_s": 32 / per_gpu},
            "provenance": {"versions": {"torch": "2.13.0", "nccl": f"2.2{night}.0"}},
            "tags": ["nightly"], "campaign": campaign, "system": "lab", "study": "nightly",
            "directory": "/r/nightly", **more}


#: What the store adds to an attempt from its study (not a column of `attempts`).
STUDY_FIELDS = ("system", "study", "directory")


def nightly() -> list[dict[str, Any]]:
    rows = [attempt(c, night, world, rep, v)
            for night, (c, points) in enumerate(NIGHTS.items())
            for world, values in points.items() for rep, v in enumerate(values)]
    return [*rows, attempt("c2", 1, 8, 3, None, state="failed")]


def store(tmp_path: Path, studies: dict[str, list[dict[str, Any]]] | None = None) -> str:
    url = str(tmp_path / "history.sqlite")
    made = Store(url)
    made.put_imported([(f"/r/{name}", name, "lab", "scalestudy",
                        [{k: v for k, v in r.items() if k not in STUDY_FIELDS} for r in rows])
                       for name, rows in (studies or {"nightly": nightly()}).items()])
    made.dispose()
    return url


def test_bencher_holds_the_latest_campaign_of_each_point_with_its_repeat_band(
        tmp_path: Path) -> None:
    done = export("bencher", store(tmp_path))
    assert done.text is not None
    bmf = json.loads(done.text)
    assert bmf == {
        NAME4: {"throughput": {"value": 408.0, "lower_value": 400.0, "upper_value": 416.0},
                "throughput-per-gpu": {"value": 102.0, "lower_value": 100.0,
                                       "upper_value": 104.0},
                "step-time": {"value": 32 / 102, "lower_value": 32 / 104,
                              "upper_value": 32 / 100},
                "scaling-efficiency": {"value": 1.0}},
        NAME8: {"throughput": {"value": 656.0, "lower_value": 640.0, "upper_value": 672.0},
                "throughput-per-gpu": {"value": 82.0, "lower_value": 80.0,
                                       "upper_value": 84.0},
                "step-time": {"value": 32 / 82, "lower_value": 32 / 84,
                              "upper_value": 32 / 80},
                "scaling-efficiency": {"value": 82.0 / 102.0}}}
    assert "the latest campaign of each point (c2)" in done.notes[0]
    jsonschema.validate(bmf, json.loads(SCHEMA.read_text()))
    # Bencher's limits beside the schema: names of at most 1024 characters, measure
    # slugs of at most 64 (https://bencher.dev/docs/reference/bencher-metric-format)
    for name, measures in bmf.items():
        assert 0 < len(name) <= 1024
        assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", m) and len(m) <= 64
                   for m in measures)


def test_bencher_exports_a_chosen_campaign_and_filters(tmp_path: Path) -> None:
    url = store(tmp_path)
    bmf = json.loads(export("bencher", url, Filters(campaign="c1")).text or "")
    assert bmf[NAME4]["throughput-per-gpu"] == {"value": 100.0, "lower_value": 98.0,
                                                "upper_value": 102.0}
    assert bmf[NAME8]["scaling-efficiency"] == {"value": 0.91}
    with pytest.raises(ScalestudyError, match=r"no runs that match .*model vgg16"):
        export("bencher", url, Filters(model="vgg16"))
    with pytest.raises(ScalestudyError, match="campaign c9"):
        export("bencher", url, Filters(campaign="c9"))


def test_bencher_leaves_out_what_it_cannot_state() -> None:
    """One repeat: no band; the curve's smallest scale not measured in the latest
    campaign: no efficiency (never one against another night's baseline)."""
    rows = [attempt("c1", 0, 4, 0, 100.0), attempt("c1", 0, 8, 0, 90.0),
            attempt("c2", 1, 8, 0, 80.0, metrics={})]
    bmf = exports.bencher(rows).bmf
    assert bmf[NAME8] == {"throughput": {"value": 640.0},
                          "throughput-per-gpu": {"value": 80.0}}
    assert bmf[NAME4]["scaling-efficiency"] == {"value": 1.0}
    assert exports.bencher([attempt("c1", 0, 4, 0, None, state="failed")]).bmf == {}


def test_otava_csv_has_a_row_per_campaign_and_a_column_per_point(tmp_path: Path) -> None:
    url = store(tmp_path)
    out = tmp_path / "out" / "nightly.csv"
    done = export("otava", url, output=out)
    assert done.text is None
    header, *rows = list(csv.reader(io.StringIO(out.read_text())))
    assert header == ["time", "campaign", "study", "nccl_version", "torch_version",
                      "not_measured", f"{NAME4} [img/s per GPU]", f"{NAME8} [img/s per GPU]"]
    assert rows == [
        [(START + timedelta(minutes=25)).isoformat(), "c1", "nightly", "2.20.0", "2.13.0", "",
         "100.0", "91.0"],
        [(START + timedelta(days=1, minutes=25)).isoformat(), "c2", "nightly", "2.21.0",
         "2.13.0", "", "102.0", "82.0"]]
    config = yaml.safe_load((tmp_path / "out" / "nightly.yaml").read_text())
    test = config["tests"]["nightly"]
    assert test["type"] == "csv" and test["file"] == str(out.resolve())
    assert test["time_column"] == "time" and test["attributes"] == header[1:6]
    assert test["csv_options"] == {"delimiter": ",", "quote_char": '"'}
    assert test["metrics"] == {c: {"column": c, "direction": 1, "scale": 1}
                               for c in header[6:]}
    assert any(f"otava analyze --config-file {tmp_path / 'out' / 'nightly.yaml'} nightly"
               in n for n in done.notes)


def test_otava_carries_a_value_a_campaign_did_not_measure_and_says_so() -> None:
    rows = [*nightly(), *(attempt("c3", 2, 4, r, 101.0) for r in range(3))]
    made = exports.otava(rows)
    lines = list(csv.reader(io.StringIO(made.csv)))
    assert lines[3][5:] == [NAME8, "101.0", "82.0"]  # c3: 8 GPUs carried from c2
    assert made.carried == 1 and made.campaigns == 3


def test_otava_reads_one_study_at_a_time(tmp_path: Path) -> None:
    url = store(tmp_path, {"nightly": nightly(), "weekly": nightly()})
    with pytest.raises(ScalestudyError, match=r"2 match: nightly .*weekly .*--study NAME"):
        export("otava", url)
    assert "c2" in (export("otava", url, Filters(study="weekly")).text or "")


def test_csv_has_every_attempt_with_its_batch_beside_its_throughput(tmp_path: Path) -> None:
    url = store(tmp_path)
    text = export("csv", url).text or ""
    header, *rows = list(csv.reader(io.StringIO(text)))
    assert header == list(exports.ATTEMPT_COLUMNS)
    assert len(rows) == len(Store(url).rows()) == 13
    at = header.index("throughput")
    assert header[at - 2:at + 2] == ["batch_size", "global_batch", "throughput",
                                     "throughput_per_gpu"]
    first = dict(zip(header, rows[0], strict=True))
    assert first["study"] == "nightly" and first["campaign"] == "c1"
    assert first["state"] == "completed" and float(first["throughput"]) == 400.0
    assert first["ended"] == (START + timedelta(minutes=5)).isoformat()
    assert json.loads(first["params"]) == {"image_size": 224, "scaling": "weak"}
    assert json.loads(first["tags"]) == ["nightly"]
    assert json.loads(first["provenance"])["versions"]["nccl"] == "2.20.0"
    failed = dict(zip(header, rows[-1], strict=True))
    assert failed["state"] == "failed" and failed["throughput"] == "" \
        and failed["metrics"] == ""
    assert len(list(csv.reader(io.StringIO(export(
        "csv", url, Filters(campaign="c1")).text or "")))) == 7


@pytest.mark.slow
def test_an_empty_store_is_one_clean_error(tmp_path: Path) -> None:
    done = run_cli("history", "export", "--format", "bencher", cwd=tmp_path,
                   env_extra={"SCALESTUDY_STORE": str(tmp_path / "empty.sqlite")})
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.startswith("error: the store holds no runs that match: nothing to "
                                  "export")


@pytest.mark.slow  # the CLI in subprocesses
def test_the_command_writes_a_file_or_stdout_and_refuses_bad_options(tmp_path: Path) -> None:
    env = {"SCALESTUDY_STORE": store(tmp_path)}
    shown = run_cli("history", "export", "--format", "csv", cwd=tmp_path, env_extra=env)
    assert shown.returncode == 0 and shown.stdout.startswith("study,directory,system")
    assert "csv: 13 run attempt(s)" in shown.stderr
    written = run_cli("history", "export", "--format", "bencher", "-o", "bmf.json",
                      cwd=tmp_path, env_extra=env)
    assert written.returncode == 0 and written.stdout == ""
    assert set(json.loads((tmp_path / "bmf.json").read_text())) == {NAME4, NAME8}
    for args, message in [
            (["--format", "junit"], "--format 'junit': give one of bencher, otava, csv"),
            (["--format", "otava", "--otava-config", "o.yaml"], "give -o FILE.csv too"),
            (["--format", "csv", "--otava-config", "o.yaml"], "is for --format otava"),
            (["--format", "csv", "-o", "/proc/nowhere/x.csv"], "cannot write it")]:
        done = run_cli("history", "export", *args, cwd=tmp_path, env_extra=env)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert message in done.stderr and len(done.stderr.splitlines()) == 1
