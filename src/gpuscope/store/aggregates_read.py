"""Read ``event_aggregates`` back: whether it covers a recording, and its rows over a window.

``gpuscope.store.aggregates`` builds and writes these rows; this module only reads.
"""

from __future__ import annotations

import sqlite3

from gpuscope.model.ops import FIRST_HOST_OP_ID
from gpuscope.store.connect import table_names

AggregateRow = tuple[int, int, int, int, int, int, int, int, int, bytes | None]
"""(bucket_ns, pid, op_id, count, stored, sum_duration_ns, min_duration_ns, max_duration_ns, sum_bytes, histogram)."""


def aggregates_cover_recording(conn: sqlite3.Connection) -> bool:
    """Tell whether every session with events has aggregates (not in older files, nor imports without them)."""
    if "event_aggregates" not in table_names(conn):
        return False
    covered = {int(r[0]) for r in conn.execute("SELECT DISTINCT session_id FROM event_aggregates")}
    if not covered:
        return False
    for (sid,) in conn.execute("SELECT id FROM sessions").fetchall():
        if (
            int(sid) not in covered
            and conn.execute("SELECT 1 FROM event_log WHERE session_id = ? LIMIT 1", (sid,)).fetchone()
        ):
            return False
    return True


def aggregate_rows(
    conn: sqlite3.Connection, start_ns: int, end_ns: int, bucket_ns: int, pids: tuple[int, ...] = ()
) -> list[AggregateRow]:
    """Read the aggregate rows of the ``bucket_ns`` buckets that [``start_ns``, ``end_ns``] touches.

    Only sessions recording at some time in [start_ns, end_ns] count: a bucket
    is a whole second, and the second in which one session ended and the next
    began would otherwise lend each the other's calls.
    ``pids``: only these processes' GPU rows (host rows of every process are kept).
    """
    where = (
        "bucket_ns > ? AND bucket_ns <= ? AND session_id IN (SELECT id FROM sessions WHERE started_mono_ns <= ? "
        "AND coalesce(stopped_mono_ns, 9223372036854775807) >= ?)"
    )
    params: list[int] = [start_ns - bucket_ns, end_ns, end_ns, start_ns]
    if pids:
        # Host events of every process stay (a neighbour's CPU is a cause); NCCL calls are GPU calls.
        where += f" AND (pid IN ({','.join('?' * len(pids))}) OR op_id >= {FIRST_HOST_OP_ID})"
        params += list(pids)
    rows: list[AggregateRow] = conn.execute(
        "SELECT bucket_ns, pid, op_id, count, stored, sum_duration_ns, min_duration_ns, max_duration_ns, sum_bytes, "
        f"histogram FROM event_aggregates WHERE {where}",
        params,
    ).fetchall()
    return rows


DropRow = tuple[int, int, str, int]
"""(session_id, bucket_ns, source, dropped)."""


def drop_rows(conn: sqlite3.Connection, session_id: int | None = None) -> list[DropRow]:
    """Read when events were dropped, per second and source ([] in files that predate ``drop_log``)."""
    if "drop_log" not in table_names(conn):
        return []
    sql = "SELECT session_id, bucket_ns, source, dropped FROM drop_log"
    params: tuple[int, ...] = ()
    if session_id is not None:
        sql += " WHERE session_id = ?"
        params = (session_id,)
    return [(int(s), int(b), str(src), int(n)) for s, b, src, n in conn.execute(sql + " ORDER BY bucket_ns", params)]


ImportedAggregateRow = tuple[str, int, int, str, int, int, int, int, int]
"""(node, bucket_wall_ns, width_ns, op name, pid, count, stored, sum_duration_ns, max_duration_ns) of a reference
recording's aggregates."""


def imported_aggregate_rows(
    conn: sqlite3.Connection, start_wall_ns: int, end_wall_ns: int
) -> list[ImportedAggregateRow]:
    """The imported (reference) aggregate buckets that overlap [start_wall_ns, end_wall_ns]; [] without any."""
    if "imported_aggregates" not in table_names(conn):
        return []
    rows: list[ImportedAggregateRow] = conn.execute(
        "SELECT node, bucket_wall_ns, width_ns, op, pid, count, stored, sum_duration_ns, max_duration_ns "
        "FROM imported_aggregates "
        "WHERE bucket_wall_ns + width_ns > ? AND bucket_wall_ns <= ?",
        (start_wall_ns, end_wall_ns),
    ).fetchall()
    return rows
