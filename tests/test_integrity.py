"""results.history.integrity: SQLite's quick_check finds a store file whose page was lost
or overwritten, reads it without writing, and checks nothing on PostgreSQL."""

from __future__ import annotations

import random
from pathlib import Path

from scalestudy.results.history.integrity import damage, quick_check
from scalestudy.results.history.store import Store
from tests.test_store import study


def test_every_overwritten_page_of_a_real_store_is_found(tmp_path: Path) -> None:
    url = tmp_path / "h.sqlite"
    s = Store(str(url))
    for i in range(6):
        s.ingest(study(tmp_path / "results", f"s{i}"))
    s.dispose()
    data = url.read_bytes()
    assert quick_check(url) == "" and damage(f"sqlite:///{url}") == ""
    page, rng = 4096, random.Random(5)
    pages = len(data) // page
    assert pages > 8
    for number in range(1, pages):  # page 0 holds the header: "not a database"
        broken = bytearray(data)
        broken[number * page:(number + 1) * page] = rng.randbytes(page)
        copy = tmp_path / "copy.sqlite"
        copy.write_bytes(bytes(broken))
        found = quick_check(copy)
        assert found, f"page {number} of {pages}"
        assert copy.read_bytes() == bytes(broken)  # read-only: nothing written
    header = bytearray(data)
    header[:100] = bytes(100)
    (tmp_path / "header.sqlite").write_bytes(bytes(header))
    assert "not a database" in quick_check(tmp_path / "header.sqlite")


def test_nothing_to_check_is_intact() -> None:
    assert damage("postgresql+psycopg://u:p@db.invalid:5432/history") == ""  # no pragma
    assert damage("sqlite:///:memory:") == ""
    assert damage("sqlite:////nonexistent/dir/h.sqlite") == ""


def test_a_store_in_a_directory_this_user_cannot_enter_is_left_to_opening(
        tmp_path: Path, monkeypatch) -> None:
    # A PBS job runs as another user than the one whose store the study names: the
    # check says nothing and opening the store says why it cannot (never a traceback).
    def denied(self: Path) -> bool:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "is_file", denied)
    assert damage(f"sqlite:///{tmp_path}/private/h.sqlite") == ""
