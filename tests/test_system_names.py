"""One system, one name: a profile given by path (`system: ./mylab.yaml`) is the profile's
own `name` in the plan, run.json, the store and every `--system` filter, with the file kept
beside it; a store and results the previous release wrote under the path are migrated
(tests/data/previous-release-path-system)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from scalestudy.core.errors import ScalestudyError
from scalestudy.results.history import store as store_module
from scalestudy.results.history.store import Store
from scalestudy.site.plan import make_plan
from scalestudy.study.history import history
from tests.conftest import run_cli

DATA = Path(__file__).parent / "data" / "previous-release-path-system"
#: The one run the previous release wrote for pathsys.yaml.
OLD_RUN = "388c62619d"


@pytest.fixture
def old(tmp_path: Path) -> Path:
    """A copy of the previous release's spec, profile, results and store."""
    shutil.copytree(DATA, tmp_path / "old")
    return tmp_path / "old"


def test_a_profile_file_is_the_system_by_its_name_and_the_run_ids_stay(old: Path) -> None:
    plan = make_plan(old / "pathsys.yaml", old / "results")
    assert plan.study.system == plan.system.name == "mylab"
    assert plan.study.system_file == (old / "mylab.yaml").resolve()
    [run] = plan.runs
    assert run.run_id == OLD_RUN  # the run the previous release made is found again
    assert run.params()["system"] == "mylab" and "system_file" not in run.params()


def test_a_shipped_profile_keeps_its_name_and_no_file(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\nsystem: local\n")
    plan = make_plan(spec, tmp_path / "results")
    assert plan.study.system == "local" and plan.study.system_file is None


def test_the_previous_release_store_is_migrated_to_the_profile_name(old: Path) -> None:
    before = Store(f"sqlite:///{old / 'history-v3.sqlite'}")
    try:
        assert before.version() == store_module.SCHEMA_VERSION == 4
        [row] = before.rows()
        assert (row["system"], row["system_file"]) == ("mylab", "./mylab.yaml")
        assert before.systems() == ["mylab"]
        assert [r["run_id"] for r in before.rows(system="mylab")] == [OLD_RUN]
        assert before.rows(system="./mylab.yaml") == []
    finally:
        before.dispose()


def test_old_run_directories_are_ingested_under_the_profile_name(old: Path,
                                                                 tmp_path: Path) -> None:
    """run.json of the previous release says "./mylab.yaml": ingested again, the study is
    stored as mylab (the name the run's provenance has), the path beside it."""
    store = Store(str(tmp_path / "fresh.sqlite"))
    try:
        assert store.ingest(old / "results" / "pathsys") == 1
        [row] = store.rows()
        assert (row["system"], row["system_file"]) == ("mylab", "./mylab.yaml")
    finally:
        store.dispose()


def test_a_system_the_store_does_not_hold_is_refused_naming_those_it_does(old: Path) -> None:
    url = str(old / "history-v3.sqlite")
    assert [r["system"] for r in history(url, system="mylab")] == ["mylab"]
    with pytest.raises(ScalestudyError, match=r"--system nosuch: the store holds no runs of "
                       r"that system; it holds mylab$") as got:
        history(url, system="nosuch")
    assert got.value.exit_code == 2
    with pytest.raises(ScalestudyError, match="not by the profile's file"):
        history(url, system="./mylab.yaml")
    with pytest.raises(ScalestudyError, match=r"did you mean mylab\?"):
        history(url, system="mylb")


@pytest.mark.slow
@pytest.mark.parametrize("command", [
    ["history"], ["history", "changes"], ["history", "best", "--model", "small_cnn"],
    ["history", "predictions"]])
def test_every_system_filter_that_matches_nothing_exits_2(old: Path,
                                                          command: list[str]) -> None:
    """A shell sees exit 2 and one line (no "every series is level" for a typo)."""
    env = {"SCALESTUDY_STORE": str(old / "history-v3.sqlite")}
    done = run_cli(*command, "--system", "nosuch", cwd=old, env_extra=env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: --system nosuch: the store holds no runs of that system; it holds mylab"]
    assert done.stdout == ""


def test_history_json_says_the_name(old: Path) -> None:
    env = {"SCALESTUDY_STORE": str(old / "history-v3.sqlite")}
    listed = run_cli("history", "--json", "--system", "mylab", cwd=old, env_extra=env)
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert (row["system"], row["system_file"]) == ("mylab", "./mylab.yaml")


@pytest.mark.slow
def test_a_copied_profile_says_its_name_from_the_run_to_the_site(tmp_path: Path) -> None:
    """The user's path of the docs: copy a shipped profile, rename it, use it by path. The
    store, `history --system mylab`, `history --json`, the report and the published site
    all say mylab, and nothing says the file's path."""
    profile = (Path(store_module.__file__).parents[2] / "site" / "systems" / "local.yaml")
    (tmp_path / "mylab.yaml").write_text(
        profile.read_text().replace("name: local", "name: mylab", 1))
    (tmp_path / "s.yaml").write_text(
        "name: s\nsystem: ./mylab.yaml\nworkload: {model: small_cnn, image_size: 16, "
        "warmup_iters: 1, iters: 2, batches_per_iter: 2}\ngrid: {batch_size: [4]}\n")
    env = {"SCALESTUDY_STORE": str(tmp_path / "h.sqlite")}
    done = run_cli("run", "s.yaml", cwd=tmp_path, env_extra=env)
    assert done.returncode == 0, done.stderr
    [run_json] = (tmp_path / "results" / "s" / "runs").glob("*/run.json")
    assert json.loads(run_json.read_text())["system"] == "mylab"
    assert "Measured on system mylab" in (
        tmp_path / "results" / "s" / "report" / "index.html").read_text()
    [row] = json.loads(run_cli("history", "--json", "--system", "mylab", cwd=tmp_path,
                               env_extra=env).stdout)
    assert (row["system"], row["system_file"]) == ("mylab", str(tmp_path / "mylab.yaml"))
    site = run_cli("publish", "-o", "site", cwd=tmp_path, env_extra=env)
    assert site.returncode == 0, site.stderr
    pages = sorted(p.relative_to(tmp_path / "site").as_posix()
                   for p in (tmp_path / "site" / "systems").rglob("*.html"))
    assert pages and all(p.startswith("systems/mylab/") for p in pages), pages
    assert all("mylab.yaml" not in p.read_text() for p in (tmp_path / "site").rglob("*.html"))
