"""Write call stacks: each distinct stack once (``stacks``), and which stack each call had (``event_stacks``).

Rows arrive in batches from the stack collector, as plain sequences in
column order. Most calls carry their stack on their own row instead
(``event_log.stack_hash``, written by the event writer); links here are for
calls whose full stack was taken with them or whose site's stack came late.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

StackRow = tuple[int, str, str | None, int, int, str | None]
"""(hash, frames JSON, call site, native depth, Python depth, marker)."""
EventStackRow = tuple[int, int, int, int, int]
"""(session id, pid, tid, ts_ns of the call, stack hash)."""

_INSERT_STACK = (
    "INSERT OR IGNORE INTO stacks(hash, frames, call_site, native_depth, python_depth, marker) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
_INSERT_EVENT_STACK = (
    "INSERT OR IGNORE INTO event_stacks(session_id, pid, tid, ts_ns, stack_hash) VALUES (?, ?, ?, ?, ?)"
)


def insert_stacks(conn: sqlite3.Connection, stacks: Sequence[StackRow]) -> None:
    """Store stacks; one whose hash is stored already is kept as it is."""
    conn.executemany(_INSERT_STACK, stacks)


def insert_event_stacks(conn: sqlite3.Connection, links: Sequence[EventStackRow]) -> None:
    """Store which stack each call had; a second link for the same call is ignored."""
    conn.executemany(_INSERT_EVENT_STACK, links)
