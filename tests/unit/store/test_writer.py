"""The writer thread: named writes run on it, in order with event batches; errors reach the producer."""

from __future__ import annotations

import os
import sqlite3
import threading
import time

import numpy as np
import pytest

import gpuscope.store.events_write as rows_module
import gpuscope.store.writer as writer_module
from gpuscope.bpf.wire import EVENT_DTYPE
from gpuscope.store.bulk_rows import load_bulk_rows
from gpuscope.store.stacks_write import insert_event_stacks, insert_stacks
from gpuscope.store.writer import Durability, EventWriter, events_end_ns


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


@pytest.mark.parametrize("path", ["blob", "bound values"])
def test_every_column_of_every_event_is_stored_in_order_whatever_the_batch_length(
    conn: sqlite3.Connection, session_id: int, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given the writer storing rows one blob a statement (32 rows at most, so batches span statements), or
    # binding every value where the extension cannot load
    if path == "blob":
        monkeypatch.setattr(rows_module, "_ROWS_PER_BLOB", 32)
        if not load_bulk_rows(sqlite3.connect(":memory:")):
            assert os.environ.get("CI") != "true", "gs_int64_rows did not load"
            pytest.skip("this Python's sqlite3 cannot load extensions")
    else:
        monkeypatch.setattr(rows_module, "load_bulk_rows", lambda c: False)
    # and batches around the rows per statement (whole statements and a remainder)
    rng = np.random.default_rng(11)
    batches = [_events(n, start_ns=10_000 * n) for n in (1, 31, 32, 33, 70)]
    for ev in batches:
        for name in ("duration_ns", "bytes", "handle", "stream", "arg0", "arg1", "cgroup_id", "cgroup_v1_id"):
            ev[name] = rng.integers(0, 2**63, len(ev), dtype=np.uint64)
        ev["pid"], ev["tid"] = rng.integers(1, 2**31, len(ev)), rng.integers(1, 2**31, len(ev))
        ev["op"], ev["flags"], ev["ret"] = rng.integers(0, 256, len(ev)), 1, rng.integers(-5, 5, len(ev))
    writer = EventWriter(conn, session_id)
    assert writer.bulk_rows is (path == "blob")

    # when
    for ev in batches:
        writer.put(ev)
    writer.close()

    # then the rows, in insertion order, are the events field by field
    got = conn.execute(
        "SELECT ts_ns, duration_ns, pid, tid, cgroup_id, op_id, flags, ret, bytes, handle, stream, arg0, arg1, "
        "cgroup_v1_id FROM event_log WHERE session_id = ? ORDER BY rowid",
        (session_id,),
    ).fetchall()
    names = ("ts_ns", "duration_ns", "pid", "tid", "cgroup_id", "op", "flags", "ret", "bytes", "handle", "stream")
    want = np.concatenate(batches)
    assert got == [
        tuple(int(x) for x in r)
        for r in zip(*(want[n].tolist() for n in (*names, "arg0", "arg1", "cgroup_v1_id")), strict=True)
    ]


def test_stack_hashes_handed_with_a_batch_are_stored_on_the_rows_and_the_view_joins_them(
    conn: sqlite3.Connection, session_id: int
) -> None:
    # given a stored stack, and a batch of 100 calls, 70 of which have it (hash 17), split by a small transaction bound
    insert_stacks(conn, [(17, "[]", "site (x.py:1)", 1, 0, None)])
    conn.commit()
    ev = _events(100)
    hashes = np.where(np.arange(100) < 70, 17, 0).astype(np.int64)
    writer = EventWriter(conn, session_id, durability=Durability(rows_per_commit=16))
    # when they are put together
    writer.put(ev, hashes)
    writer.close()
    # then every event is stored, exactly the 70 calls with a stack show it, with no link row apart
    assert conn.execute("SELECT count(*) FROM event_log").fetchone() == (100,)
    linked = conn.execute("SELECT ts_ns FROM event_call_stacks WHERE stack_hash = 17 ORDER BY ts_ns").fetchall()
    assert [t for (t,) in linked] == ev["ts_ns"][:70].tolist()
    assert conn.execute("SELECT count(*) FROM event_stacks").fetchone() == (0,)


def test_a_link_row_takes_precedence_over_the_stack_on_the_row(conn: sqlite3.Connection, session_id: int) -> None:
    # given a call stored with the stack of its site (17), and linked apart to its own full stack (18)
    insert_stacks(conn, [(17, "[]", "site", 1, 0, None), (18, "[]", "own", 1, 0, None)])
    ev = _events(1)
    insert_event_stacks(conn, [(session_id, 41, 41, int(ev["ts_ns"][0]), 18)])
    conn.commit()
    writer = EventWriter(conn, session_id)
    writer.put(ev, np.array([17], dtype=np.int64))
    writer.close()
    # then the view shows the call once, with its own stack
    assert conn.execute("SELECT stack_hash, call_site FROM event_call_stacks").fetchall() == [(18, "own")]


def _shedding(conn: sqlite3.Connection, session_id: int) -> tuple[EventWriter, list[str]]:
    """A writer shedding (a reader pins the WAL near the cap), and the labels of the named writes that ran."""
    writer = EventWriter(conn, session_id)
    writer.shed = True
    return writer, []


def test_named_writes_are_held_while_shedding_and_run_in_order_once_the_wal_can_be_cut(
    conn: sqlite3.Connection, session_id: int
) -> None:
    writer, ran = _shedding(conn, session_id)
    # when named writes come meanwhile
    writer.write(lambda c, label: ran.append(label), "first")
    writer.write(lambda c, label: ran.append(label), "second")
    writer.put(_events(5))
    deadline = time.monotonic() + 5
    while writer.pending() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # a commit or two while shedding
    # then nothing was written: the rows were shed and the writes held
    assert ran == [] and writer.rows_shed == 5
    # when the WAL can be cut again, the held writes run first, in order, then what follows
    writer.shed = False
    writer.write(lambda c, label: ran.append(label), "third")
    writer.close()
    assert ran == ["first", "second", "third"]


def test_writes_still_held_at_the_end_are_written_before_the_writer_stops(
    conn: sqlite3.Connection, session_id: int
) -> None:
    writer, ran = _shedding(conn, session_id)
    writer.write(lambda c, label: ran.append(label), "counts")
    writer.close()
    assert ran == ["counts"]


def test_writes_held_through_a_long_shedding_stretch_are_released_a_few_a_transaction(
    conn: sqlite3.Connection, session_id: int
) -> None:
    # given a writer that held ten named writes while shedding (a reader pinned the WAL near the cap)
    commits: list[int] = []
    writer = EventWriter(conn, session_id, after_commit=lambda c: commits.append(len(commits)))
    writer.shed = True
    ran: list[tuple[str, int]] = []
    for i in range(10):
        writer.write(lambda c, label: ran.append((label, len(commits))), f"w{i}")
    deadline = time.monotonic() + 5
    while writer.pending() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ran == []
    # when the WAL can be cut again and more comes
    writer.shed = False
    writer.put(_events(5))
    writer.close()
    # then they ran in order, at most HELD_WRITES_PER_COMMIT in one transaction, the cap checked between
    assert [label for label, _ in ran] == [f"w{i}" for i in range(10)]
    per_commit = [sum(1 for _, at in ran if at == n) for n in sorted({at for _, at in ran})]
    assert per_commit == [4, 4, 2], per_commit
    assert writer_module.HELD_WRITES_PER_COMMIT == 4


def test_a_transaction_never_holds_more_rows_than_its_bound_whatever_the_batches(
    conn: sqlite3.Connection, session_id: int
) -> None:
    # given a writer bounded to 1,000 rows a transaction, held up while batches of 700 queue behind it
    stored: list[int] = []
    writer = EventWriter(
        conn,
        session_id,
        durability=Durability(rows_per_commit=1_000, min_pending_rows=50_000),
        after_commit=lambda c: stored.append(int(c.execute("SELECT count(*) FROM event_log").fetchone()[0])),
    )
    gate = threading.Event()
    writer.write(lambda c: gate.wait(10))
    for i in range(12):
        writer.put(_events(700, start_ns=i * 10**6))
    gate.set()
    writer.close()
    # then every row is stored, and no commit added more than 1,000 (taking a whole next batch made up to 1,400)
    added = np.diff([0, *stored])
    assert stored[-1] == 12 * 700
    assert added.max() <= 1_000, added.tolist()
