"""Reads of events: the analysis frame rows, the recording's span, and the events view for diff, export and the API."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from gpuscope.model.ops import Op
from gpuscope.store.events_read import (
    COUNT_BY_OP,
    PACKED_PID_SHIFT,
    PACKED_TID_SHIFT,
    FrameFilter,
    call_chunks,
    count_events,
    event_id_span,
    event_span,
    events_statement,
    export_rows,
    frame_row_chunks,
    op_counts_by_interval,
)
from tests.unit.analysis.builder import MS, US, Events

from .recordings import FIRST_SESSION, FIRST_SESSION_WALL_NS, add_aggregates, add_events, add_session, reading, record

LAUNCH = int(Op.cudaLaunchKernel)
SYNC = int(Op.cudaStreamSynchronize)
COPY = int(Op.cudaMemcpy)
SWITCH = int(Op.sched_switch)


def _unpacked(row: tuple[int, ...]) -> tuple[int, ...]:
    """A frame row as (ts, dur, pid, tid, op, cgroup, bytes, handle, stream, arg0, arg1)."""
    ts, dur, packed, *detail = row
    pid = (packed >> PACKED_PID_SHIFT) & 0x3FFFFF
    return (ts, dur, pid, packed >> PACKED_TID_SHIFT, packed & 0xFF, *detail)


def _frame_rows(
    conn: sqlite3.Connection,
    start_ns: int = 0,
    end_ns: int = 10**18,
    *,
    detail_ops: frozenset[int] = frozenset({LAUNCH, SYNC, COPY}),
    keep_every: int = 1,
    pids: tuple[int, ...] = (),
    thin: dict[tuple[int, int], int] | None = None,
) -> list[tuple[int, ...]]:
    chunks = frame_row_chunks(conn, FrameFilter(start_ns, end_ns, detail_ops, keep_every, pids, thin))
    return [_unpacked(row) for chunk in chunks for row in chunk]


def test_an_empty_recording_has_no_event_span_and_no_rows(tmp_path: Path) -> None:
    with reading(record(Events(), tmp_path / "rec.db")) as conn:
        assert event_span(conn) is None
        assert event_id_span(conn) == 0


def test_the_event_span_runs_from_the_first_start_to_the_latest_end(tmp_path: Path) -> None:
    # given a long sync that ends after the last call started and ended
    ev = Events()
    ev.add(Op.cudaStreamSynchronize, 1 * MS, 50 * MS)
    ev.add(Op.cudaLaunchKernel, 10 * MS, 5 * US)
    # when
    with reading(record(ev, tmp_path / "rec.db")) as conn:
        span = event_span(conn)
    # then
    assert span == (1 * MS, 51 * MS)


def test_the_event_span_finds_a_call_longer_than_a_minute_where_aggregates_bound_the_longest(tmp_path: Path) -> None:
    # given a 3-minute sync that started 2 minutes before the last call, counted in the aggregates
    ev = Events()
    ev.add(Op.cudaStreamSynchronize, 1 * MS, 180_000 * MS)
    ev.add(Op.cudaLaunchKernel, 120_000 * MS, 5 * US)
    path = record(ev, tmp_path / "rec.db")
    add_aggregates(path, FIRST_SESSION, ev)
    # when
    with reading(path) as conn:
        span = event_span(conn)
    # then its end is the recording's end
    assert span == (1 * MS, 180_001 * MS)


def test_the_longest_event_bound_is_read_again_once_the_recording_changes(tmp_path: Path) -> None:
    # given a recording whose span was read once (its longest event, 5 us, is remembered for that state of the file)
    first = Events()
    first.add(Op.cudaLaunchKernel, 0, 5 * US)
    first.add(Op.cudaLaunchKernel, 120_000 * MS, 5 * US)
    path = record(first, tmp_path / "rec.db")
    add_aggregates(path, FIRST_SESSION, first)
    with reading(path) as conn:
        assert event_span(conn) == (0, 120_000 * MS + 5 * US)
    # when a second session adds a 3-minute sync that started two minutes before the last call
    later = Events()
    later.add(Op.cudaStreamSynchronize, 1 * MS, 180_000 * MS)
    later.add(Op.cudaLaunchKernel, 121_000 * MS, 5 * US)
    sid = add_session(path, "node", FIRST_SESSION_WALL_NS, 0)
    add_events(path, sid, later)
    add_aggregates(path, sid, later)
    # then the span reaches its end: the bound was not taken from the earlier state
    with reading(path) as conn:
        assert event_span(conn) == (0, 180_001 * MS)


def test_the_event_id_span_bounds_the_rows_of_the_log(tmp_path: Path) -> None:
    ev = Events()
    ev.loop(Op.cudaLaunchKernel, 3, MS, 5 * US)
    with reading(record(ev, tmp_path / "rec.db")) as conn:
        assert event_id_span(conn) == 3


def test_a_frame_row_packs_tid_pid_and_op_and_carries_the_detail_asked_for(tmp_path: Path) -> None:
    ev = Events()
    ev.add(Op.cudaMemcpy, 5, 7, 4242, 4243, nbytes=1024, handle=9, cgroup=77, arg0=3, stream=5, arg1=8)
    with reading(record(ev, tmp_path / "rec.db")) as conn:
        rows = _frame_rows(conn)
    # stream and arg1 are read for host events only
    assert rows == [(5, 7, 4242, 4243, COPY, 77, 1024, 9, 0, 3, 0)]


def test_gpu_ops_not_asked_for_read_zero_detail_and_host_events_keep_theirs(tmp_path: Path) -> None:
    # given
    ev = Events()
    ev.add(Op.cudaLaunchKernel, 0, 5 * US, handle=0xAA, nbytes=5, cgroup=77, arg0=1, stream=3)
    ev.sched(10 * US, 20 * US, preempted=False, by_pid=999)
    # when
    with reading(record(ev, tmp_path / "rec.db")) as conn:
        launch, switch = _frame_rows(conn, detail_ops=frozenset())
    # then
    assert launch[5:] == (0, 0, 0, 0, 0, 0)
    assert switch[5:] == ev.rows[1][5:]


def test_frame_rows_are_the_events_that_overlap_the_window(tmp_path: Path) -> None:
    ev = Events()
    ev.add(Op.cudaStreamSynchronize, 0, 10 * MS)
    ev.add(Op.cudaLaunchKernel, 20 * MS, 1 * MS)
    ev.add(Op.cudaLaunchKernel, 40 * MS, 1 * MS)
    with reading(record(ev, tmp_path / "rec.db")) as conn:
        rows = _frame_rows(conn, 9 * MS, 30 * MS)
    assert [r[0] for r in rows] == [0, 20 * MS]


def test_a_late_window_still_gets_the_long_call_that_started_long_before_it(tmp_path: Path) -> None:
    # given a long recording whose aggregates bound the longest call, and a 30-s sync that ends in its last minute
    ev = Events()
    ev.loop(Op.cudaLaunchKernel, 600, 1000 * MS, 1 * MS)
    ev.add(Op.cudaStreamSynchronize, 560_000 * MS, 30_000 * MS)
    path = record(ev, tmp_path / "rec.db")
    add_aggregates(path, FIRST_SESSION, ev)
    # when the frame of the last 10 s is read (a narrow window: through the index, from the longest call back)
    with reading(path) as conn:
        rows = _frame_rows(conn, 589_000 * MS, 600_000 * MS)
    # then the sync is among the rows, with the calls that started in the window or overlap it
    assert (560_000 * MS, 30_000 * MS) in [r[:2] for r in rows]
    assert [r[0] for r in rows if r[4] == LAUNCH] == [t * MS for t in range(589_000, 600_000, 1000)]


def test_frame_rows_of_chosen_pids_keep_every_host_event_but_not_other_processes_gpu_calls(tmp_path: Path) -> None:
    # given GPU calls of two processes (NCCL included: GPU calls too) and a host event of the other one
    ev = Events()
    ev.add(Op.cudaLaunchKernel, 0, 5 * US, pid=100)
    ev.add(Op.cudaLaunchKernel, 1 * MS, 5 * US, pid=200)
    ev.add(Op.ncclAllReduce, 1 * MS, 5 * US, pid=200)
    ev.sched(2 * MS, 20 * US, pid=200, preempted=True)
    with reading(record(ev, tmp_path / "rec.db")) as conn:
        rows = _frame_rows(conn, pids=(100,))
    assert [(r[2], r[4]) for r in rows] == [(100, LAUNCH), (200, SWITCH)]


def test_frame_rows_come_in_chunks_of_at_most_the_asked_size(tmp_path: Path) -> None:
    ev = Events()
    ev.loop(Op.cudaLaunchKernel, 5, MS, 5 * US)
    with reading(record(ev, tmp_path / "rec.db")) as conn:
        chunks = list(frame_row_chunks(conn, FrameFilter(0, 10 * MS, frozenset()), chunk_rows=2))
    assert [len(c) for c in chunks] == [2, 2, 1]


def test_thinned_frame_rows_keep_slow_calls_one_in_n_and_the_first_of_each_run(tmp_path: Path) -> None:
    # given a sync (row 1), then ten launches (rows 2..11; row 6 slow), then a launch of another process (row 12)
    ev = Events()
    ev.add(Op.cudaStreamSynchronize, 1 * MS, 50 * US)
    for row in range(2, 12):
        ev.add(Op.cudaLaunchKernel, row * MS, 500 * US if row == 6 else 5 * US)
    ev.add(Op.cudaLaunchKernel, 12 * MS, 5 * US, pid=200)
    # when the launches of pid 100 are thinned to one in 4 and calls over 100 us
    with reading(record(ev, tmp_path / "rec.db")) as conn:
        rows = _frame_rows(conn, keep_every=4, thin={(100, LAUNCH): 100 * US})
    # then the sync, the first launch after it, rows 4 and 8, the slow row 6, and the other process's launch remain
    assert [r[0] // MS for r in rows] == [1, 2, 4, 6, 8, 12]


def test_call_chunks_read_op_session_time_duration_and_flags_of_every_call(tmp_path: Path) -> None:
    ev = Events()
    ev.loop(Op.cudaLaunchKernel, 3, MS, 5 * US)
    with reading(record(ev, tmp_path / "rec.db")) as conn:
        chunks = list(call_chunks(conn, 2))
    assert [len(c) for c in chunks] == [2, 1]
    assert chunks[1] == [("cudaLaunchKernel", FIRST_SESSION, 2 * MS, 5 * US, 0)]


def test_export_rows_follow_storage_order_or_take_the_first_by_time(tmp_path: Path) -> None:
    # given calls stored out of time order
    ev = Events()
    for ts in (30, 10, 20):
        ev.add(Op.cudaLaunchKernel, ts, 5, nbytes=64)
    # when
    with reading(record(ev, tmp_path / "rec.db")) as conn:
        stored = list(export_rows(conn))
        first = list(export_rows(conn, first_by_time=2))
    # then
    assert [r[1] for r in stored] == [30, 10, 20]
    assert [r[1] for r in first] == [10, 20]
    session_id, _, dur, pid, tid, comm, source, op, nbytes, *_ = first[0]
    assert (session_id, dur, pid, tid, comm, source, op, nbytes) == (
        FIRST_SESSION,
        5,
        100,
        100,
        "train",
        "cuda",
        "cudaLaunchKernel",
        64,
    )


def test_count_events_counts_the_rows_of_the_events_view(tmp_path: Path) -> None:
    ev = Events()
    ev.loop(Op.cudaLaunchKernel, 4, MS, 5 * US)
    with reading(record(ev, tmp_path / "rec.db")) as conn:
        assert count_events(conn) == 4


def test_op_counts_by_interval_count_the_calls_of_one_session_per_interval(tmp_path: Path) -> None:
    # given session 1 with calls over three 1 ms intervals, and a second session's call
    ev = Events()
    ev.add(Op.cudaLaunchKernel, 0, 5)
    ev.add(Op.cudaLaunchKernel, MS, 5)
    ev.add(Op.cudaStreamSynchronize, MS + MS // 2, 5)
    ev.add(Op.cudaLaunchKernel, 2 * MS + 1, 5)
    path = record(ev, tmp_path / "rec.db")
    other = Events()
    other.add(Op.cudaLaunchKernel, 0, 5)
    add_events(path, add_session(path, "b", 0, 0), other)
    # when
    with reading(path) as conn:
        counts = sorted(op_counts_by_interval(conn, FIRST_SESSION, 0, MS))
        shifted = sorted(op_counts_by_interval(conn, FIRST_SESSION, MS, MS))
    # then
    launch, sync = "cudaLaunchKernel", "cudaStreamSynchronize"
    assert counts == [(1, 0, launch, 1), (1, 1, launch, 1), (1, 1, sync, 1), (1, 2, launch, 1)]
    assert [(b - 1, op, n) for _, b, op, n in shifted] == [(b, op, n) for _, b, op, n in counts]


def test_the_events_statement_selects_the_ops_and_source_asked_for_oldest_first_up_to_a_limit(tmp_path: Path) -> None:
    # given
    ev = Events()
    ev.add(Op.cudaLaunchKernel, 30, 5)
    ev.add(Op.cudaStreamSynchronize, 10, 5)
    ev.add(Op.cudaLaunchKernel, 20, 5)
    ev.sched(5, 5, preempted=True)

    path = record(ev, tmp_path / "rec.db")

    def times(ops: list[str] | None = None, source: str | None = None, limit: int | None = None) -> list[int]:
        statement = events_statement(ops, source, limit)
        with reading(path) as conn:
            cur = conn.execute(statement.sql, statement.params)
            ts = [d[0] for d in cur.description].index("ts_ns")
            return [row[ts] for row in cur]

    # when / then
    assert times() == [5, 10, 20, 30]
    assert times(["cudaLaunchKernel", "cudaStreamSynchronize"]) == [10, 20, 30]
    assert times(source="host") == [5]
    assert times(limit=2) == [5, 10]
    assert times([]) == []


def test_the_count_by_op_example_counts_the_calls_of_each_op(tmp_path: Path) -> None:
    ev = Events()
    ev.loop(Op.cudaLaunchKernel, 3, MS, 5 * US)
    ev.add(Op.cudaStreamSynchronize, 4 * MS, 5 * US)
    with reading(record(ev, tmp_path / "rec.db")) as conn:
        counts = dict(conn.execute(COUNT_BY_OP).fetchall())
    assert counts == {"cudaLaunchKernel": 3, "cudaStreamSynchronize": 1}
