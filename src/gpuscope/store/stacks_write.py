"""Write call stacks: each distinct stack once (``stacks``), and which stack each call had (``event_stacks``).

Rows arrive in batches from the stack collector, as plain sequences in
column order. Most calls carry their stack on their own row instead
(``event_log.stack_hash``, written by the event writer); links here are for
calls whose full stack was taken with them or whose site's stack came late.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import numpy as np

StackRow = tuple[int, str, str | None, int, int, str | None]
"""(hash, frames JSON, call site, native depth, Python depth, marker)."""
EventStackRow = tuple[int, int, int, int, int]
"""(session id, pid, tid, ts_ns of the call, stack hash)."""

_INSERT_STACK = (
    "INSERT OR IGNORE INTO stacks(hash, frames, call_site, native_depth, python_depth, marker) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
_INSERT_EVENT_STACK_INTO = "INSERT OR IGNORE INTO event_stacks(session_id, pid, tid, ts_ns, stack_hash) VALUES "
_LINK = "(?, ?, ?, ?, ?)"
_INSERT_EVENT_STACK = _INSERT_EVENT_STACK_INTO + _LINK
# Links per statement for the bulk of a batch (as the event writer does):
# one statement step per 64 rows instead of one per row. 320 parameters.
_LINKS_PER_INSERT = 64
_INSERT_EVENT_STACKS = _INSERT_EVENT_STACK_INTO + ", ".join([_LINK] * _LINKS_PER_INSERT)


def insert_stacks(conn: sqlite3.Connection, stacks: Sequence[StackRow]) -> None:
    """Store stacks; one whose hash is stored already is kept as it is."""
    conn.executemany(_INSERT_STACK, stacks)


def insert_event_stacks(conn: sqlite3.Connection, links: Sequence[EventStackRow]) -> None:
    """Store which stack each call had; a second link for the same call is ignored."""
    conn.executemany(_INSERT_EVENT_STACK, links)


def insert_event_stack_block(conn: sqlite3.Connection, links: np.ndarray) -> None:
    """``insert_event_stacks`` for many links at once: an (n, 5) int64 array in column order.

    The bulk goes in 64 rows a statement, built by numpy without a Python
    loop per row: a trace's first seconds store a link for every call.
    """
    bulk = len(links) - len(links) % _LINKS_PER_INSERT
    if bulk:
        conn.executemany(_INSERT_EVENT_STACKS, links[:bulk].reshape(-1, 5 * _LINKS_PER_INSERT).tolist())
    if bulk < len(links):
        conn.executemany(_INSERT_EVENT_STACK, links[bulk:].tolist())
