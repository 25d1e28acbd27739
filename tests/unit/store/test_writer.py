"""The writer thread: named writes run on it, in order with event batches; errors reach the producer."""

from __future__ import annotations

import sqlite3
import threading

import numpy as np
import pytest

from gpuscope.bpf.wire import EVENT_DTYPE
from gpuscope.store.writer import EventWriter, events_end_ns


def _events(n: int, start_ns: int = 1_000) -> np.ndarray:
    ev = np.zeros(n, dtype=EVENT_DTYPE)
    ev["ts_ns"] = start_ns + np.arange(n) * 100
    ev["duration_ns"] = 50
    ev["pid"] = ev["tid"] = 41
    ev["comm"] = b"python"
    return ev


def test_a_named_write_runs_on_the_writer_thread_after_the_events_queued_before_it(
    conn: sqlite3.Connection, session_id: int
) -> None:
    # given
    seen: list[tuple[str, int, str]] = []

    def note(c: sqlite3.Connection, label: str) -> None:
        (rows,) = c.execute("SELECT count(*) FROM event_log").fetchone()
        seen.append((threading.current_thread().name, rows, label))

    writer = EventWriter(conn, session_id)

    # when
    writer.put(_events(10))
    writer.write(note, "after ten")
    writer.put(_events(5))
    writer.write(note, label="after fifteen")
    writer.close()

    # then
    assert seen == [("gpuscope-writer", 10, "after ten"), ("gpuscope-writer", 15, "after fifteen")]


def test_a_named_write_runs_inside_a_transaction_and_maintenance_outside_one(
    conn: sqlite3.Connection, session_id: int
) -> None:
    in_transaction: dict[str, bool] = {}

    def note(c: sqlite3.Connection, key: str) -> None:
        in_transaction[key] = c.in_transaction

    writer = EventWriter(conn, session_id)
    writer.write(note, "write")
    writer.call_fn(note, "maintenance")
    writer.close()

    assert in_transaction == {"write": True, "maintenance": False}


def test_a_failed_named_write_is_raised_to_the_producer(conn: sqlite3.Connection, session_id: int) -> None:
    def fail(c: sqlite3.Connection) -> None:
        c.execute("INSERT INTO no_such_table VALUES (1)")

    writer = EventWriter(conn, session_id)
    writer.write(fail)

    with pytest.raises(sqlite3.OperationalError, match="no_such_table"):
        writer.close()


def test_events_end_where_the_last_stored_event_ends(conn: sqlite3.Connection, session_id: int) -> None:
    empty = events_end_ns(conn)
    writer = EventWriter(conn, session_id)
    writer.put(_events(3, start_ns=7_000))
    writer.close()

    assert (empty, events_end_ns(conn)) == (0, 7_000 + 2 * 100 + 50)
