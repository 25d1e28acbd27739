"""Helpers for commands that build a whole new database (``merge``, ``import``).

The file is built beside its destination and renamed into place at the end:
a failure half-way (bad input, Ctrl-C, full disk) leaves no half-written
output behind, and an existing file at the destination is only replaced once
the new one is complete.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

from gpuscope.errors import DatabaseError
from gpuscope.store.connect import file_uri
from gpuscope.store.migrate import migrate


def open_uri(path: Path, mode: str) -> sqlite3.Connection:
    """Open ``path`` through a URI (so ATTACH of ``mode=ro`` URIs works on it)."""
    return sqlite3.connect(file_uri(path, mode), uri=True, isolation_level=None)


@contextlib.contextmanager
def build_database(dest: str | os.PathLike[str]) -> Iterator[sqlite3.Connection]:
    """Yield a writer connection to a new, migrated database that becomes ``dest`` on success.

    The file is built as a hidden temporary file in the destination's folder
    (so the final rename is atomic) with a rollback journal, not WAL, so the
    renamed file is complete on its own. On any exception the temporary file
    is removed and ``dest`` is left as it was.

    Raises DatabaseError when the destination folder cannot be written.
    """
    target = Path(dest).expanduser()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise DatabaseError(f"{target}: cannot create: {exc.strerror}", remedy="pass a writable path with -o") from None
    os.close(fd)
    tmp = Path(name)
    conn: sqlite3.Connection | None = None
    try:
        conn = open_uri(tmp, "rw")
        # A crash leaves only the temporary file, so durability while building is not needed.
        conn.execute("PRAGMA journal_mode=MEMORY")
        conn.execute("PRAGMA synchronous=OFF")
        migrate(conn)
        yield conn
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.close()
        conn = None
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp made it 0600; a database is as readable as any new file
        os.replace(tmp, target)
    finally:
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        for suffix in ("-journal", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                Path(f"{tmp}{suffix}").unlink()


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
