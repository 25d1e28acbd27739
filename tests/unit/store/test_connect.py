"""Store discipline: recorded migrations, read-only readers, clear errors."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuscope.bpf.wire import EVENT_DTYPE
from gpuscope.errors import DatabaseError, SchemaTooNewError
from gpuscope.model.ops import Op
from gpuscope.platform.links import PlantedLinkError
from gpuscope.recording import open_recording
from gpuscope.store.connect import connect_reader, connect_writer, database_path
from gpuscope.store.schema import MIGRATIONS, SCHEMA_VERSION
from gpuscope.store.sessions_write import SessionInfo, create_session
from gpuscope.store.writer import EventWriter
from tests.ingero_fixtures import ingero_fixture
from tests.other_user import needs_root_to_plant, plant_link, shared_folder
from tests.unit.analysis.builder import Events

from .recordings import reading, record


def _session(conn: sqlite3.Connection) -> int:
    return create_session(
        conn,
        SessionInfo("u-1", "node-a", "host", "6.18", "0.1", "1.1", 1_700_000_000_000_000_000, 1_000, ["gpuscope"], {}),
    )


def _events(n: int, op: Op = Op.cudaMalloc) -> np.ndarray:
    ev = np.zeros(n, dtype=EVENT_DTYPE)
    ev["ts_ns"] = np.arange(n) * 1000 + 2_000
    ev["duration_ns"] = 500
    ev["pid"], ev["tid"], ev["op"] = 42, 43, int(op)
    ev["comm"] = b"train.py"
    ev["bytes"] = 1 << 20
    ev["handle"] = 0xFFFF_FFFF_FFFF_FFF0  # above 2**63: stored as two's complement
    return ev


def test_migrations_are_recorded_once(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    connect_writer(db).close()
    conn = connect_writer(db)
    rows = conn.execute("SELECT version FROM schema_migrations").fetchall()
    assert [r[0] for r in rows] == [m.version for m in MIGRATIONS]
    assert len(set(rows)) == len(rows)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_writer_rows_read_back_through_the_events_view(tmp_path: Path) -> None:
    conn = connect_writer(tmp_path / "a.db")
    sid = _session(conn)
    w = EventWriter(conn, sid)
    w.put(_events(1000))
    w.put(_events(10, Op.sched_switch))
    w.close()
    r = connect_reader(tmp_path / "a.db")
    rows = r.execute(
        "SELECT op, count(*), min(comm), min(node), min(source) FROM events GROUP BY op ORDER BY op"
    ).fetchall()
    assert rows == [
        ("cudaMalloc", 1000, "train.py", "node-a", "cuda"),
        ("sched_switch", 10, "train.py", "node-a", "host"),
    ]
    wall, ts = r.execute("SELECT wall_ns, ts_ns FROM events LIMIT 1").fetchone()
    assert wall - ts == 1_700_000_000_000_000_000 - 1_000
    (handle,) = r.execute("SELECT handle FROM events LIMIT 1").fetchone()
    assert handle & 0xFFFF_FFFF_FFFF_FFFF == 0xFFFF_FFFF_FFFF_FFF0
    assert r.execute("SELECT event_id FROM events ORDER BY id LIMIT 1").fetchone()[0] == "node-a:1"


def test_reader_refuses_writes(tmp_path: Path) -> None:
    connect_writer(tmp_path / "a.db").close()
    r = connect_reader(tmp_path / "a.db")
    for sql in ("DELETE FROM sessions", "CREATE TABLE x(a)", "PRAGMA user_version=99"):
        with pytest.raises(sqlite3.OperationalError):
            r.execute(sql)


def test_reader_never_migrates_an_old_file(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    connect_writer(db).close()
    before = db.read_bytes()
    connect_reader(db).close()
    assert db.read_bytes() == before


def test_missing_corrupt_and_foreign_databases_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError, match="no such database"):
        connect_reader(tmp_path / "missing.db")
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"garbage" * 1000)
    with pytest.raises(DatabaseError, match="not a valid SQLite database"):
        connect_reader(bad)
    with pytest.raises(DatabaseError):
        connect_writer(bad)
    foreign = tmp_path / "foreign.db"
    sqlite3.connect(foreign).execute("CREATE TABLE t(a)").connection.commit()
    with pytest.raises(DatabaseError, match="not a gpuscope database"):
        connect_reader(foreign)


def test_a_database_from_a_newer_gpuscope_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    connect_writer(db).close()
    c = sqlite3.connect(db)
    c.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    c.close()
    with pytest.raises(SchemaTooNewError):
        connect_reader(db)
    with pytest.raises(SchemaTooNewError):
        connect_writer(db)


def test_unwritable_path_is_a_database_error(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError):
        connect_writer("/proc/gpuscope-forbidden/x.db")


def test_a_foreign_sqlite_file_is_never_written_to(tmp_path: Path) -> None:
    foreign = tmp_path / "other.db"
    c = sqlite3.connect(foreign)
    c.execute("CREATE TABLE invoices(a)")
    c.commit()
    c.close()
    before = foreign.read_bytes()
    with pytest.raises(DatabaseError, match="not a gpuscope database"):
        connect_writer(foreign)
    assert foreign.read_bytes() == before


def test_an_ingero_database_is_read_through_a_cached_conversion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a database recorded by the reference system
    src = ingero_fixture("sample-gpu-node-02.db")
    ingero = tmp_path / "ingero.db"
    ingero.write_bytes(src.read_bytes())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    # when it is opened for reading
    conn = open_recording(ingero)
    # then its events are there under our views, and the original is untouched
    assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 200
    assert ingero.read_bytes() == src.read_bytes()
    assert len(list((tmp_path / "cache" / "gpuscope" / "imports").glob("*.db"))) == 1


def test_the_database_path_is_the_file_the_connection_reads(tmp_path: Path) -> None:
    path = record(Events(), tmp_path / "a#b 100%.db")
    with reading(path) as conn:
        assert os.path.realpath(database_path(conn)) == os.path.realpath(path)


# -- links planted by other users ---------------------------------------------------------------------


@needs_root_to_plant
@pytest.mark.parametrize("dangling", [True, False], ids=["dangling", "to a file"])
def test_a_writer_refuses_a_link_another_user_planted_and_creates_nothing_through_it(
    tmp_path: Path, dangling: bool
) -> None:
    # given nobody's link in a folder like /tmp, to a file of root's or to where one would be made
    target = tmp_path / "private" / "root.db"
    target.parent.mkdir()
    if not dangling:
        target.write_bytes(b"root's")
    link = plant_link(shared_folder(tmp_path) / "trace.db", target)
    # when root records there
    with pytest.raises(PlantedLinkError, match=r"trace\.db: not following a symlink owned by another user"):
        connect_writer(link)
    # then the target is as it was (or still absent), with nothing beside it
    assert sorted(p.name for p in target.parent.iterdir()) == ([] if dangling else ["root.db"])
    if not dangling:
        assert target.read_bytes() == b"root's"


@needs_root_to_plant
def test_a_writer_refuses_a_link_another_user_planted_as_its_wal(tmp_path: Path) -> None:
    target = tmp_path / "root-file"
    target.write_bytes(b"root's")
    folder = shared_folder(tmp_path)
    plant_link(folder / "trace.db-wal", target)
    with pytest.raises(PlantedLinkError, match=r"trace\.db-wal"):
        connect_writer(folder / "trace.db")
    assert target.read_bytes() == b"root's"


def test_a_writer_follows_its_own_dangling_link_and_creates_the_recording_there(tmp_path: Path) -> None:
    target = tmp_path / "real" / "trace.db"
    target.parent.mkdir()
    link = shared_folder(tmp_path) / "trace.db"
    link.symlink_to(target)
    connect_writer(link).close()
    assert link.is_symlink() and target.is_file()
    connect_reader(link).close()


# -- two writers on one new file ----------------------------------------------------------------------


def _open_when_both_are_ready(path: str, ready: Any, errors: Any) -> None:
    try:
        ready.wait(timeout=60)
        connect_writer(path).close()
    except BaseException as exc:  # reported to the test, which runs in another process
        errors.put(f"{type(exc).__name__}: {exc}")
        sys.exit(1)


def test_two_writers_opening_the_same_new_file_at_once_both_succeed(tmp_path: Path) -> None:
    # given two processes that open the same new file at the same moment, many times over
    ctx = multiprocessing.get_context("fork")
    errors = ctx.Queue()
    for attempt in range(20):
        db = tmp_path / f"new-{attempt}.db"
        ready = ctx.Barrier(2)
        writers = [ctx.Process(target=_open_when_both_are_ready, args=(str(db), ready, errors)) for _ in range(2)]
        for w in writers:
            w.start()
        for w in writers:
            w.join(timeout=120)
            if w.exitcode is None:  # hung: ended here so that the failure below is all that is left
                w.kill()
                w.join()
        # then both open it, and the schema is whole, each migration applied once
        assert errors.empty(), errors.get()
        assert [w.exitcode for w in writers] == [0, 0]
        conn = connect_writer(db)
        assert [r[0] for r in conn.execute("SELECT version FROM schema_migrations")] == [m.version for m in MIGRATIONS]
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        conn.close()
        connect_reader(db).close()


# -- a version reset to 0 -----------------------------------------------------------------------------


def test_a_file_with_gpuscopes_tables_and_version_zero_is_refused_by_readers(tmp_path: Path) -> None:
    # given a table named event_log in a file whose version says it was never migrated
    db = tmp_path / "made-up.db"
    c = sqlite3.connect(db)
    c.execute("CREATE TABLE event_log(id INTEGER PRIMARY KEY, anything TEXT)")
    c.close()
    with pytest.raises(DatabaseError, match="not a gpuscope recording, or one whose version was reset"):
        connect_reader(db)


def test_a_recording_whose_version_was_reset_to_zero_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    db = tmp_path / "reset.db"
    connect_writer(db).close()
    c = sqlite3.connect(db)
    c.execute("PRAGMA user_version=0")
    c.close()
    before = db.read_bytes()
    with pytest.raises(DatabaseError, match="version was reset"):
        connect_reader(db)
    with pytest.raises(DatabaseError, match="not a gpuscope database"):
        connect_writer(db)
    assert db.read_bytes() == before


def test_an_empty_file_is_still_made_a_recording_by_a_writer(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    db.touch()
    connect_writer(db).close()
    connect_reader(db).close()
