"""Store discipline: recorded migrations, read-only readers, clear errors."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from gpuscope.bpf.wire import EVENT_DTYPE
from gpuscope.errors import DatabaseError, SchemaTooNewError
from gpuscope.model.ops import Op
from gpuscope.recording import open_recording
from gpuscope.store.connect import connect_reader, connect_writer, database_path
from gpuscope.store.schema import MIGRATIONS, SCHEMA_VERSION
from gpuscope.store.sessions_write import SessionInfo, create_session
from gpuscope.store.writer import EventWriter
from tests.ingero_fixtures import ingero_fixture
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
