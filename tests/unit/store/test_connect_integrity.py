"""Damaged recordings are refused: by readers with one line and its fix, and by a writer before it appends."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from gpuscope.analysis.engine import ExplainOptions, explain_db
from gpuscope.cli import main
from gpuscope.errors import DatabaseError
from gpuscope.recording import open_recording, open_recording_meanwhile
from gpuscope.store import connect, integrity
from gpuscope.store.connect import connect_writer
from gpuscope.store.integrity import first_problem
from tests.unit.analysis.builder import Events, steady_training

# -- helpers -------------------------------------------------------------------


def recording(path: Path) -> Path:
    """A closed recording of 3000 events: ``event_log`` spans dozens of pages under an interior root."""
    ev = Events()
    steady_training(ev, 1500)
    return ev.to_db(path)


def _read(db: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def page_size(db: Path) -> int:
    size = _read(db, "PRAGMA page_size")[0][0]
    assert isinstance(size, int), size
    return size


def root_page(db: Path, name: str) -> int:
    page = _read(db, f"SELECT rootpage FROM sqlite_master WHERE name = '{name}'")[0][0]
    assert isinstance(page, int), page
    return page


def page_offset(db: Path, page: int) -> int:
    """Where the b-tree header of ``page`` starts (page 1 begins with the 100-byte file header)."""
    return (page - 1) * page_size(db) + (100 if page == 1 else 0)


def rightmost_child(db: Path, page: int) -> int:
    """The right-most child of an interior b-tree page (the leaf holding the newest rows of a table)."""
    with db.open("rb") as f:
        f.seek(page_offset(db, page))
        header = f.read(12)
    assert header[0] in (0x02, 0x05), "precondition: an interior page"
    return int.from_bytes(header[8:12], "big")


def leftmost_child(db: Path, page: int) -> int:
    """The left-most child of an interior b-tree page (for a table: the leaf of its oldest rows)."""
    start = page_offset(db, page)
    with db.open("rb") as f:
        f.seek(start)
        header = f.read(14)
        assert header[0] in (0x02, 0x05), "precondition: an interior page"
        first_cell = int.from_bytes(header[12:14], "big")  # cell pointer array follows the 12-byte header
        f.seek((page - 1) * page_size(db) + first_cell)
        return int.from_bytes(f.read(4), "big")


def smash(db: Path, page: int) -> None:
    """Overwrite the b-tree header of ``page`` with garbage, as a torn write or a bad sector would."""
    with db.open("r+b") as f:
        f.seek(page_offset(db, page))
        f.write(b"\xff" * 12)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cli_errors(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, list[str]]:
    code = main(argv)
    return code, capsys.readouterr().err.splitlines()


# -- readers -----------------------------------------------------------------------------


def test_a_damaged_index_page_is_refused_by_readers_with_the_fix_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given a recording whose ops name index is damaged (no query of events reads that page)
    db = recording(tmp_path / "r.db")
    smash(db, root_page(db, "sqlite_autoindex_ops_1"))
    assert _read(db, "SELECT count(*) FROM event_log") == [(3000,)], "precondition: plain reads do not notice"
    # when it is read
    with pytest.raises(DatabaseError, match=r"is damaged \(quick_check: ") as info:
        open_recording(db)
    code, err = cli_errors(capsys, ["query", "--db", str(db), "SELECT count(*) FROM events"])
    # then it is refused, in one line with the salvage command as the fix
    assert ".recover" in info.value.remedy
    assert code == 1
    assert len(err) == 2 and err[0].startswith("error: ") and "is damaged" in err[0]
    assert err[1].strip().startswith("fix: ") and ".recover" in err[1]


def test_a_damaged_table_page_is_refused_by_readers(tmp_path: Path) -> None:
    db = recording(tmp_path / "r.db")
    smash(db, rightmost_child(db, root_page(db, "event_log")))
    with pytest.raises(DatabaseError, match="is damaged"):
        open_recording(db)


def test_a_damaged_page_of_old_rows_is_refused_by_readers_and_the_writer(tmp_path: Path) -> None:
    # given a recording whose oldest event rows are damaged (appends never touch that page)
    db = recording(tmp_path / "r.db")
    smash(db, leftmost_child(db, root_page(db, "event_log")))
    before = digest(db)
    # when it is read or appended to, then it is refused
    with pytest.raises(DatabaseError, match=r"is damaged \(quick_check: "):
        open_recording(db)
    with pytest.raises(DatabaseError, match=r"is damaged \(quick_check: "):
        connect_writer(db)
    assert digest(db) == before


def test_explain_refuses_a_damaged_recording_in_the_checks_words_while_the_check_ran_beside_its_reads(
    tmp_path: Path,
) -> None:
    # given a recording whose ops index is damaged (explain's reads never touch it) and one whose table is
    index_only = recording(tmp_path / "index.db")
    smash(index_only, root_page(index_only, "sqlite_autoindex_ops_1"))
    table = recording(tmp_path / "table.db")
    smash(table, rightmost_child(table, root_page(table, "event_log")))
    for db in (index_only, table):
        # when explain reads it (the page check runs beside its reads)
        with pytest.raises(DatabaseError, match=r"is damaged \(quick_check: ") as info:
            explain_db(db, ExplainOptions())
        # then it is refused with the check's line and fix, not with what its own reads met
        assert ".recover" in info.value.remedy


def test_a_sound_recording_checked_beside_the_reads_is_remembered_as_sound(tmp_path: Path) -> None:
    # given a sound closed recording
    db = recording(tmp_path / "r.db")
    # when it is opened with the check running beside the reads, read, and the check waited for
    conn, check = open_recording_meanwhile(db)
    try:
        assert conn.execute("SELECT count(*) FROM event_log").fetchone() == (3000,)
        check.result()
    finally:
        conn.close()
    # then the check passed, and the next open in this process does not run it again
    conn, again = open_recording_meanwhile(db)
    conn.close()
    assert again._thread is None


def test_a_truncated_recording_is_refused(tmp_path: Path) -> None:
    db = recording(tmp_path / "r.db")
    size = db.stat().st_size
    with db.open("r+b") as f:
        f.truncate(size - 3 * page_size(db))
    with pytest.raises(DatabaseError, match="is damaged"):
        open_recording(db)
    with pytest.raises(DatabaseError, match="is damaged"):
        connect_writer(db)


def test_a_sound_recording_passes_the_full_and_the_bounded_check(tmp_path: Path) -> None:
    db = recording(tmp_path / "r.db")
    conn = open_recording(db)
    try:
        assert first_problem(conn, full=True, file_size=db.stat().st_size) is None
        assert first_problem(conn, full=False, file_size=db.stat().st_size) is None
    finally:
        conn.close()


# -- the bounded check, used above the size bound and on live recordings ---------------------


def test_above_the_size_bound_a_damaged_small_table_is_still_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connect, "READER_FULL_CHECK_BYTES", 0)
    db = recording(tmp_path / "r.db")
    smash(db, root_page(db, "sqlite_autoindex_ops_1"))
    with pytest.raises(DatabaseError, match="is damaged"):
        open_recording(db)


def test_above_the_size_bound_a_large_table_is_walked_to_its_newest_leaf(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a recording above the bound, whose event_log counts as large, with its newest leaf damaged
    monkeypatch.setattr(connect, "READER_FULL_CHECK_BYTES", 0)
    monkeypatch.setattr(integrity, "SMALL_TABLE_ROWS", 100)
    db = recording(tmp_path / "r.db")
    smash(db, rightmost_child(db, root_page(db, "event_log")))
    # when it is read, then the walk to the newest rows finds the damage
    with pytest.raises(DatabaseError, match="is damaged"):
        open_recording(db)


def test_the_bounded_check_sees_no_damage_in_sound_large_tables_with_or_without_rowid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(integrity, "SMALL_TABLE_ROWS", 10)
    db = recording(tmp_path / "r.db")
    conn = connect_writer(db)
    conn.executemany(
        "INSERT INTO event_stacks(session_id, pid, tid, ts_ns, stack_hash) VALUES (1, 1, 1, ?, 7)",
        [(i,) for i in range(500)],
    )
    conn.close()
    reader = open_recording(db)
    try:
        assert first_problem(reader, full=False, file_size=db.stat().st_size) is None
    finally:
        reader.close()


def test_a_locked_database_is_not_called_damaged(tmp_path: Path) -> None:
    # given a rollback-journal database another connection holds exclusively
    db = tmp_path / "plain.db"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("CREATE TABLE t(a)")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        reader = sqlite3.connect(db, timeout=0)
        # when it is checked, then "locked" is raised as it is, not reported as damage
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            first_problem(reader, full=True)
        reader.close()
    finally:
        holder.execute("ROLLBACK")
        holder.close()


# -- the writer ----------------------------------------------------------------------------


def test_the_writer_refuses_to_append_to_a_damaged_recording_and_leaves_it_as_it_was(tmp_path: Path) -> None:
    # given a recording with a damaged index page
    db = recording(tmp_path / "r.db")
    smash(db, root_page(db, "sqlite_autoindex_ops_1"))
    before = digest(db)
    # when a trace would open it to append
    with pytest.raises(DatabaseError, match=r"is damaged \(quick_check: ") as info:
        connect_writer(db)
    # then it is refused with a fix naming a new file and the salvage, and not one byte changed
    assert "--db NEW" in info.value.remedy and ".recover" in info.value.remedy
    assert digest(db) == before


def test_above_its_bound_the_writer_still_refuses_a_damaged_small_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connect, "WRITER_FULL_CHECK_BYTES", 0)
    db = recording(tmp_path / "r.db")
    smash(db, root_page(db, "sqlite_autoindex_ops_1"))
    before = digest(db)
    with pytest.raises(DatabaseError, match="is damaged"):
        connect_writer(db)
    assert digest(db) == before


def test_the_writer_appends_to_a_sound_recording(tmp_path: Path) -> None:
    db = recording(tmp_path / "r.db")
    conn = connect_writer(db)
    conn.execute("INSERT INTO sessions(uuid, node, started_wall_ns, started_mono_ns) VALUES ('again', 'n', 0, 0)")
    conn.close()
    assert _read(db, "SELECT count(*) FROM sessions") == [(2,)]
