"""Reads of what imported reference recordings stored beside their events: their own findings (chains)."""

from __future__ import annotations

import sqlite3

from gpuscope.store.connect import table_names

ChainRow = tuple[str, str, int, str, str, str, str]
"""(id, node, detected_wall_ns, severity, summary, root_cause, op) of a reference finding."""


def imported_chain_rows(
    conn: sqlite3.Connection, start_wall_ns: int | None = None, end_wall_ns: int | None = None
) -> list[ChainRow]:
    """The reference's stored causal chains detected in [start_wall_ns, end_wall_ns] (all without bounds)."""
    if "imported_chains" not in table_names(conn):
        return []
    lo = start_wall_ns if start_wall_ns is not None else -(2**63)
    hi = end_wall_ns if end_wall_ns is not None else 2**63 - 1
    rows: list[ChainRow] = conn.execute(
        "SELECT id, node, detected_wall_ns, severity, summary, root_cause, op FROM imported_chains "
        "WHERE detected_wall_ns BETWEEN ? AND ? ORDER BY detected_wall_ns, id",
        (lo, hi),
    ).fetchall()
    return rows
