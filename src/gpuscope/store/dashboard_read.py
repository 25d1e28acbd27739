"""The reads behind the dashboard's API that explain and stacks do not already make: rows as dicts, bounded.

Every function takes a read-only connection and returns JSON-ready rows;
limits are the caller's (the API bounds them).
"""

from __future__ import annotations

import sqlite3
from typing import Any

EVENT_COLUMNS = "id, event_id, node, wall_ns, pid, tid, comm, source, op, duration_ns, ret, bytes"


TRIVIAL_QUERY = "SELECT 1"  # a statement that reads nothing: run once to warm a server's query path


def _dicts(cur: sqlite3.Cursor) -> list[dict[str, Any]]:
    names = [d[0] for d in cur.description or ()]
    return [dict(zip(names, r, strict=True)) for r in cur]


def has_table(conn: sqlite3.Connection, name: str) -> bool:
    """True when a table or view ``name`` exists (older recordings lack the newer views)."""
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone() is not None


def sessions_brief(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    return _dicts(conn.execute("SELECT id, node, started_wall_ns, stopped_wall_ns FROM sessions ORDER BY id"))


def process_rows(conn: sqlite3.Connection, limit: int) -> list[dict[str, Any]]:
    """Traced processes, busiest first: the process's name and command line (``processes``), else a thread's.

    Grouped on ``event_log`` itself, then joined to the few groups: through the ``events`` view every row
    was joined first (1.6 s on a million events, against 0.75 s).
    """
    return _dicts(
        conn.execute(
            "WITH per AS (SELECT session_id, pid, count(*) AS n, min(ts_ns) AS lo, max(ts_ns) AS hi, "
            "max(cgroup_id) AS cg, max(comm_id) AS comm_id FROM event_log GROUP BY session_id, pid) "
            "SELECT per.pid AS pid, coalesce(max(p.comm), max(c.comm)) AS comm, max(p.cmdline) AS cmdline, "
            "s.node AS node, sum(per.n) AS events, "
            "min(per.lo - s.started_mono_ns + s.started_wall_ns) AS first_wall_ns, "
            "max(per.hi - s.started_mono_ns + s.started_wall_ns) AS last_wall_ns, max(per.cg) AS cgroup_id "
            "FROM per JOIN sessions s ON s.id = per.session_id "
            "LEFT JOIN processes p ON p.session_id = per.session_id AND p.pid = per.pid "
            "LEFT JOIN comms c ON c.id = per.comm_id "
            "GROUP BY s.node, per.pid ORDER BY events DESC LIMIT ?",
            (limit,),
        )
    )


def container_rows(conn: sqlite3.Connection, limit: int) -> list[dict[str, Any]]:
    if not has_table(conn, "containers"):
        return []
    return _dicts(conn.execute("SELECT * FROM containers LIMIT ?", (limit,)))


def events_page(
    conn: sqlite3.Connection,
    *,
    after: int,
    limit: int,
    op: str | None = None,
    pid: int | None = None,
    from_wall_ns: int | None = None,
    to_wall_ns: int | None = None,
) -> list[dict[str, Any]]:
    """Up to ``limit`` events with ids above ``after``, in id order (keyset paging: no OFFSET scans)."""
    terms, args = ["id > ?"], [after]
    for term, value in (("op = ?", op), ("pid = ?", pid), ("wall_ns >= ?", from_wall_ns), ("wall_ns <= ?", to_wall_ns)):
        if value is not None:
            terms.append(term)
            args.append(value)  # type: ignore[arg-type]
    sql = f"SELECT {EVENT_COLUMNS} FROM events WHERE {' AND '.join(terms)} ORDER BY id LIMIT ?"
    return _dicts(conn.execute(sql, (*args, limit)))


def graph_event_rows(conn: sqlite3.Connection, limit: int) -> list[dict[str, Any]]:
    if not has_table(conn, "graph_events"):
        return []
    return _dicts(conn.execute("SELECT * FROM graph_events ORDER BY wall_ns DESC LIMIT ?", (limit,)))


def graph_op_rows(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    if not has_table(conn, "graph_events"):
        return []
    return _dicts(
        conn.execute(
            "SELECT op, count(*) AS count, min(wall_ns) AS first_wall_ns, max(wall_ns) AS last_wall_ns, "
            "sum(duration_ns) AS total_ns FROM graph_events GROUP BY op ORDER BY count DESC"
        )
    )


def imported_snapshot_rows(conn: sqlite3.Connection, limit: int) -> list[dict[str, Any]]:
    if not has_table(conn, "imported_snapshots"):
        return []
    return _dicts(conn.execute("SELECT * FROM imported_snapshots ORDER BY 1 LIMIT ?", (limit,)))


def source_counts(conn: sqlite3.Connection) -> dict[str, int]:
    return {str(s): int(n) for s, n in conn.execute("SELECT source, count(*) FROM events GROUP BY source")}


def has_call_stacks(conn: sqlite3.Connection) -> bool:
    return has_table(conn, "event_stacks") and conn.execute("SELECT 1 FROM event_stacks LIMIT 1").fetchone() is not None


def slowest_calls(conn: sqlite3.Connection, start_ns: int, end_ns: int, limit: int) -> list[dict[str, Any]]:
    """The slowest GPU calls (runtime, driver, NCCL) that start in [start_ns, end_ns] (monotonic), slowest first,
    each with the hash of its stack (None without one), through the time index."""
    columns = {r[1] for r in conn.execute("PRAGMA table_info(event_log)")}
    stacks = has_table(conn, "event_stacks")
    on_row = "nullif(e.stack_hash, 0)" if "stack_hash" in columns else "NULL"
    linked = f"coalesce(es.stack_hash, {on_row})" if stacks else on_row
    join = (
        "LEFT JOIN event_stacks es ON es.session_id = e.session_id AND es.tid = e.tid AND es.ts_ns = e.ts_ns "
        if stacks
        else ""
    )
    return _dicts(
        conn.execute(
            "SELECT e.id AS id, e.session_id AS session_id, e.ts_ns AS ts_ns, "
            "e.ts_ns - s.started_mono_ns + s.started_wall_ns AS wall_ns, e.duration_ns AS duration_ns, "
            "e.pid AS pid, e.tid AS tid, c.comm AS comm, o.name AS op, o.source AS source, e.ret AS ret, "
            f"e.bytes AS bytes, e.stream AS stream, {linked} AS stack_hash "
            f"FROM event_log e JOIN sessions s ON s.id = e.session_id JOIN ops o ON o.id = e.op_id {join}"
            "LEFT JOIN comms c ON c.id = e.comm_id "
            "WHERE e.ts_ns BETWEEN ? AND ? AND o.source != 'host' ORDER BY e.duration_ns DESC LIMIT ?",
            (start_ns, end_ns, limit),
        )
    )


def has_events(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM event_log LIMIT 1").fetchone() is not None


def wall_bounds(conn: sqlite3.Connection) -> tuple[int | None, int | None]:
    lo, hi = conn.execute("SELECT min(wall_ns), max(wall_ns) FROM events").fetchone()
    return lo, hi


def graph_lifecycle_rows(conn: sqlite3.Connection, pid: int | None = None) -> list[dict[str, Any]]:
    """Per process and graph op: calls, distinct graphs and executables, total time, first and last call."""
    if not has_table(conn, "graph_events"):
        return []
    where, args = ("WHERE pid = ?", (pid,)) if pid is not None else ("", ())
    return _dicts(
        conn.execute(
            "SELECT pid, max(comm) AS comm, op, count(*) AS calls, count(DISTINCT graph) AS graphs, "
            "count(DISTINCT graph_exec) AS execs, sum(duration_ns) AS total_ns, min(wall_ns) AS first_wall_ns, "
            f"max(wall_ns) AS last_wall_ns FROM graph_events {where} GROUP BY pid, op ORDER BY pid, op",
            args,
        )
    )


def graph_launch_rows(conn: sqlite3.Connection, pid: int | None = None, limit: int = 50) -> list[dict[str, Any]]:
    """Per process and executable graph: launches, their span, and mean launch duration (most launched first)."""
    if not has_table(conn, "graph_events"):
        return []
    where = "WHERE op IN ('cudaGraphLaunch', 'cuGraphLaunch')" + (" AND pid = ?" if pid is not None else "")
    args: tuple[Any, ...] = (pid, limit) if pid is not None else (limit,)
    return _dicts(
        conn.execute(
            "SELECT pid, max(comm) AS comm, graph_exec, count(*) AS launches, min(wall_ns) AS first_wall_ns, "
            "max(wall_ns) AS last_wall_ns, avg(duration_ns) AS mean_ns "
            f"FROM graph_events {where} GROUP BY pid, graph_exec ORDER BY launches DESC LIMIT ?",
            args,
        )
    )


def view_columns(conn: sqlite3.Connection, names: tuple[str, ...]) -> dict[str, list[str]]:
    """The columns of each table or view in ``names`` that the recording has."""
    return {n: [str(r[1]) for r in conn.execute("SELECT * FROM pragma_table_info(?)", (n,))] for n in names}


def system_sample_rows(conn: sqlite3.Connection, since_wall_ns: int | None, limit: int) -> list[dict[str, Any]]:
    """Host samples in time order (the last ``limit``), from ``since_wall_ns`` when given."""
    if not has_table(conn, "system_samples"):
        return []
    where, args = ("WHERE wall_ns >= ?", (since_wall_ns,)) if since_wall_ns is not None else ("", ())
    rows = _dicts(
        conn.execute(
            "SELECT wall_ns, cpu_pct, mem_pct, mem_available_bytes, swap_used_bytes, load1, cpus "
            f"FROM system_samples {where} ORDER BY wall_ns DESC LIMIT ?",
            (*args, limit),
        )
    )
    return rows[::-1]
