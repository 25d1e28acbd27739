"""Bring a database's schema current: apply the migrations it lacks (``gpuscope.store.schema``), in order.

Only writers migrate (``connect_writer``, ``gpuscope.store.build``); a reader
never changes the file it reads.
"""

from __future__ import annotations

import sqlite3
import time

from gpuscope.errors import SchemaTooNewError
from gpuscope.store.schema import MIGRATIONS, SCHEMA_VERSION, lookup_rows


def schema_version(conn: sqlite3.Connection) -> int:
    """The last migration applied to the database (``PRAGMA user_version``; 0 for a new or foreign file)."""
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def migrate(conn: sqlite3.Connection) -> None:
    """Apply every migration newer than the database, in order, each in a transaction.

    Two writers may open the same new file at once (two traces started
    together): the version is read again inside each migration's write
    transaction, so a migration the other applied meanwhile is skipped, not
    applied twice.
    """
    version = schema_version(conn)
    if version > SCHEMA_VERSION:
        raise SchemaTooNewError(f"schema version {version} is newer than this gpuscope ({SCHEMA_VERSION})")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations "
        "(version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at_ns INTEGER NOT NULL)"
    )
    for m in MIGRATIONS:
        if m.version <= version:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            if schema_version(conn) >= m.version:
                conn.execute("COMMIT")  # applied by another writer since the version was first read
                continue
            for stmt in _statements(m.sql):
                conn.execute(stmt)
            conn.execute(
                "INSERT INTO schema_migrations(version, description, applied_at_ns) VALUES (?, ?, ?)",
                (m.version, m.description, time.time_ns()),
            )
            conn.execute(f"PRAGMA user_version={m.version}")
            conn.execute("COMMIT")
        except BaseException:
            # SQLite has rolled back already after some errors (a full disk):
            # a second ROLLBACK would replace the real error with its own.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    sources, ops = lookup_rows()
    conn.execute("BEGIN")
    conn.executemany("INSERT OR REPLACE INTO sources(name, description) VALUES (?, ?)", sources)
    conn.executemany("INSERT OR REPLACE INTO ops(id, name, source, kind, description) VALUES (?, ?, ?, ?, ?)", ops)
    conn.execute("COMMIT")


def _statements(sql: str) -> list[str]:
    """Split a migration script into complete statements."""
    out, buf = [], ""
    for line in sql.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out
