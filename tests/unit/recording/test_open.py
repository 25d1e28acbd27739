"""Opening a recording of any format: read-only, by its real name, converted once when it is Ingero's."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from gpuscope.cli import main
from gpuscope.errors import DatabaseError
from gpuscope.model.ops import Op
from gpuscope.recording import Format, as_gpuscope_file, conversion_cache_dir, detect_format, open_recording
from tests.ingero_fixtures import ingero_fixture
from tests.unit.analysis.builder import MS, Events, steady_training


def _recording(path: Path) -> Path:
    ev = Events()
    steady_training(ev, 50)
    ev.add(Op.cudaMalloc, 600 * MS, 2 * MS)
    return ev.to_db(path)


@pytest.mark.parametrize("name", ["a#b.db", "100%.db", "what?.db", "spaces in it.db"])
def test_a_recording_whose_name_holds_uri_characters_opens_as_itself(tmp_path: Path, name: str) -> None:
    # given a recording named with characters that mean something in a URI
    db = _recording(tmp_path / name)
    before = sorted(p.name for p in tmp_path.iterdir())
    # when it is opened for reading
    conn = open_recording(db)
    try:
        events = conn.execute("SELECT count(*) FROM event_log").fetchone()[0]
        # then it is that file, read-only, and no stray file was created beside it
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            conn.execute("DELETE FROM event_log")
    finally:
        conn.close()
    assert events > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_explain_reads_a_recording_named_with_a_hash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _recording(tmp_path / "run#1.db")
    assert main(["explain", "--db", str(db), "--json"]) == 0
    assert not (tmp_path / "run").exists()


def test_a_file_of_neither_format_is_refused_with_one_line(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t(x)").connection.commit()
    with pytest.raises(DatabaseError, match="not a gpuscope database"):
        detect_format(other)
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(DatabaseError, match="not a valid SQLite database"):
        open_recording(garbage)
    with pytest.raises(DatabaseError, match="no such database"):
        open_recording(tmp_path / "missing.db")


def test_a_gpuscope_recording_is_opened_as_it_is(tmp_path: Path) -> None:
    db = _recording(tmp_path / "r.db")
    assert detect_format(db) is Format.GPUSCOPE
    assert as_gpuscope_file(db) == db


def test_an_ingero_recording_is_converted_once_and_left_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a copy of a real Ingero recording, read-only, and an empty cache
    src = tmp_path / "node.db"
    shutil.copyfile(ingero_fixture("sample-gpu-node-02.db"), src)
    src.chmod(0o444)
    original = src.read_bytes()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    # when it is opened twice
    assert detect_format(src) is Format.INGERO
    first = as_gpuscope_file(src)
    mtime = first.stat().st_mtime_ns
    second = as_gpuscope_file(src)
    # then one conversion serves both, and the original is byte for byte the same
    assert first == second and second.stat().st_mtime_ns == mtime
    assert first.parent == tmp_path / "cache" / "gpuscope" / "imports"
    assert src.read_bytes() == original
    conn = open_recording(src)
    try:
        assert conn.execute("SELECT count(*) FROM event_log").fetchone()[0] > 0
    finally:
        conn.close()


def test_the_conversion_cache_falls_back_to_a_temporary_folder_when_home_cannot_hold_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a cache location that is a file, so no folder can be made there (as a read-only home would)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    # when the cache folder is asked for
    cache = conversion_cache_dir()
    # then it is a private folder under the temporary directory
    assert cache.parent == tmp_path / "tmp" and cache.is_dir()
    assert cache.stat().st_mode & 0o077 == 0


def test_a_recording_is_opened_once_and_its_format_told_from_that_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a recording, and format sniffing that would fail if it were used
    db = _recording(tmp_path / "r.db")
    import gpuscope.recording.open as opening

    def no_sniffing(path: object) -> Format:
        raise AssertionError("open_recording sniffed the format with a separate open")

    monkeypatch.setattr(opening, "detect_format", no_sniffing)
    # when it is opened, then it reads without a second open
    conn = open_recording(db)
    try:
        assert conn.execute("SELECT count(*) FROM event_log").fetchone()[0] > 0
    finally:
        conn.close()


def test_telling_the_format_leaves_nothing_beside_the_recording(tmp_path: Path) -> None:
    db = _recording(tmp_path / "r.db")
    before = sorted(p.name for p in tmp_path.iterdir())
    assert detect_format(db) is Format.GPUSCOPE
    assert sorted(p.name for p in tmp_path.iterdir()) == before
