"""Rows handed to SQLite as one blob a batch: the ``gs_int64_rows`` table-valued function.

``native/sqlite_rows/sqlite_rows.c``, built into the package beside the
other native files, lets the writer store a batch with one statement and one
bound value, ``INSERT INTO event_log(...) SELECT c0, ... FROM
gs_int64_rows(?, 17)``, the value being the numpy rows' bytes. Binding each
value from Python cost about 0.8 us a row more (1.9 against 1.1 us a row,
measured on a 2-CPU VM) and held the interpreter's lock for it; the
statement runs without it.

Where this Python's ``sqlite3`` cannot load extensions (a build without
``--enable-loadable-sqlite-extensions``) or the file is missing, the writer
binds values as before (``load_bulk_rows`` says which). Loading is enabled
for the one call and disabled again, on the writer's own connection only:
nothing that runs a user's SQL can load anything.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

EXTENSION = Path(__file__).resolve().parents[1] / "_standin" / "libgpuscope_sqlite_rows.so"
MAX_COLUMNS = 32


def load_bulk_rows(conn: sqlite3.Connection, path: Path = EXTENSION) -> bool:
    """Make ``gs_int64_rows`` available on ``conn``; False where it cannot be (see the module's docstring)."""
    enable = getattr(conn, "enable_load_extension", None)
    if enable is None or not path.is_file():
        return False
    try:
        enable(True)
        try:
            conn.load_extension(str(path))
        finally:
            enable(False)
    except sqlite3.Error:
        return False
    return True


def insert_from_blob(table: str, columns: tuple[str, ...]) -> str:
    """The statement that inserts the rows of one bound blob (``len(columns)`` int64 values a row)."""
    if not 0 < len(columns) <= MAX_COLUMNS:
        raise ValueError(f"1 to {MAX_COLUMNS} columns, not {len(columns)}")
    picked = ", ".join(f"c{i}" for i in range(len(columns)))
    return f"INSERT INTO {table}({', '.join(columns)}) SELECT {picked} FROM gs_int64_rows(?, {len(columns)})"
