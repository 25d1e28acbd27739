"""Read stacks back: the top call sites behind a set of calls, and the top stacks.

``top_call_sites`` is the helper ``explain`` calls to name who made the calls
behind a finding; ``gpuscope stacks`` prints ``top_stacks``. Both read a
database through a read-only connection and never print.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass

from gpuscope.stacks.frames import Frame


@dataclass(frozen=True, slots=True)
class CallSite:
    """One call site and its share of the selected calls that carry a stack."""

    call_site: str
    calls: int
    share: float  # of the selected calls that have a stack
    total_duration_ns: int


@dataclass(frozen=True, slots=True)
class StackSummary:
    stack_hash: int
    op: str
    calls: int
    share: float
    total_duration_ns: int
    call_site: str | None
    frames: tuple[Frame, ...]
    marker: str | None

    def render(self, sep: str = " <- ") -> str:
        return sep.join(f.render() for f in self.frames)


def _has_stacks(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'event_call_stacks'").fetchone() is not None


def _where(op: str | None, pid: int | None, min_duration_ns: int | None, session_id: int | None
           ) -> tuple[str, list[object]]:  # fmt: skip
    clauses: list[str] = ["1"]
    params: list[object] = []
    for clause, value in (("op = ?", op), ("pid = ?", pid), ("duration_ns >= ?", min_duration_ns),
                          ("session_id = ?", session_id)):  # fmt: skip
        if value is not None:
            clauses.append(clause)
            params.append(value)
    return " AND ".join(clauses), params


def top_call_sites(conn: sqlite3.Connection, *, op: str | None = None, pid: int | None = None,
                   min_duration_ns: int | None = None, session_id: int | None = None, limit: int = 3
                   ) -> list[CallSite]:  # fmt: skip
    """The call sites behind the selected calls, most calls first ([] when no call has a stack).

    Example, for a finding about slow cudaMalloc calls:
    ``top_call_sites(conn, op="cudaMalloc", min_duration_ns=threshold)`` then
    ``describe_call_sites(sites, "slow cudaMalloc calls")``.
    """
    if not _has_stacks(conn):
        return []
    where, params = _where(op, pid, min_duration_ns, session_id)
    rows = conn.execute(
        f"SELECT coalesce(call_site, '(unnamed)'), count(*), sum(duration_ns) FROM event_call_stacks WHERE {where} "
        "GROUP BY 1 ORDER BY 2 DESC, 3 DESC",
        params,
    ).fetchall()
    total = sum(int(r[1]) for r in rows)
    return [CallSite(str(r[0]), int(r[1]), int(r[1]) / total, int(r[2] or 0)) for r in rows[:limit]] if total else []


def describe_call_sites(sites: list[CallSite], what: str) -> str | None:
    """One sentence: "78% of the slow cudaMalloc calls come from allocate_kv_cache (kv_cache.py:211)"."""
    if not sites:
        return None
    top = sites[0]
    text = f"{top.share:.0%} of the {what} come from {top.call_site}"
    if len(sites) > 1:
        text += "; then " + ", ".join(f"{s.call_site} ({s.share:.0%})" for s in sites[1:])
    return text


def top_stacks(conn: sqlite3.Connection, *, op: str | None = None, pid: int | None = None,
               min_duration_ns: int | None = None, session_id: int | None = None, limit: int = 10
               ) -> list[StackSummary]:  # fmt: skip
    """Distinct stacks of the selected calls, most calls first."""
    if not _has_stacks(conn):
        return []
    where, params = _where(op, pid, min_duration_ns, session_id)
    rows = conn.execute(
        f"SELECT stack_hash, op, count(*), sum(duration_ns), call_site, frames, stack_marker FROM event_call_stacks "
        f"WHERE {where} GROUP BY stack_hash, op ORDER BY 3 DESC, 4 DESC",
        params,
    ).fetchall()
    total = sum(int(r[2]) for r in rows) or 1
    return [
        StackSummary(
            int(r[0]),
            str(r[1]),
            int(r[2]),
            int(r[2]) / total,
            int(r[3] or 0),
            r[4],
            tuple(Frame.from_json(f) for f in json.loads(r[5])),
            r[6],
        )
        for r in rows[:limit]
    ]
