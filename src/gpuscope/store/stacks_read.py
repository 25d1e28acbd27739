"""Read the ``event_call_stacks`` view: calls grouped by call site or by stack.

``gpuscope.stacks.report`` turns these counts into shares and decoded frames.
Durations are added with ``total()``, not ``sum()``: SQLite's ``sum()`` stops
with "integer overflow" past 2^63 ns, ``total()`` adds in floating point
(exact up to 2^53 ns, 104 days of calls).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CallSiteCount:
    """Calls of one call site (``(unnamed)`` when a stack has none) and their summed duration."""

    call_site: str
    calls: int
    total_duration_ns: int


@dataclass(frozen=True, slots=True)
class StackCount:
    """Calls of one op through one distinct stack; ``frames_json`` as stored."""

    stack_hash: int
    op: str
    calls: int
    total_duration_ns: int
    call_site: str | None
    frames_json: str
    marker: str | None


def has_call_stacks(conn: sqlite3.Connection) -> bool:
    """Tell whether the database has the ``event_call_stacks`` view (older files lack it)."""
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'event_call_stacks'").fetchone() is not None


def any_call_stacks(conn: sqlite3.Connection) -> bool:
    """Tell whether any stack was recorded (a lookup, where the view would scan every event to find none)."""
    return has_call_stacks(conn) and conn.execute("SELECT 1 FROM stacks LIMIT 1").fetchone() is not None


def _where(
    op: str | None, pid: int | None, min_duration_ns: int | None, session_id: int | None
) -> tuple[str, list[object]]:
    clauses: list[str] = ["1"]
    params: list[object] = []
    filters = (
        ("op = ?", op),
        ("pid = ?", pid),
        ("duration_ns >= ?", min_duration_ns),
        ("session_id = ?", session_id),
    )
    for clause, value in filters:
        if value is not None:
            clauses.append(clause)
            params.append(value)
    return " AND ".join(clauses), params


def call_site_counts(
    conn: sqlite3.Connection,
    *,
    op: str | None = None,
    pid: int | None = None,
    min_duration_ns: int | None = None,
    session_id: int | None = None,
) -> list[CallSiteCount]:
    """Count the calls that carry a stack by call site, most calls (then most time) first; filters apply when given."""
    where, params = _where(op, pid, min_duration_ns, session_id)
    rows = conn.execute(
        f"SELECT coalesce(call_site, '(unnamed)'), count(*), total(duration_ns) FROM event_call_stacks WHERE {where} "
        "GROUP BY 1 ORDER BY 2 DESC, 3 DESC",
        params,
    ).fetchall()
    return [CallSiteCount(str(site), int(calls), int(total or 0)) for site, calls, total in rows]


def stack_counts(
    conn: sqlite3.Connection,
    *,
    op: str | None = None,
    pid: int | None = None,
    min_duration_ns: int | None = None,
    session_id: int | None = None,
) -> list[StackCount]:
    """Count the calls that carry a stack by (stack, op), most calls (then most time) first; filters apply if given."""
    where, params = _where(op, pid, min_duration_ns, session_id)
    rows = conn.execute(
        f"SELECT stack_hash, op, count(*), total(duration_ns), call_site, frames, stack_marker FROM event_call_stacks "
        f"WHERE {where} GROUP BY stack_hash, op ORDER BY 3 DESC, 4 DESC",
        params,
    ).fetchall()
    return [
        StackCount(int(h), str(op_name), int(calls), int(total or 0), site, frames, marker)
        for h, op_name, calls, total, site, frames, marker in rows
    ]
