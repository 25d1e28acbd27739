"""Keep a database under its size cap while tracing (``--max-db``).

The oldest event rows go first (with their stack links); aggregates and findings stay (they are small
and carry the exact counts). Freed pages are returned to the file system with
incremental vacuum, and the WAL is truncated by a checkpoint.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

DEFAULT_MAX_DB = 10 << 30
TARGET_FRACTION = 0.9


def db_bytes(path: Path) -> int:
    """Return the size of a database on disk, its WAL and shared-memory files included."""
    total = 0
    for suffix in ("", "-wal", "-shm"):
        try:
            total += os.path.getsize(str(path) + suffix)
        except OSError:
            pass
    return total


def _drop_orphans(conn: sqlite3.Connection) -> None:
    """Stack links older than a session's oldest remaining event, and stacks no link uses."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "event_stacks" not in tables:
        return
    for (sid,) in conn.execute("SELECT DISTINCT session_id FROM event_stacks").fetchall():
        # Rows are inserted in time order, so the oldest remaining row (by id,
        # no index needed) marks where the deleted history ends.
        row = conn.execute("SELECT ts_ns FROM event_log WHERE session_id = ? ORDER BY id LIMIT 1", (sid,)).fetchone()
        cutoff = row[0] if row else (1 << 63) - 1
        conn.execute("DELETE FROM event_stacks WHERE session_id = ? AND ts_ns < ?", (sid, cutoff))
    conn.execute("DELETE FROM stacks WHERE hash NOT IN (SELECT DISTINCT stack_hash FROM event_stacks)")


def enforce_cap(conn: sqlite3.Connection, path: Path, max_bytes: int) -> int:
    """Delete the oldest event rows until the file is under 90 % of the cap.

    Runs on the writer thread (inside no transaction). Returns rows deleted.
    """
    if max_bytes <= 0:
        return 0
    deleted = 0
    for _ in range(8):
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = db_bytes(path)
        if size <= max_bytes:
            return deleted
        page = int(conn.execute("PRAGMA page_size").fetchone()[0])
        live_pages = int(conn.execute("PRAGMA page_count").fetchone()[0]) - int(
            conn.execute("PRAGMA freelist_count").fetchone()[0]
        )
        rows = int(conn.execute("SELECT count(*) FROM event_log").fetchone()[0])
        if rows == 0:
            return deleted
        target = int(max_bytes * TARGET_FRACTION)
        excess = max(size - target, 0)
        per_row = max(live_pages * page / max(rows, 1), 1.0)
        n = min(rows, max(int(excess / per_row * 1.1), 1000))
        conn.execute("BEGIN")
        cur = conn.execute("DELETE FROM event_log WHERE id IN (SELECT id FROM event_log ORDER BY id LIMIT ?)", (n,))
        deleted += cur.rowcount
        _drop_orphans(conn)
        conn.execute("COMMIT")
        # The pragma frees one page per step and returns no rows, so the
        # sqlite3 module's execute() would stop after one page: executescript
        # runs it to completion.
        conn.executescript("PRAGMA incremental_vacuum;")
    return deleted


def build_indexes(conn: sqlite3.Connection) -> None:
    """Indexes deferred during tracing: built once, at the end of a session.

    Rows arrive in nearly time order, so this is a fast, mostly sequential build.
    """
    conn.execute("CREATE INDEX IF NOT EXISTS event_log_ts ON event_log(ts_ns)")
