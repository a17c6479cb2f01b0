"""results.history.store: run attempts indexed from run directories into SQLite and a real
PostgreSQL; ingest is idempotent, a lost store comes back, the schema is versioned."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa

from scalestudy.core.errors import ScalestudyError
from scalestudy.execute import workspace as ws
from scalestudy.execute.journal import Job, Journal
from scalestudy.results.history import store as store_module
from scalestudy.results.history.store import Store, study_dirs
from tests.test_collect import make_run, params, record

ENV = ("NCCL_ALGO=Ring\nOMP_NUM_THREADS=2\nPATH=/usr/bin\nSCALESTUDY_SYSTEM=polaris\n"
       "SCALESTUDY_TAGS=nccl-2.21,baseline\nSCALESTUDY_VERSION=0.1.0\nSLURM_JOB_ID=4242\n"
       "APPTAINER_CONTAINER=/images/pt.sif\n")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    url = (str(tmp_path / "store" / "h.sqlite") if request.param == "sqlite"
           else request.getfixturevalue("postgres_url"))
    opened = Store(url)
    yield opened
    opened.dispose()


def study(root: Path, name: str = "s") -> Path:
    """A study directory: 2 completed runs (one with an earlier failed attempt kept),
    one failed, one never started."""
    directory = root / name
    p1, p2, p3, p4 = (params(nodes=n, study=name) for n in (1, 2, 4, 8))
    d1 = make_run(directory, p1, metrics=record(p1, 100.0, torch_version="2.13.0",
                                               python_version="3.11.7", device="cuda"))
    (d1 / "env.txt").write_text(ENV)
    started = datetime.fromtimestamp((d1 / "env.txt").stat().st_mtime, timezone.utc)
    Journal(directory / "jobs.jsonl").record(Job(
        p1["run_id"], "4242", 2, "slurm", "native",
        (started - timedelta(minutes=10)).isoformat(timespec="seconds")))
    (d1 / "hosts.txt").write_text("x1001\n")
    kept = d1 / "attempts" / "1"
    kept.mkdir(parents=True)
    (kept / ws.STATUS).write_text(json.dumps({"state": "failed", "exit_code": 1,
                                              "reason": "exit code 1"}))
    make_run(directory, p2, metrics=record(p2, 190.0))
    make_run(directory, p3, status="failed", exit_code=137, reason="killed")
    (directory / "runs" / p4["run_id"]).mkdir(parents=True)
    ws.write_run(directory / "runs" / p4["run_id"], p4)
    return directory


def test_ingest_indexes_every_ended_attempt_with_its_provenance(store: Store,
                                                               tmp_path: Path) -> None:
    directory = study(tmp_path / "results")
    assert store.ingest(directory) == 4  # 3 current ended + 1 kept; the pending one not
    rows = store.rows()
    first = [r for r in rows if r["nodes"] == 1]
    assert sorted((r["attempt"], r["state"]) for r in first) == [(1, "failed"),
                                                                 (2, "completed")]
    done = next(r for r in first if r["state"] == "completed")
    assert done["throughput"] == 100.0 and done["throughput_per_gpu"] == 100.0
    assert done["tags"] == ["nccl-2.21", "baseline"]
    prov = done["provenance"]
    assert prov["versions"] == {"torch": "2.13.0", "python": "3.11.7", "scalestudy": "0.1.0"}
    placement = prov["placement"]
    assert (placement["nodes"], placement["job_id"]) == (["x1001"], "4242")
    assert placement["started"] and placement["ended"] and placement["submitted"]
    assert placement["queue_wait_s"] == pytest.approx(600, abs=5)  # journal: 10 min before
    assert prov["configuration"]["environment"] == {"NCCL_ALGO": "Ring",
                                                    "OMP_NUM_THREADS": "2"}
    assert prov["configuration"]["system"] == "polaris"
    assert prov["configuration"]["container"] == "/images/pt.sif"
    assert prov["hardware"] == {"device": "cuda"}
    failed = next(r for r in rows if r["nodes"] == 4)
    assert failed["state"] == "failed" and failed["throughput"] is None
    assert rows[0]["study"] == "s" and rows[0]["directory"] == str(directory.resolve())


def test_ingest_twice_gives_the_same_rows_and_a_lost_store_comes_back(
        store: Store, tmp_path: Path) -> None:
    results = tmp_path / "results"
    study(results, "a")
    study(results, "b")

    def snapshot(s: Store) -> list[tuple]:
        return sorted((r["directory"], r["run_id"], r["attempt"], r["state"], r["throughput"])
                      for r in s.rows())

    def rebuild(s: Store, directories: list[Path]) -> int:
        return sum(s.ingest(d) for d in directories)

    assert rebuild(store, study_dirs(results)) == 8
    once = snapshot(store)
    assert rebuild(store, study_dirs(results)) == 8
    assert snapshot(store) == once and len(once) == 8
    with store.engine.begin() as conn:  # the store is lost
        conn.execute(sa.delete(store_module.attempts))
        conn.execute(sa.delete(store_module.studies))
    assert store.rows() == []
    rebuild(store, study_dirs(results))
    assert snapshot(store) == once


def test_filters_by_system_model_tag_and_time(store: Store, tmp_path: Path) -> None:
    store.ingest(study(tmp_path / "results"))
    assert len(store.rows(tag="baseline")) == 1
    assert store.rows(tag="nope") == []
    assert len(store.rows(model="small_cnn")) == 4
    assert store.rows(model="resnet50") == []
    assert store.rows(system="other") == []
    assert len(store.rows(since=datetime.now(timezone.utc) - timedelta(hours=1))) == 4
    assert store.rows(since=datetime.now(timezone.utc) + timedelta(hours=1)) == []


def test_a_newer_schema_is_refused_and_an_older_one_migrated(tmp_path: Path,
                                                             monkeypatch) -> None:
    url = str(tmp_path / "h.sqlite")
    old = Store(url)
    assert old.version() == store_module.SCHEMA_VERSION
    old.dispose()

    def add_note(conn: sa.Connection) -> None:
        conn.execute(sa.text("ALTER TABLE attempts ADD COLUMN note TEXT"))

    monkeypatch.setattr(store_module, "SCHEMA_VERSION", store_module.SCHEMA_VERSION + 1)
    monkeypatch.setitem(store_module.MIGRATIONS, store_module.SCHEMA_VERSION, add_note)
    migrated = Store(url)
    assert migrated.version() == store_module.SCHEMA_VERSION
    with migrated.engine.connect() as conn:
        assert "note" in {c["name"] for c in sa.inspect(conn).get_columns("attempts")}
    migrated.dispose()
    monkeypatch.setattr(store_module, "SCHEMA_VERSION", 1)
    with pytest.raises(ScalestudyError, match="newer than this scalestudy reads"):
        Store(url).engine  # noqa: B018


def test_a_store_that_cannot_be_reached_says_so(tmp_path: Path) -> None:
    with pytest.raises(ScalestudyError, match="cannot open it"):
        Store("postgresql+psycopg://nobody@127.0.0.1:1/none").engine  # noqa: B018
    assert "secret" not in store_module.shown("postgresql+psycopg://u:secret@h/db")


def _ingest_many(url: str, directory: str, times: int) -> int:
    store = Store(url)
    try:
        return sum(store.ingest(Path(directory)) for _ in range(times))
    finally:
        store.dispose()


@pytest.mark.slow
def test_two_writers_at_once_on_one_sqlite_file(tmp_path: Path) -> None:
    import multiprocessing

    url = str(tmp_path / "h.sqlite")
    Store(url).version()  # created once, then written by two processes side by side
    dirs = [str(study(tmp_path / "results", name)) for name in ("a", "b")]
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        done = pool.starmap(_ingest_many, [(url, d, 15) for d in dirs])
    assert done == [60, 60]
    rows = Store(url).rows()
    assert len(rows) == 8 and {r["study"] for r in rows} == {"a", "b"}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return (str(tmp_path / "v1.sqlite") if request.param == "sqlite"
            else request.getfixturevalue("postgres_url"))


def test_a_version_1_store_is_migrated_and_keeps_its_rows(empty_url: str) -> None:
    """The store as its first version wrote it (studies without `source`) opens as the
    current one, its rows kept and marked as scalestudy's own."""
    v1 = sa.MetaData()
    meta = store_module.meta.to_metadata(v1)
    attempts = store_module.attempts.to_metadata(v1)
    attempts._columns.remove(attempts.c.campaign)  # added by version 3
    studies = sa.Table(
        "studies", v1, sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("directory", sa.Text, nullable=False, unique=True),
        sa.Column("name", sa.Text, nullable=False), sa.Column("system", sa.Text),
        sa.Column("scaling", sa.Text),
        sa.Column("ingested", sa.DateTime(timezone=True), nullable=False))
    engine = sa.create_engine(store_module.store_url(empty_url))
    with engine.begin() as conn:
        v1.create_all(conn)
        conn.execute(sa.insert(meta).values(key="schema_version", value="1"))
        conn.execute(sa.insert(studies).values(id=1, directory="/r/s", name="s",
                                               system="polaris", scaling="weak",
                                               ingested=datetime.now(timezone.utc)))
        conn.execute(sa.insert(attempts).values(
            study_id=1, run_id="abc", attempt=1, state="completed", world_size=4,
            throughput=400.0, throughput_per_gpu=100.0, params={"run_id": "abc"},
            provenance={}, tags=["v1"]))
    engine.dispose()
    opened = Store(empty_url)
    assert opened.version() == store_module.SCHEMA_VERSION == 4
    [row] = opened.rows()
    assert (row["study"], row["source"], row["throughput"], row["tags"]) == (
        "s", "scalestudy", 400.0, ["v1"])
    assert row["campaign"] is None
    opened.dispose()


def test_a_version_2_store_is_migrated_to_campaigns(empty_url: str) -> None:
    """The store as version 2 wrote it (attempts without `campaign`), on SQLite and on
    PostgreSQL, opens as the current one with its rows."""
    v2 = sa.MetaData()
    meta = store_module.meta.to_metadata(v2)
    studies = store_module.studies.to_metadata(v2)
    attempts = store_module.attempts.to_metadata(v2)
    attempts._columns.remove(attempts.c.campaign)  # as version 2 had it
    engine = sa.create_engine(store_module.store_url(empty_url))
    with engine.begin() as conn:
        v2.create_all(conn)
        conn.execute(sa.insert(meta).values(key="schema_version", value="2"))
        conn.execute(sa.insert(studies).values(id=1, directory="/r/s", name="s",
                                               system="polaris", scaling="weak",
                                               ingested=datetime.now(timezone.utc),
                                               source="scalestudy"))
        conn.execute(sa.insert(attempts).values(
            study_id=1, run_id="abc", attempt=2, state="completed", world_size=4,
            throughput=400.0, throughput_per_gpu=100.0, params={"run_id": "abc"},
            provenance={}, tags=[]))
        assert "campaign" not in {c["name"] for c in sa.inspect(conn).get_columns("attempts")}
    engine.dispose()
    opened = Store(empty_url)
    assert opened.version() == store_module.SCHEMA_VERSION
    [row] = opened.rows()
    assert (row["run_id"], row["attempt"], row["throughput"], row["campaign"]) == (
        "abc", 2, 400.0, None)
    assert opened.forecasts() == []  # the ledger's table, made by the migration
    opened.dispose()


def test_a_version_3_store_without_the_ledger_table_gets_it(tmp_path: Path) -> None:
    """A version-3 store written before the ledger's table joined that version (the
    campaigns' release) keeps forecasts once opened, as any version-3 store."""
    url = str(tmp_path / "h.sqlite")
    made = Store(url)
    assert made.version() == store_module.SCHEMA_VERSION
    made.dispose()
    engine = sa.create_engine(store_module.store_url(url))
    with engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE forecasts"))
    engine.dispose()
    opened = Store(url)
    assert opened.version() == store_module.SCHEMA_VERSION and opened.forecasts() == []
    opened.dispose()


def test_the_previous_release_store_file_opens(tmp_path: Path) -> None:
    """A SQLite store the previous release wrote (tests/data/previous-release): migrated,
    its studies and import kept, and its runs ingested again beside them."""
    import shutil

    data = Path(__file__).parent / "data" / "previous-release"
    url = str(tmp_path / "h.sqlite")
    shutil.copyfile(data / "history-v2.sqlite", url)
    store = Store(url)
    assert store.version() == store_module.SCHEMA_VERSION
    rows = store.rows()
    assert sorted(r["source"] for r in rows) == ["horovod", "scalestudy", "scalestudy"]
    assert all(r["campaign"] is None for r in rows)
    shutil.copytree(data / "results", tmp_path / "results")
    assert store.ingest(tmp_path / "results" / "prev") == 2
    assert len(store.rows()) == 5
    store.dispose()


def test_a_store_where_one_cannot_write_is_said_not_raised(tmp_path: Path) -> None:
    """A store that cannot be created (here under a file, which even root cannot make a
    directory of) never fails a run or a report: the run says so in one line."""
    from scalestudy.site.plan import make_plan
    from scalestudy.study.history import store_study

    (tmp_path / "a-file").write_text("")
    where = str(tmp_path / "a-file" / "deeper" / "h.sqlite")
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\ngrid: {nodes: [1]}\n")
    study(tmp_path / "results", "s")
    line = store_study(make_plan(spec, tmp_path / "results"), where)
    assert line.startswith("history: not stored: results store sqlite:///")
    assert "cannot create its directory" in line and "history ingest" in line
    with pytest.raises(ScalestudyError, match="cannot create its directory"):
        Store(where).engine  # noqa: B018


@pytest.mark.parametrize(("url", "says"), [
    ("postgresql+psycopg://u:sEcReT@:notaport/x", "not a URL scalestudy can open"),
    ("nope://x", "not a URL scalestudy can open"),
])
def test_a_url_that_is_not_one_is_one_line(url: str, says: str) -> None:
    with pytest.raises(ScalestudyError, match=says) as got:
        Store(url).rows()
    assert "sEcReT" not in str(got.value)


def test_a_file_that_is_no_store_and_a_read_only_store_say_so(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a database\n" * 100)
    with pytest.raises(ScalestudyError, match="not a results store"):
        Store(str(tmp_path / "notes.txt")).rows()
    url = str(tmp_path / "h.sqlite")
    Store(url).ingest(study(tmp_path / "results"))
    read_only = Store(f"sqlite:///file:{url}?mode=ro&uri=true")
    assert len(read_only.rows()) == 4
    with pytest.raises(ScalestudyError, match="the store is read-only here"):
        read_only.ingest(study(tmp_path / "results", "other"))
    read_only.dispose()


def test_history_check_on_a_read_only_store_is_no_regression(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    url = str(tmp_path / "h.sqlite")
    Store(url).ingest(study(tmp_path / "results"))
    done = run_cli("history", "check", str(tmp_path / "results" / "s"), "--store",
                   f"sqlite:///file:{url}?mode=ro&uri=true", cwd=tmp_path)
    assert done.returncode == 2, done.stderr  # not 1: that is the regression code
    assert "read-only" in done.stderr and "Traceback" not in done.stderr


def _damaged(tmp_path: Path) -> Path:
    """A real store of 12 studies with one page in the middle of the file overwritten
    with random bytes (a block the disk or the filesystem lost: what damages a store)."""
    import random

    url = tmp_path / "h.sqlite"
    s = Store(str(url))
    for i in range(12):
        s.ingest(study(tmp_path / "results", f"s{i}"))
    s.dispose()
    data = bytearray(url.read_bytes())
    page = 4096
    middle = len(data) // page // 2
    data[middle * page:(middle + 1) * page] = random.Random(3).randbytes(page)
    url.write_bytes(bytes(data))
    return url


def test_a_damaged_store_is_refused_before_anything_is_read_or_written(tmp_path: Path
                                                                     ) -> None:
    from scalestudy.results.history.integrity import quick_check

    url = _damaged(tmp_path)
    before = url.read_bytes()
    assert "ok" != quick_check(url) != ""
    for doing in (lambda s: s.rows(), lambda s: s.ingest(study(tmp_path / "more", "new"))):
        checked = Store(str(url), verify=True)
        with pytest.raises(ScalestudyError, match=r"the file is damaged .*quick_check.*"
                           r"nothing was read from or written into it"):
            doing(checked)
        checked.dispose()
    assert url.read_bytes() == before
    fine = tmp_path / "fine.sqlite"
    Store(str(fine)).ingest(study(tmp_path / "results"))
    assert quick_check(fine) == "" and len(Store(str(fine), verify=True).rows()) == 4
    Store(str(tmp_path / "new.sqlite"), verify=True).check_intact()  # not there: intact
    assert not (tmp_path / "new.sqlite").exists()


@pytest.mark.slow
def test_history_check_and_run_refuse_a_damaged_store_and_write_nothing(
        tmp_path: Path) -> None:
    from tests.conftest import run_cli
    from tests.test_e2e_local import TINY

    url = _damaged(tmp_path)
    before = url.read_bytes()
    env = {"SCALESTUDY_STORE": str(url)}
    checked = run_cli("history", "check", str(tmp_path / "results" / "s0"), cwd=tmp_path,
                      env_extra=env)
    (tmp_path / "tiny.yaml").write_text(TINY)
    ran = run_cli("run", "tiny.yaml", cwd=tmp_path, env_extra=env)
    for done in (checked, ran):
        assert done.returncode == 2, done.stdout + done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "the file is damaged" in lines[0], done.stderr
        assert "history ingest results/" in lines[0] and "Traceback" not in done.stderr
    assert not (tmp_path / "results" / "tiny").exists()  # no job was started
    assert url.read_bytes() == before
