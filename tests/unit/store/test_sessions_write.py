"""The sessions row: created at the start, counted while running, closed at the stop."""

from __future__ import annotations

import json
import sqlite3

from gpuscope.store.sessions_write import (
    SessionCounts,
    SessionInfo,
    close_session,
    create_session,
    update_session_counts,
)

COUNTS = SessionCounts(
    events_recorded=1200,
    events_dropped=3,
    drops={"submitted": 1203, "dropped": 3},
    targets=(41, 42),
    libraries=({"path": "/usr/lib/libcudart.so.12", "kind": "cudart", "version": "12.4", "probes": 9},),
)


def _row(conn: sqlite3.Connection, session_id: int) -> sqlite3.Row:
    conn.row_factory = sqlite3.Row
    row: sqlite3.Row = conn.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
    return row


def test_a_created_session_reads_back_with_its_argv_and_flags(conn: sqlite3.Connection) -> None:
    info = SessionInfo(
        "u-9", "node-b", "host-b", "6.8", "0.1", "1.4", 10**18, 7_000, ["gpuscope", "trace"], {"b": 1, "a": 2}
    )

    sid = create_session(conn, info)

    row = _row(conn, sid)
    assert (row["uuid"], row["node"], row["started_wall_ns"], row["started_mono_ns"]) == (
        "u-9",
        "node-b",
        10**18,
        7_000,
    )
    assert json.loads(row["argv"]) == ["gpuscope", "trace"]
    assert row["flags"] == json.dumps({"a": 2, "b": 1})  # keys sorted: the same flags give the same text


def test_updated_counts_are_stored_and_the_session_stays_open(conn: sqlite3.Connection, session_id: int) -> None:
    update_session_counts(conn, session_id, COUNTS)

    row = _row(conn, session_id)
    assert (row["events_recorded"], row["events_dropped"]) == (1200, 3)
    assert json.loads(row["drops"]) == COUNTS.drops
    assert json.loads(row["targets"]) == [41, 42]
    assert json.loads(row["libraries"]) == list(COUNTS.libraries)
    assert (row["stopped_wall_ns"], row["stopped_mono_ns"]) == (None, None)


def test_a_closed_session_stores_its_final_counts_and_when_it_stopped(
    conn: sqlite3.Connection, session_id: int
) -> None:
    update_session_counts(conn, session_id, SessionCounts(10, 0, {}, (), ()))

    close_session(conn, session_id, COUNTS, stopped_wall_ns=10**18 + 9, stopped_mono_ns=5_009)

    row = _row(conn, session_id)
    assert (row["events_recorded"], row["stopped_wall_ns"], row["stopped_mono_ns"]) == (1200, 10**18 + 9, 5_009)
    assert json.loads(row["targets"]) == [41, 42]
