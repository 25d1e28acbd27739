"""Call rates of imported reference recordings, from the exact counts they kept beside their rows.

The reference stores rows selectively: everything for its first seconds,
then only syncs, lifecycle events, anomalies and samples. Rows alone make the
rate of every op "drop" where the store-all window ends, so rates of imported
processes come from the reference's own per-bucket counts (``event_aggregates``
per minute, ``event_aggregates_5s``), and where a file kept none there are no
rates: nothing is inferred from the rows.

The same counts say where the rows are complete: a bucket that counts no more
calls than rows were stored holds every call. Where a file kept no counts, the
reference's storage rule says it: every event of a session's first 10 s, or of
the whole session when it ran with ``record-all``.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

import numpy as np

from gpuscope.analysis.frame import Window
from gpuscope.model.ops import Op
from gpuscope.store.aggregates_read import imported_aggregate_rows
from gpuscope.store.events_read import session_pids
from gpuscope.store.sessions_read import SessionClock, session_clocks, session_flag_docs, session_wall_span

# The reference stores every event of a session's first 10 s, whatever its op (its selective storage rule).
STORE_ALL_NS = 10_000_000_000
_NEVER_STOPPED_NS = 2**62


@dataclass(frozen=True)
class ImportedRates:
    """Exact per-bucket call counts of the imported processes in a window.

    ``pids``: the processes recorded by the reference in the window (their
    rates are these or none). ``series``: (pid, op) -> (first bucket start, on
    the recording's monotonic clock, and the counts of consecutive buckets).
    Empty when the file kept no aggregates. ``store_all``: the spans (on the
    monotonic clock, sorted) in which the reference stored every event by its
    storage rule: a session's first 10 s, or all of a ``record-all`` session.
    """

    pids: frozenset[int]
    width_ns: int = 0
    series: dict[tuple[int, int], tuple[int, np.ndarray]] = field(default_factory=dict)
    # (pid, op) -> (calls, total ns, max ns) over the buckets that overlap the window
    totals: dict[tuple[int, int], tuple[int, int, int]] = field(default_factory=dict)
    store_all: tuple[tuple[int, int], ...] = ()


def load_imported_rates(conn: sqlite3.Connection, window: Window) -> ImportedRates | None:
    """None when no imported session recorded in the window."""
    docs = session_flag_docs(conn)
    imported = [sid for sid, doc in docs.items() if doc.get("imported_from")]
    pids = session_pids(conn, imported, window.start_ns, window.end_ns)
    if not pids:
        return None
    clocks = [c for c in session_clocks(conn) if c.session_id in imported]
    store_all = _store_all_spans(conn, clocks, docs)
    # node -> wall-clock minus monotonic, from the latest imported session of each node
    offsets = {c.node: c.started_wall_ns - c.started_mono_ns for c in clocks}
    if not offsets:
        return ImportedRates(frozenset(pids), store_all=store_all)
    lo_wall = window.start_ns + min(offsets.values())
    hi_wall = window.end_ns + max(offsets.values())
    rows = imported_aggregate_rows(conn, lo_wall, hi_wall)
    if not rows:
        return ImportedRates(frozenset(pids), store_all=store_all)
    width = min(r[2] for r in rows)  # the finest the file kept (5 s over 1 min)
    buckets: dict[tuple[int, int], dict[int, int]] = {}
    totals: dict[tuple[int, int], tuple[int, int, int]] = {}
    for node, bucket_wall, w, name, pid, count, _stored, sum_ns, max_ns in rows:
        if w != width or node not in offsets or name not in Op.__members__:
            continue
        # Old files counted without a pid (0): the one imported process of the window, else nobody.
        owner = pid if pid else (next(iter(pids)) if len(pids) == 1 else 0)
        if owner not in pids:
            continue
        key = (owner, int(Op[name]))
        per = buckets.setdefault(key, {})
        start = bucket_wall - offsets[node]
        per[start] = per.get(start, 0) + count
        n, total, top = totals.get(key, (0, 0, 0))
        totals[key] = (n + count, total + sum_ns, max(top, max_ns))
    series: dict[tuple[int, int], tuple[int, np.ndarray]] = {}
    for key, per in buckets.items():
        first, last = min(per), max(per)
        counts = np.zeros((last - first) // width + 1, dtype=np.int64)
        for start, n in per.items():
            counts[(start - first) // width] += n
        series[key] = (first, counts)
    return ImportedRates(frozenset(pids), width, series, totals, store_all)


def _store_all_spans(
    conn: sqlite3.Connection, clocks: list[SessionClock], docs: dict[int, dict[str, object]]
) -> tuple[tuple[int, int], ...]:
    """Where the imported sessions stored every event: their first 10 s, or all of a ``record-all`` session.

    A session the import made up for events without one (``synthetic``) started no store-all window.
    """
    spans = []
    for c in clocks:
        doc = docs.get(c.session_id, {})
        if doc.get("synthetic"):
            continue
        flags = {f.strip() for f in str(doc.get("ingero_flags") or "").split(",")}
        end = c.started_mono_ns + STORE_ALL_NS
        if "record-all" in flags:
            wall = session_wall_span(conn, (c.session_id,))
            stopped = wall[1] - c.started_wall_ns if wall is not None else 0
            end = c.started_mono_ns + stopped if stopped > 0 else _NEVER_STOPPED_NS
        spans.append((c.started_mono_ns, end))
    return tuple(sorted(spans))
