"""Read stacks back: the top call sites behind a set of calls, and the top stacks.

``top_call_sites`` is the helper ``explain`` calls to name who made the calls
behind a finding; ``gpuscope stacks`` prints ``top_stacks``. Both read a
database through a read-only connection and never print.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from gpuscope.stacks.frames import Frame, frames_from_json
from gpuscope.store.stacks_read import call_site_counts, has_call_stacks, stack_counts


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


def top_call_sites(
    conn: sqlite3.Connection,
    *,
    op: str | None = None,
    pid: int | None = None,
    min_duration_ns: int | None = None,
    session_id: int | None = None,
    limit: int = 3,
) -> list[CallSite]:
    """The call sites behind the selected calls, most calls first ([] when no call has a stack).

    Example, for a finding about slow cudaMalloc calls:
    ``top_call_sites(conn, op="cudaMalloc", min_duration_ns=threshold)`` then
    ``describe_call_sites(sites, "slow cudaMalloc calls")``.
    """
    if not has_call_stacks(conn):
        return []
    counts = call_site_counts(conn, op=op, pid=pid, min_duration_ns=min_duration_ns, session_id=session_id)
    total = sum(c.calls for c in counts)
    if not total:
        return []
    return [CallSite(c.call_site, c.calls, c.calls / total, c.total_duration_ns) for c in counts[:limit]]


def describe_call_sites(sites: list[CallSite], what: str) -> str | None:
    """One sentence: "78% of the slow cudaMalloc calls come from allocate_kv_cache (kv_cache.py:211)"."""
    if not sites:
        return None
    top = sites[0]
    text = f"{top.share:.0%} of the {what} come from {top.call_site}"
    if len(sites) > 1:
        text += "; then " + ", ".join(f"{s.call_site} ({s.share:.0%})" for s in sites[1:])
    return text


def top_stacks(
    conn: sqlite3.Connection,
    *,
    op: str | None = None,
    pid: int | None = None,
    min_duration_ns: int | None = None,
    session_id: int | None = None,
    limit: int = 10,
) -> list[StackSummary]:
    """Distinct stacks of the selected calls, most calls first."""
    if not has_call_stacks(conn):
        return []
    counts = stack_counts(conn, op=op, pid=pid, min_duration_ns=min_duration_ns, session_id=session_id)
    total = sum(c.calls for c in counts) or 1
    return [
        StackSummary(
            c.stack_hash,
            c.op,
            c.calls,
            c.calls / total,
            c.total_duration_ns,
            c.call_site,
            frames_from_json(c.frames_json),
            c.marker,
        )
        for c in counts[:limit]
    ]
