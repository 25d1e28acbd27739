"""Ingero's history beside its events: stacks, causal chains, snapshots, aggregates, the rest.

Each goes to an ``imported_*`` table (documented in docs/schema.md); a table
with no dedicated home is kept row by row as JSON in ``imported_rows``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gpuscope.importers.ingero_ops import ingero_op_name, rule_for
from gpuscope.store.connect import column_names, table_names

# Tables read into dedicated places, or lookups that are rebuilt from code.
HANDLED = {
    "events",
    "sessions",
    "stack_traces",
    "causal_chains",
    "system_snapshots",
    "event_aggregates",
    "event_aggregates_5s",
    "cgroup_metadata",
    "process_names",
    "sources",
    "ops",
    "sqlite_sequence",
}


@dataclass(slots=True)
class HistoryCounts:
    stacks: int = 0
    chains: int = 0
    snapshots: int = 0
    aggregates: int = 0
    cgroups: int = 0
    other_rows: dict[str, int] = field(default_factory=dict)


def import_history(
    src: sqlite3.Connection, out: sqlite3.Connection, home: str, node_of: Callable[[str | None], str]
) -> HistoryCounts:
    """Copy stacks, chains, snapshots, aggregates, cgroups and any other table; count each.

    ``home`` is the node of tables that have no node column; ``node_of`` maps a
    row's node (maybe empty) to the node it is imported as.
    """
    report = HistoryCounts()
    tables = table_names(src)
    if "stack_traces" in tables:
        for row in rows(src, "SELECT * FROM stack_traces"):
            out.execute(
                "INSERT OR IGNORE INTO imported_stacks(hash, ips, frames) VALUES (?, ?, ?)",
                (row["hash"], row.get("ips") or "", row.get("frames") or ""),
            )
            report.stacks += 1
    if "causal_chains" in tables:
        for row in rows(src, "SELECT * FROM causal_chains ORDER BY detected_at"):
            _import_chain(out, row, node_of)
            report.chains += 1
    if "system_snapshots" in tables:
        for row in rows(src, "SELECT * FROM system_snapshots ORDER BY timestamp"):
            out.execute(
                "INSERT OR IGNORE INTO imported_snapshots(node, wall_ns, cpu_pct, mem_pct, mem_avail_mb, swap_mb, "
                "load_avg) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    home,
                    row["timestamp"],
                    row.get("cpu_pct"),
                    row.get("mem_pct"),
                    row.get("mem_avail"),
                    row.get("swap_mb"),
                    row.get("load_avg"),
                ),
            )
            report.snapshots += 1
    lookup = op_lookup(src)
    for table, width_ns in (("event_aggregates", 60_000_000_000), ("event_aggregates_5s", 5_000_000_000)):
        if table in tables:
            for row in rows(src, f"SELECT * FROM {table}"):
                name = ingero_op_name(int(row["source"]), int(row["op"]), lookup)
                _upsert_aggregate(out, home, width_ns, rule_for(name, int(row["source"])).name, row)
                report.aggregates += 1
    if "cgroup_metadata" in tables:
        for row in rows(src, "SELECT * FROM cgroup_metadata"):
            values = [row.get(k) or "" for k in ("container_id", "cgroup_path", "pod_name", "namespace")]
            out.execute(
                "INSERT OR REPLACE INTO imported_cgroups VALUES (?, ?, ?, ?, ?, ?)", (home, row["cgroup_id"], *values)
            )
            report.cgroups += 1
    for table in sorted(tables - HANDLED):
        n = 0
        for row in rows(src, f'SELECT * FROM "{table}"'):
            text = json.dumps(row, sort_keys=True, default=str)
            out.execute(
                "INSERT OR IGNORE INTO imported_rows(node, table_name, row) VALUES (?, ?, ?)", (home, table, text)
            )
            n += 1
        report.other_rows[table] = n
    return report


def _import_chain(out: sqlite3.Connection, row: dict[str, Any], node_of: Callable[[str | None], str]) -> None:
    node = node_of(row.get("node"))
    raw_id = str(row["id"])
    _prefix, sep, rest = raw_id.partition(":")
    # Legacy ids ("chain-047", "tail-medium-cuMemAlloc") are not namespaced: two nodes would collide.
    chain_id = f"{node}:{rest}" if sep else f"{node}:{raw_id}"
    out.execute(
        "INSERT OR REPLACE INTO imported_chains(id, node, detected_wall_ns, severity, summary, root_cause, "
        "explanation, recommendations, op, p99_us, p50_us, tail_ratio, timeline) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            chain_id,
            node,
            row["detected_at"],
            row.get("severity") or "",
            row.get("summary") or "",
            row.get("root_cause") or "",
            row.get("explanation") or "",
            row.get("recommendations") or "[]",
            row.get("cuda_op") or "",
            row.get("cuda_p99_us") or 0,
            row.get("cuda_p50_us") or 0,
            row.get("tail_ratio") or 0.0,
            row.get("timeline") or "[]",
        ),
    )


def _upsert_aggregate(out: sqlite3.Connection, node: str, width_ns: int, op: str, row: dict[str, Any]) -> None:
    # Several Ingero ops can become one of ours (block_read/write -> block_io): add them up.
    out.execute(
        "INSERT INTO imported_aggregates(node, bucket_wall_ns, width_ns, op, pid, count, stored, sum_duration_ns, "
        "min_duration_ns, max_duration_ns, sum_arg0) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT(node, width_ns, bucket_wall_ns, op, pid) DO UPDATE SET count = count + excluded.count, "
        "stored = stored + excluded.stored, sum_duration_ns = sum_duration_ns + excluded.sum_duration_ns, "
        "min_duration_ns = min(min_duration_ns, excluded.min_duration_ns), "
        "max_duration_ns = max(max_duration_ns, excluded.max_duration_ns), sum_arg0 = sum_arg0 + excluded.sum_arg0",
        (
            node,
            row["bucket"],
            width_ns,
            op,
            row.get("pid") or 0,
            row.get("count") or 0,
            row.get("stored") or 0,
            row.get("sum_dur") or 0,
            row.get("min_dur") or 0,
            row.get("max_dur") or 0,
            row.get("sum_arg0") or 0,
        ),
    )


# -- schema helpers -------------------------------------------------------------------------------


def count_rows(conn: sqlite3.Connection, table: str) -> int:
    if table not in table_names(conn):
        return 0
    return int(conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])


def rows(conn: sqlite3.Connection, sql: str) -> Iterator[dict[str, Any]]:
    cur = conn.execute(sql)
    cols = [d[0] for d in cur.description]
    for values in cur:
        yield dict(zip(cols, values, strict=True))


def version(conn: sqlite3.Connection) -> str:
    if {"key", "value"} <= column_names(conn, "schema_info"):
        row = conn.execute("SELECT value FROM schema_info WHERE key = 'version'").fetchone()
        if row:
            return str(row[0])
    return f"user_version {conn.execute('PRAGMA user_version').fetchone()[0]}"


def op_lookup(src: sqlite3.Connection) -> dict[tuple[int, int], str]:
    """The file's own (source, op) -> name table, where it has one."""
    if not {"source_id", "op_id", "name"} <= column_names(src, "ops"):
        return {}
    return {(int(s), int(o)): str(n) for s, o, n in src.execute("SELECT source_id, op_id, name FROM ops")}
