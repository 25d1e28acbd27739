"""Read events: the analysis frame from ``event_log``, and the ``events`` view for diff, export and the API.

Reads of many rows hand back whole chunks (lists of row tuples) or the cursor
itself, never one Python call per row: fetching rows is what ``explain`` over
millions of events spends its time on.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from gpuscope.model.ops import FIRST_HOST_OP_ID
from gpuscope.store.aggregates_read import aggregates_cover_recording
from gpuscope.store.connect import database_path, file_signature
from gpuscope.store.statement import Statement

if TYPE_CHECKING:
    import numpy as np

COUNT_BY_OP = "SELECT op, count(*) FROM events GROUP BY op"
"""The first query to try on a recording: how many calls of each op (shown in hints)."""

# A frame row is (ts_ns, duration_ns, packed, cgroup_id, bytes, handle, stream, arg0, arg1) with
# packed = (tid << PACKED_TID_SHIFT) | (pid << PACKED_PID_SHIFT) | op_id. Fewer Python objects per
# row is what makes loading fast (tid < 2**22, pid < 2**22, op < 256), and columns an op's rules
# never read are selected as 0 (a cached small int).
FRAME_ROW_WIDTH = 9
PACKED_TID_SHIFT = 30
PACKED_PID_SHIFT = 8
PID_MASK = 0x3FFFFF
OP_MASK = 0xFF
# The frame's columns, in the order a FrameSink takes them (pid and op as the packed row gives them back).
FRAME_FIELDS = ("ts", "dur", "pid", "tid", "op", "cgroup", "bytes", "handle", "stream", "arg0", "arg1")
FRAME_CHUNK_ROWS = 65_536
# Where aggregates do not bound the longest event: the last end is searched among the final minute's starts.
_LAST_END_REACH_NS = 60_000_000_000
# A longest event beyond a year is a damaged value, not a bound worth using.
_LONGEST_BOUND_NS = 365 * 86_400 * 10**9
# Host events (op_id >= 128) always carry their detail: a sched_switch names its preemptor through them.
DETAIL_OP_FLOOR = 128
_FRAME_COLUMNS = (
    f"ts_ns, duration_ns, (tid << {PACKED_TID_SHIFT}) | (pid << {PACKED_PID_SHIFT}) | op_id, "
    "CASE WHEN {detail} THEN cgroup_id ELSE 0 END, "
    "CASE WHEN {detail} THEN bytes ELSE 0 END, "
    "CASE WHEN {detail} THEN handle ELSE 0 END, "
    f"CASE WHEN op_id >= {DETAIL_OP_FLOOR} THEN stream ELSE 0 END, "
    "CASE WHEN {detail} THEN arg0 ELSE 0 END, "
    f"CASE WHEN op_id >= {DETAIL_OP_FLOOR} THEN arg1 ELSE 0 END"
)
_EXPORT_COLUMNS = (
    "SELECT session_id, ts_ns, duration_ns, pid, tid, comm, source, op, bytes, ret, stream, handle, arg0, flags "
    "FROM events"
)


def event_span(conn: sqlite3.Connection) -> tuple[int, int] | None:
    """Return (first ts_ns, last ts_ns + duration_ns) of everything recorded, or None when nothing is.

    Both through the ts index: the last end is among the calls that started
    within the longest event's duration of the last start (the aggregates
    count every event with its duration, so that bound is exact where they
    cover the recording; elsewhere the final minute is searched).
    """
    starts = _start_range(conn)
    if starts is None:
        return None
    lo, last = starts
    longest = _longest_event_ns(conn)
    reach = _LAST_END_REACH_NS if longest is None else longest
    (hi,) = conn.execute("SELECT max(ts_ns + duration_ns) FROM event_log WHERE ts_ns >= ?", (last - reach,)).fetchone()
    return lo, int(hi if hi is not None else lo)


def _start_range(conn: sqlite3.Connection) -> tuple[int, int] | None:
    """The first and the last start time recorded, through the ts index; None when nothing is."""
    # Two statements: only a lone min() or max() walks one edge of the index; together they scan every row.
    (first,) = conn.execute("SELECT min(ts_ns) FROM event_log").fetchone()
    if first is None:
        return None
    (last,) = conn.execute("SELECT max(ts_ns) FROM event_log").fetchone()
    return int(first), int(last)


def _longest_event_ns(conn: sqlite3.Connection) -> int | None:
    """The longest duration of any event recorded, where the aggregates count every event; else None.

    Two scans of the aggregates (0.6 s for a day of them): kept per state of
    the file, as explain asks for it while resolving its window and again
    while reading its frame.
    """
    signature = file_signature(database_path(conn))
    if signature is not None and signature in _LONGEST:
        return _LONGEST[signature]
    longest = None
    if aggregates_cover_recording(conn):
        (top,) = conn.execute("SELECT max(max_duration_ns) FROM event_aggregates").fetchone()
        # Text sorts above every number in SQLite: a damaged or edited table bounds nothing.
        longest = top if type(top) is int and 0 <= top <= _LONGEST_BOUND_NS else None
    if signature is not None:
        with _LONGEST_LOCK:
            if len(_LONGEST) >= 64:
                _LONGEST.clear()
            _LONGEST[signature] = longest
    return longest


# The longest event of each recording read in this process, by the file's signature: any write changes it.
_LONGEST: dict[tuple[object, ...], int | None] = {}
_LONGEST_LOCK = threading.Lock()


def window_floor(conn: sqlite3.Connection, start_ns: int) -> int | None:
    """The earliest start of an event that reaches ``start_ns``, where the longest event is known."""
    longest = _longest_event_ns(conn)
    return None if longest is None else start_ns - longest


def _index_pays(conn: sqlite3.Connection, lo_ns: int | None, hi_ns: int) -> bool:
    """Whether reading [lo_ns, hi_ns] of start times through the ts index beats scanning the table.

    The index hands rows back one rowid lookup each, about three times a
    sequential scan's cost per row: it pays for a third of the recording or less.
    """
    starts = _start_range(conn)
    if starts is None or starts[1] <= starts[0]:
        return False
    first, last = starts
    lo = first if lo_ns is None else max(first, lo_ns)
    covered = max(0, min(last, hi_ns) - lo)
    return covered * 3 < last - first


def event_id_span(conn: sqlite3.Connection) -> int:
    """Bound the rows of ``event_log`` from above by its rowid range (no scan); 0 when empty."""
    # Two statements, as above: min() and max() together scan the table.
    (lo_id,) = conn.execute("SELECT min(rowid) FROM event_log").fetchone()
    if lo_id is None:
        return 0
    (hi_id,) = conn.execute("SELECT max(rowid) FROM event_log").fetchone()
    return int(hi_id) - int(lo_id) + 1


class FrameSink(Protocol):
    """Where a part of the frame goes: ``rows`` rows, one column at a time (``FRAME_FIELDS`` order)."""

    rows: int

    def put(self, column: int, values: np.ndarray) -> None:
        """Store ``values`` (``rows`` of them, any integer type) as the part's rows of ``column``."""


@dataclass(frozen=True, slots=True)
class FrameFilter:
    """Which rows the analysis frame reads, and which of their columns.

    Both readers apply it alike: ``frame_row_chunks`` in SQL,
    ``gpuscope.store.blocks_read.frame_block_chunks`` in numpy, row for row.

    The events that overlap [``start_ns``, ``end_ns``]. ``detail_ops``: GPU
    ops whose detail columns are read (others read 0). ``pids``: keep only
    these processes' GPU events (host events of every process are kept).
    ``thin`` maps (pid, op) of high-rate ops to a duration threshold: of
    those only calls slower than it, one row in ``keep_every`` (by id), and
    the first of each run of them are read.
    """

    start_ns: int
    end_ns: int
    detail_ops: frozenset[int]
    keep_every: int = 1
    pids: tuple[int, ...] = ()
    thin: Mapping[tuple[int, int], int] | None = None


def frame_row_chunks(
    conn: sqlite3.Connection,
    filt: FrameFilter,
    *,
    chunk_rows: int = FRAME_CHUNK_ROWS,
    ids: tuple[int, int] | None = None,
) -> Iterator[list[tuple[int, ...]]]:
    """Yield frame rows (layout above) of the events ``filt`` keeps, in storage order, in chunks.

    ``ids``: only rows with ids in this range (the others are read from column blocks).
    """
    start_ns, end_ns, pids, thin, keep_every = filt.start_ns, filt.end_ns, filt.pids, filt.thin, filt.keep_every
    detail = f"op_id >= {DETAIL_OP_FLOOR} OR op_id IN ({','.join(map(str, sorted(filt.detail_ops)))})"
    where = "ts_ns <= ? AND ts_ns + duration_ns >= ?"
    params: list[int] = [end_ns, start_ns]
    # A lower bound on the start that the index can use: nothing lasts longer than the longest event.
    lo = window_floor(conn, start_ns)
    if lo is not None:
        where += " AND ts_ns >= ?"
        params.append(lo)
    if ids is not None:
        where += " AND id BETWEEN ? AND ?"
        params += list(ids)
    source = "event_log" if _index_pays(conn, lo, end_ns) else "event_log NOT INDEXED"
    if pids:
        # Host events of every process stay (a neighbour's CPU is a cause); NCCL calls are GPU calls.
        where += f" AND (pid IN ({','.join('?' * len(pids))}) OR op_id >= {FIRST_HOST_OP_ID})"
        params += list(pids)
    if thin:
        # A CASE over a few (pid, op) keys is evaluated in C per row: far cheaper than returning the row.
        cases = " ".join(f"WHEN {(p << 16) | o} THEN {int(t)}" for (p, o), t in sorted(thin.items()))
        ops = ",".join(str(o) for o in sorted({o for _, o in thin}))
        # Also the first of a run of thinned calls (the row after any other op,
        # such as a sync): selective storage keeps it, and the gap rules measure
        # GPU idle time from a sync to the next launch or copy.
        where += (
            f" AND (op_id NOT IN ({ops}) OR id % {keep_every} = 0 "
            f"OR duration_ns > CASE (pid << 16) | op_id {cases} ELSE -1 END "
            f"OR (SELECT q.op_id FROM event_log q WHERE q.id = event_log.id - 1) NOT IN ({ops}))"
        )
    cur = conn.execute(f"SELECT {_FRAME_COLUMNS.format(detail=detail)} FROM {source} WHERE {where}", params)
    while rows := cur.fetchmany(chunk_rows):
        yield rows


def call_chunks(conn: sqlite3.Connection, chunk_rows: int) -> Iterator[list[tuple[str | None, int, int, int, int]]]:
    """Yield (op, session_id, ts_ns, duration_ns, flags) of every row of the ``events`` view, in chunks.

    Reads the view, so a filter applied to ``conn`` (``gpuscope.query``) applies.
    """
    cur = conn.execute("SELECT op, session_id, ts_ns, duration_ns, flags FROM events")
    while rows := cur.fetchmany(chunk_rows):
        yield rows


def export_rows(conn: sqlite3.Connection, first_by_time: int | None = None) -> Iterator[tuple[Any, ...]]:
    """Return the rows of the ``events`` view as exported: the cursor itself, so no Python call per row.

    Columns: session_id, ts_ns, duration_ns, pid, tid, comm, source, op,
    bytes, ret, stream, handle, arg0, flags. In storage order, or the first
    ``first_by_time`` rows by ts_ns.
    """
    if first_by_time is None:
        return conn.execute(_EXPORT_COLUMNS)
    return conn.execute(_EXPORT_COLUMNS + " ORDER BY ts_ns LIMIT ?", (first_by_time,))


def count_events(conn: sqlite3.Connection) -> int:
    """Count the rows of the ``events`` view (a filter applied to ``conn`` applies)."""
    return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])


def op_counts_by_interval(
    conn: sqlite3.Connection, session_id: int, offset_ns: int, interval_ns: int
) -> Iterator[tuple[int, int, str, int]]:
    """Count the calls of each op of one session per interval: (session id, interval number, op, calls).

    An event at ``ts_ns`` falls in interval ``(ts_ns + offset_ns) // interval_ns``.
    """
    sql = (
        "SELECT session_id, (ts_ns + ?) / ? AS b, op, count(*) FROM events "
        "WHERE session_id = ? GROUP BY b, op ORDER BY b"
    )
    return conn.execute(sql, (offset_ns, interval_ns, session_id))


def events_statement(
    ops: Sequence[str] | None = None, source: str | None = None, limit: int | None = None
) -> Statement:
    """Select every column of the ``events`` view, oldest first; of ``ops``/``source`` when given, at most ``limit``."""
    where: list[str] = []
    params: list[Any] = []
    if ops is not None:
        where.append("op IN (" + ", ".join("?" * len(ops)) + ")")
        params += list(ops)
    if source is not None:
        where.append("source = ?")
        params.append(source)
    sql = "SELECT * FROM events" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY ts_ns"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(int(limit))
    return Statement(sql, tuple(params))


def session_pids(conn: sqlite3.Connection, session_ids: list[int], start_ns: int, end_ns: int) -> set[int]:
    """Processes with events of these sessions in [start_ns, end_ns]."""
    if not session_ids:
        return set()
    marks = ",".join("?" * len(session_ids))
    rows = conn.execute(
        f"SELECT DISTINCT pid FROM event_log WHERE session_id IN ({marks}) AND ts_ns BETWEEN ? AND ?",
        (*session_ids, start_ns, end_ns),
    ).fetchall()
    return {int(r[0]) for r in rows}


# The events view's columns a columnar export keeps (``node`` goes into the partition path).
COLUMNAR_COLUMNS = (
    "event_id", "session_id", "ts_ns", "wall_ns", "pid", "tid", "comm", "cgroup_id", "rank", "local_rank",
    "world_size", "source", "op", "duration_ns", "bytes", "ret", "stream", "handle", "arg0", "arg1", "flags",
)  # fmt: skip


def columnar_sessions(conn: sqlite3.Connection) -> list[tuple[int, str, str, int]]:
    """(id, uuid, node, started_wall_ns) of the sessions with events in the ``events`` view (filters apply)."""
    return [
        (int(r[0]), str(r[1]), str(r[2] or "unknown"), int(r[3]))
        for r in conn.execute(
            "SELECT s.id, s.uuid, s.node, s.started_wall_ns FROM sessions s "
            "WHERE EXISTS (SELECT 1 FROM events e WHERE e.session_id = s.id) ORDER BY s.id"
        )
    ]


def columnar_batches(conn: sqlite3.Connection, session_id: int, batch: int = 65_536) -> Iterator[list[tuple[Any, ...]]]:
    """One session's events (``COLUMNAR_COLUMNS``) in time order, ``batch`` rows at a time."""
    cur = conn.execute(
        f"SELECT {', '.join(COLUMNAR_COLUMNS)} FROM events WHERE session_id = ? ORDER BY ts_ns", (session_id,)
    )
    while rows := cur.fetchmany(batch):
        yield rows
