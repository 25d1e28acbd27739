"""Read what is known of the traced processes: names and cgroups, per session."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable


def process_rows(conn: sqlite3.Connection) -> list[tuple[int, str | None, int | None]]:
    """Read (pid, comm, cgroup id) of every ``processes`` row, oldest session first.

    A pid seen in several sessions appears once per session, so a caller that
    keeps the last value of each pid keeps the newest.
    """
    rows = conn.execute("SELECT pid, comm, cgroup_id FROM processes ORDER BY session_id").fetchall()
    return [(int(pid), comm, cgroup_id) for pid, comm, cgroup_id in rows]


def latest_event_comm(conn: sqlite3.Connection, pid: int) -> str | None:
    """Return the comm the newest event of ``pid`` carried, or None when none carried one.

    Scanned from the newest row back, so it stops at the first hit.
    """
    row = conn.execute(
        "SELECT c.comm FROM event_log e JOIN comms c ON c.id = e.comm_id WHERE e.pid = ? ORDER BY e.id DESC LIMIT 1",
        (pid,),
    ).fetchone()
    return str(row[0]) if row else None


def pids_of_sessions(conn: sqlite3.Connection, session_ids: Iterable[int]) -> frozenset[int]:
    """Return the pids the ``processes`` table lists for any of ``session_ids``."""
    ids = list(session_ids)
    if not ids:
        return frozenset()
    marks = ",".join("?" * len(ids))
    rows = conn.execute(f"SELECT pid FROM processes WHERE session_id IN ({marks})", ids).fetchall()
    return frozenset(int(r[0]) for r in rows)
