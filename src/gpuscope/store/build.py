"""Helpers for commands that build a whole new database (``merge``, ``import``).

The file is built in the empty temporary file that
``gpuscope.platform.files.atomic_output`` made beside the destination, and
renamed into place by it at the end: a failure half-way (bad input, Ctrl-C,
full disk) leaves no half-written output behind, and an existing file at the
destination is only replaced once the new one is complete.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from gpuscope.store.connect import file_uri
from gpuscope.store.migrate import migrate


def open_uri(path: Path, mode: str) -> sqlite3.Connection:
    """Open ``path`` through a URI (so ATTACH of ``mode=ro`` URIs works on it)."""
    return sqlite3.connect(file_uri(path, mode), uri=True, isolation_level=None)


@contextlib.contextmanager
def build_database(tmp: Path) -> Iterator[sqlite3.Connection]:
    """Yield a writer connection to a new, migrated database in ``tmp``, an empty file of the caller's.

    ``tmp`` is ``atomic_output``'s temporary file: that context syncs it and
    renames it over the destination on success, and removes it (and any
    SQLite side file beside it) on failure. The database is built with a
    rollback journal, not WAL, so the renamed file is complete on its own.
    """
    conn = open_uri(tmp, "rw")
    try:
        # A crash leaves only the temporary file, so durability while building is not needed.
        conn.execute("PRAGMA journal_mode=MEMORY")
        conn.execute("PRAGMA synchronous=OFF")
        migrate(conn)
        yield conn
        conn.execute("PRAGMA journal_mode=DELETE")
    finally:
        with contextlib.suppress(sqlite3.Error):
            conn.close()


# Ops that gpuscope does not record itself but reads from other tools' files
# (Ingero's cudaMemcpy2D, net_send, ...) get ids from here up: far above the
# 16-bit BPF op range that ends at GS_OP_MAX = 256, so they never collide.
IMPORTED_OP_BASE = 1024


def ensure_op(conn: sqlite3.Connection, name: str, source: str, kind: str, description: str) -> int:
    """The ``ops.id`` of ``name`` in this database, adding an imported-op row when it has none."""
    row = conn.execute("SELECT id FROM ops WHERE name = ?", (name,)).fetchone()
    if row is not None:
        return int(row[0])
    top = conn.execute("SELECT max(id) FROM ops WHERE id >= ?", (IMPORTED_OP_BASE,)).fetchone()[0]
    op_id = IMPORTED_OP_BASE if top is None else int(top) + 1
    conn.execute(
        "INSERT INTO ops(id, name, source, kind, description) VALUES (?, ?, ?, ?, ?)",
        (op_id, name, source, kind, description),
    )
    return op_id
