"""Read what the overhead budget recorded (gpuscope.store.coverage): windows, probe costs, self-cost."""

from __future__ import annotations

import sqlite3

from gpuscope.store.connect import table_names

WindowRow = tuple[int, int, int]
"""(session_id, start_ns, end_ns)."""
SpanRow = tuple[int, int, int | None]
"""(session_id, started_mono_ns, stopped_mono_ns or None while it records)."""
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def _clamp(ns: int) -> int:
    """A bound SQLite can take: windows far outside any recording (``--from 100000d``) reach past int64."""
    return min(max(ns, _I64_MIN), _I64_MAX)


# A second of self_cost under the budget: one with a budget that no chunk of the first seconds overlaps.
_BUDGETED = (
    "c.budget IS NOT NULL AND NOT EXISTS (SELECT 1 FROM probe_windows w WHERE w.session_id = c.session_id "
    "AND w.exact = 1 AND w.end_ns > c.bucket_ns - 1000000000 AND w.start_ns < c.bucket_ns)"
)

SelfCostTotal = tuple[int, int, int, int, float | None, int, int]
"""(pid, probed_calls, probe_ns, cpu_ns, budget, probe_ns and cpu_ns of the seconds under the budget)
summed over a window's seconds."""


def has_coverage_tables(conn: sqlite3.Connection) -> bool:
    """Whether the recording is of a schema that can hold probe windows (older ones cannot)."""
    return {"probe_windows", "self_cost"} <= table_names(conn)


def probe_window_rows(conn: sqlite3.Connection, start_ns: int, end_ns: int) -> list[WindowRow]:
    """The probe windows that overlap [start_ns, end_ns], by start."""
    if not has_coverage_tables(conn):
        return []
    rows: list[WindowRow] = conn.execute(
        "SELECT session_id, start_ns, end_ns FROM probe_windows WHERE end_ns >= ? AND start_ns <= ? ORDER BY start_ns",
        (_clamp(start_ns), _clamp(end_ns)),
    ).fetchall()
    return rows


def session_spans(conn: sqlite3.Connection) -> list[SpanRow]:
    """Every session's monotonic span."""
    rows: list[SpanRow] = conn.execute("SELECT id, started_mono_ns, stopped_mono_ns FROM sessions").fetchall()
    return rows


def self_cost_totals(conn: sqlite3.Connection, start_ns: int, end_ns: int) -> list[SelfCostTotal]:
    """Each process's probe time, probed calls and CPU time over the seconds in [start_ns, end_ns]."""
    if not has_coverage_tables(conn):
        return []
    rows: list[SelfCostTotal] = conn.execute(
        "SELECT pid, sum(probed_calls), sum(probe_ns), sum(cpu_ns), max(budget), "
        f"sum(CASE WHEN {_BUDGETED} THEN probe_ns ELSE 0 END), sum(CASE WHEN {_BUDGETED} THEN cpu_ns ELSE 0 END) "
        "FROM self_cost c "
        "WHERE bucket_ns > ? AND bucket_ns <= ? GROUP BY pid ORDER BY pid",
        (_clamp(start_ns), _clamp(end_ns + 1_000_000_000)),
    ).fetchall()
    return rows


WindowProcRow = tuple[int, int, int, int, int]
"""(start_ns, pid, sampled calls seen, probe ns, threads) of one window."""


def window_proc_rows(conn: sqlite3.Connection, start_ns: int, end_ns: int) -> list[WindowProcRow]:
    """Each process's probe time in each window that starts in [start_ns, end_ns]."""
    if "probe_window_procs" not in table_names(conn):
        return []
    rows: list[WindowProcRow] = conn.execute(
        "SELECT start_ns, pid, sampled_calls, probe_ns, threads FROM probe_window_procs "
        "WHERE start_ns >= ? AND start_ns <= ?",
        (_clamp(start_ns), _clamp(end_ns)),
    ).fetchall()
    return rows
