"""The writer commits often, survives a failing store, and holds the size cap for the file and its WAL."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import numpy as np
import pytest

from gpuscope.bpf.wire import EVENT_DTYPE
from gpuscope.model.drops import drop_advice
from gpuscope.store import retention
from gpuscope.store.connect import connect_writer
from gpuscope.store.retention import BLOCKS_MIN_CAP, Reserve, SizeCap, db_bytes
from gpuscope.store.sessions_read import session_states
from gpuscope.store.sessions_write import SessionCounts, SessionInfo, close_session, create_session, mark_committed
from gpuscope.store.writer import Durability, EventWriter


def _events(n: int, start_ns: int = 1_000) -> np.ndarray:
    ev = np.zeros(n, dtype=EVENT_DTYPE)
    ev["ts_ns"] = start_ns + np.arange(n) * 100
    ev["duration_ns"] = 50
    ev["pid"] = ev["tid"] = 41
    ev["arg0"] = np.arange(n)
    ev["comm"] = b"python"
    return ev


def _session(conn: sqlite3.Connection) -> int:
    return create_session(conn, SessionInfo("u-1", "n", "h", "6.8", "0.1", "1.4", 10**18, 5_000, [], {}))


def test_an_endless_stream_is_committed_in_bounded_transactions(tmp_path: Path) -> None:
    # given a writer fed 20 batches of 1,000 rows back to back, never idle
    conn = connect_writer(tmp_path / "r.db")
    sid = _session(conn)
    commits: list[int] = []
    writer = EventWriter(
        conn,
        sid,
        durability=Durability(rows_per_commit=1_000, min_pending_rows=20_000),
        on_commit=lambda c, mark: commits.append(mark.mono_ns),
    )
    for i in range(20):
        writer.put(_events(1_000, start_ns=i * 1_000_000))
    writer.close()
    # then no transaction held more than 1,000 rows, so a kill loses at most one
    assert len(commits) == 20
    assert commits == sorted(commits)


def test_a_split_batch_is_marked_complete_only_with_its_last_part(tmp_path: Path) -> None:
    # given one batch of 40,000 events, split into transactions of 5,000
    conn = connect_writer(tmp_path / "r.db")
    sid = _session(conn)
    marks: list[int] = []
    writer = EventWriter(
        conn,
        sid,
        durability=Durability(rows_per_commit=5_000, min_pending_rows=50_000),
        on_commit=lambda c, mark: marks.append(int(c.execute("SELECT count(*) FROM event_log").fetchone()[0])),
    )
    writer.put(_events(40_000))
    writer.close()
    # then the recording is said complete up to the batch's read time only once all of it is stored
    assert marks == [40_000]


def test_a_slow_stream_commits_on_the_time_bound(tmp_path: Path) -> None:
    # given transactions bounded at 50 ms and named writes that take 30 ms each, queued without a pause
    conn = connect_writer(tmp_path / "r.db")
    sid = _session(conn)
    commits: list[float] = []
    writer = EventWriter(
        conn,
        sid,
        durability=Durability(commit_every_s=0.05, rows_per_commit=10**9),
        on_commit=lambda c, mark: commits.append(time.monotonic()),
    )

    def slow(c: sqlite3.Connection) -> None:
        time.sleep(0.03)

    for _ in range(10):
        writer.put(_events(10))
        writer.write(slow)
    writer.close()
    # then they were not all one transaction: at most two 30 ms writes go in one
    assert len(commits) >= 5


def test_each_commit_says_up_to_when_the_recording_is_complete(tmp_path: Path) -> None:
    conn = connect_writer(tmp_path / "r.db")
    sid = _session(conn)
    writer = EventWriter(conn, sid, on_commit=lambda c, mark: mark_committed(c, sid, mark.wall_ns, mark.mono_ns))
    before = time.time_ns()
    writer.put(_events(100))
    writer.close()
    (state,) = session_states(conn)
    assert state.committed_wall_ns is not None and before <= state.committed_wall_ns <= time.time_ns()
    assert not state.closed


def test_a_session_closed_after_a_failure_stays_complete_only_up_to_its_last_commit(tmp_path: Path) -> None:
    # given a session whose rows were committed up to t=5 s, then whose store failed (a full disk) before its stop
    conn = connect_writer(tmp_path / "r.db")
    sid = _session(conn)
    mark_committed(conn, sid, 10**18 + 5 * 10**9, 5 * 10**9)
    counts = SessionCounts(100, 0, {}, (), ())
    # when it is closed at t=7 s with the failure as its end
    close_session(conn, sid, counts, stopped_wall_ns=10**18 + 7 * 10**9, stopped_mono_ns=7 * 10**9,
                  end_reason="disk full", complete=False)  # fmt: skip
    (state,) = session_states(conn)
    # then it is closed, and complete up to its last commit, not up to its stop (1.7 s of rows were claimed)
    assert state.closed and state.end_reason == "disk full"
    assert state.committed_wall_ns == 10**18 + 5 * 10**9
    assert conn.execute("SELECT committed_mono_ns FROM sessions WHERE id = ?", (sid,)).fetchone() == (5 * 10**9,)
    # while a session closed normally is complete up to its stop
    sid2 = _session_with(conn, "u-2")
    close_session(conn, sid2, counts, stopped_wall_ns=10**18 + 9 * 10**9, stopped_mono_ns=9 * 10**9)
    assert session_states(conn)[1].committed_wall_ns == 10**18 + 9 * 10**9


def _session_with(conn: sqlite3.Connection, uuid: str) -> int:
    return create_session(conn, SessionInfo(uuid, "n", "h", "6.8", "0.1", "1.4", 10**18, 5_000, [], {}))


def test_a_full_disk_degrades_the_writer_instead_of_killing_it(tmp_path: Path) -> None:
    # given a transaction that fails as a full disk does, after 500 rows of it were inserted
    conn = connect_writer(tmp_path / "r.db")
    sid = _session(conn)
    freed: list[bool] = []
    writer = EventWriter(conn, sid, on_failure=lambda: freed.append(True))
    writer.put(_events(300))
    writer.close()  # committed: 300 rows

    writer = EventWriter(conn, sid, on_failure=lambda: freed.append(True))

    def full(c: sqlite3.Connection) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    writer.put(_events(500))
    writer.write(full)
    deadline = time.monotonic() + 5
    while writer.failure is None and time.monotonic() < deadline:
        time.sleep(0.01)
    # when more events arrive and the session is closed afterwards
    writer.put(_events(200))
    writer.write(close_session, sid, _counts(), stopped_wall_ns=2, stopped_mono_ns=2, end_reason="disk full")
    writer.close()  # a full disk is a state, not an exception
    # then the failure is named, space was freed first, and the rolled-back and later rows are counted as lost
    assert writer.failure == "disk full" and freed == [True]
    assert (writer.rows_written, writer.rows_lost) == (0, 700)
    assert conn.execute("SELECT count(*) FROM event_log").fetchone() == (300,)
    (state,) = session_states(conn)
    assert state.closed and state.end_reason == "disk full"


def _counts():
    from gpuscope.store.sessions_write import SessionCounts

    return SessionCounts(0, 0, {}, (), ())


def test_any_other_store_error_is_raised_when_the_writer_closes(tmp_path: Path) -> None:
    conn = connect_writer(tmp_path / "r.db")
    writer = EventWriter(conn, _session(conn))

    def broken(c: sqlite3.Connection) -> None:
        c.execute("INSERT INTO no_such_table VALUES (1)")

    writer.write(broken)
    with pytest.raises(sqlite3.OperationalError, match="no_such_table"):
        writer.close()
    assert writer.failure is not None and writer.failure.startswith("error: ")


def _capped_writer(path: Path, cap: int) -> tuple[EventWriter, SizeCap, list[int]]:
    conn = connect_writer(path)
    size_cap = SizeCap(path, cap)
    size_cap.configure(conn)
    sizes: list[int] = []
    box: list[EventWriter] = []

    def after(c: sqlite3.Connection) -> None:
        sizes.append(db_bytes(path))  # as left by the commit, before the cap acts
        box[0].shed = size_cap.check(c)
        sizes.append(db_bytes(path))

    writer = EventWriter(
        conn,
        _session(conn),
        durability=Durability(rows_per_commit=size_cap.rows_per_commit(50_000)),
        after_commit=after,
        blocks=size_cap.blocks,
    )
    box.append(writer)
    return writer, size_cap, sizes


def test_the_cap_holds_for_the_file_and_its_wal_after_every_commit(tmp_path: Path) -> None:
    # given a 1 MiB cap and about 15 MiB of rows
    path = tmp_path / "r.db"
    writer, cap, sizes = _capped_writer(path, 1 << 20)
    for i in range(60):
        writer.put(_events(4_000, start_ns=i * 10**9))
    writer.close()
    # then the file and its WAL never went past the cap, and the oldest rows went first
    assert max(sizes) <= 1 << 20, max(sizes)
    assert cap.rows_deleted > 100_000 and writer.rows_shed == 0
    conn = sqlite3.connect(path)
    first, last = conn.execute("SELECT min(id), max(id) FROM event_log").fetchone()
    assert last == 240_000 and first > 100_000


def _block_rows(path: Path) -> tuple[int, int, int]:
    """(rows the blocks hold, the first id they start at, rows in event_log)."""
    conn = sqlite3.connect(path)
    try:
        held, first = conn.execute("SELECT coalesce(sum(rows), 0), min(first_id) FROM event_blocks").fetchone()
        return int(held), first, int(conn.execute("SELECT count(*) FROM event_log").fetchone()[0])
    finally:
        conn.close()


def test_a_small_cap_keeps_no_column_blocks_and_sizes_its_transactions_without_them(tmp_path: Path) -> None:
    # given caps below, at and without the size from which column blocks are kept
    small, large, none = (
        SizeCap(tmp_path / "a.db", 2 << 20),
        SizeCap(tmp_path / "b.db", BLOCKS_MIN_CAP),
        SizeCap(tmp_path / "c.db", 0),
    )
    # then only the small one keeps none, and its transactions carry rows alone: more of them in 1/40 of the cap
    assert (small.blocks, large.blocks, none.blocks) == (False, True, True)
    assert small.rows_per_commit(50_000) * 64 * 40 <= 2 << 20 < (small.rows_per_commit(50_000) + 1) * 64 * 40
    per_block_row = BLOCKS_MIN_CAP // 40 // large.rows_per_commit(50_000)
    assert 96 <= per_block_row < 97
    # and a writer under the small cap stores every row it keeps without a block
    path = tmp_path / "a.db"
    writer, cap, _ = _capped_writer(path, 2 << 20)
    for i in range(20):
        writer.put(_events(4_000, start_ns=i * 10**9))
    writer.close()
    held, _, rows = _block_rows(path)
    assert cap.rows_deleted > 0 and rows > 0 and held == 0


def test_the_cap_holds_with_column_blocks_and_they_hold_the_rows_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a 1 MiB cap that keeps column blocks (as one of BLOCKS_MIN_CAP or more does), and about 6 MiB of rows
    monkeypatch.setattr(retention, "BLOCKS_MIN_CAP", 1 << 20)
    path = tmp_path / "r.db"
    writer, cap, sizes = _capped_writer(path, 1 << 20)
    assert cap.blocks
    for i in range(25):
        writer.put(_events(4_000, start_ns=i * 10**9))
    writer.close()
    # then the cap held after every commit, rows were deleted, and the blocks hold exactly the rows left
    assert max(sizes) <= 1 << 20, max(sizes)
    held, first, rows = _block_rows(path)
    conn = sqlite3.connect(path)
    (lowest,) = conn.execute("SELECT min(id) FROM event_log").fetchone()
    conn.close()
    assert cap.rows_deleted > 50_000 and held == rows and first == lowest


def _pin_wal(path: Path) -> sqlite3.Connection:
    """A reader holding a snapshot of the recording: the WAL cannot be reset under it."""
    reader = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM event_log").fetchone()
    return reader


def test_a_wal_pinned_beside_a_file_of_free_pages_makes_the_writer_shed_before_the_files_pass_the_cap(
    tmp_path: Path,
) -> None:
    # given a recording whose file is mostly free pages (rows deleted: pages are recycled, never returned while
    # tracing), 0.8 MB on disk for about 5 kB of live rows, traced into again under a 1 MiB cap
    path = tmp_path / "r.db"
    plain = EventWriter(connect_writer(path), 1)
    plain.put(_events(16_500))
    plain.close()
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM event_log WHERE id <= 16400")
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    assert 0.75 * (1 << 20) < db_bytes(path) < 0.9 * (1 << 20), db_bytes(path)
    writer, _, sizes = _capped_writer(path, 1 << 20)
    writer.put(_events(100, start_ns=10**10))
    time.sleep(0.3)
    # when a reader pins the WAL and far more is written meanwhile
    reader = _pin_wal(path)
    for i in range(20):
        writer.put(_events(2_000, start_ns=(i + 20) * 10**9))
        time.sleep(0.01)
    time.sleep(0.3)
    shed = writer.rows_shed
    reader.execute("COMMIT")
    reader.close()
    writer.close()
    # then the writer shed rows rather than let the file, its WAL and shared memory together pass the cap
    assert shed > 0
    assert max(sizes) <= 1 << 20, max(sizes)


def test_a_reader_pinning_the_wal_makes_the_writer_shed_rows_not_break_the_cap(tmp_path: Path) -> None:
    # given a reader that holds an old snapshot of a capped recording
    path = tmp_path / "r.db"
    writer, _, sizes = _capped_writer(path, 1 << 20)
    writer.put(_events(1_000))
    time.sleep(0.3)
    reader = _pin_wal(path)
    # when far more than the cap is written meanwhile
    for i in range(40):
        writer.put(_events(4_000, start_ns=(i + 1) * 10**9))
    time.sleep(0.5)
    shed_while_pinned = writer.rows_shed
    # and the reader lets go
    reader.execute("COMMIT")
    reader.close()
    # (the next commit finds the WAL free again; rows after it are stored)
    writer.put(_events(10, start_ns=99 * 10**9))
    time.sleep(0.3)
    writer.put(_events(4_000, start_ns=100 * 10**9))
    writer.close()
    # then rows were shed while it was pinned, the cap held throughout, and storing resumed after
    assert shed_while_pinned > 0
    assert max(sizes) <= 1 << 20, max(sizes)
    assert not writer.shed
    last = sqlite3.connect(path).execute("SELECT max(ts_ns) FROM event_log").fetchone()[0]
    assert last >= 100 * 10**9


def test_the_reserve_is_real_space_and_is_given_back(tmp_path: Path) -> None:
    reserve = Reserve(tmp_path / "r.db", nbytes=256 << 10)
    assert reserve.create()
    st = reserve.path.stat()
    assert st.st_size == 256 << 10 and st.st_blocks * 512 >= 256 << 10  # allocated, not sparse
    reserve.release()
    assert not reserve.path.exists()


def test_drop_advice_is_the_measured_remedy() -> None:
    assert "--ring-size 128m" in drop_advice({"ring_bytes": 32 << 20})
    assert "--ring-size" not in drop_advice({"ring_bytes": 256 << 20})
    assert "--entry-only" not in drop_advice({"ring_bytes": 32 << 20})
    assert "--pid" in drop_advice({})


def test_the_reserve_fits_inside_a_small_cap_and_is_whole_without_one() -> None:
    # a sixteenth of a small cap (never under 64 KiB), 1 MiB under a large one or none
    assert Reserve.size_for(1 << 20) == 64 << 10
    assert Reserve.size_for(8 << 20) == 512 << 10
    assert Reserve.size_for(1 << 30) == Reserve.SIZE == 1 << 20
    assert Reserve.size_for(0) == Reserve.SIZE


def test_the_cap_learns_the_largest_transaction_and_sheds_for_it_even_with_no_reader(tmp_path: Path) -> None:
    # given a capped recording (its schema about 0.3 MB) checked once after a small commit
    path = tmp_path / "r.db"
    conn = connect_writer(path)
    conn.execute("CREATE TABLE filler(b BLOB)")
    cap = SizeCap(path, 1 << 20)
    cap.configure(conn)
    assumed = cap.txn_bytes
    assert assumed % (4096 + retention.WAL_FRAME_HEADER) == 0  # whole pages, each behind its frame header
    assert cap.check(conn) is False
    # when one transaction adds far more to the WAL than assumed
    with conn:
        conn.execute("INSERT INTO filler VALUES (zeroblob(100000))")
    grew = retention._size(f"{path}-wal")
    assert cap.check(conn) is False
    # then its growth is learned and a quarter more is allowed for the next
    assert 100_000 <= cap.largest_txn_bytes <= grew
    assert cap.txn_bytes == cap.largest_txn_bytes * 5 // 4 > assumed
    # and no more than a quarter of the cap, whatever was seen (past it, shedding would never stop)
    with conn:
        conn.execute("INSERT INTO filler VALUES (zeroblob(350000))")
    assert cap.check(conn) is False
    assert cap.txn_bytes == (1 << 20) // 4
    # and once the file is large enough that the next such transaction could carry it past the cap, rows are
    # shed though no reader pins the WAL (one could start as soon as that transaction commits)
    with conn:
        conn.execute("INSERT INTO filler VALUES (zeroblob(60000))")
    assert cap.check(conn) is True
    now = retention.usage(conn, path)
    assert retention._size(f"{path}-wal") == 0 and now.used <= (1 << 20) * retention.HIGH_WATER
