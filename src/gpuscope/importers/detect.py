"""Tell a reference-system (Ingero) recording by its schema, without loading the importer.

Every command that opens a recording asks; only a reference file needs the
importer itself (``gpuscope.importers.ingero``, a few hundred lines and their
dataclasses, 10 ms of a command's start-up).
"""

from __future__ import annotations

import sqlite3

from gpuscope.store.connect import column_names, table_names


def is_ingero(conn: sqlite3.Connection) -> bool:
    """True when the schema is Ingero's: ``events`` with timestamp/source/op, no ``event_log``."""
    tables = table_names(conn)
    if "events" not in tables or "event_log" in tables:
        return False
    return {"timestamp", "source", "op", "pid"} <= column_names(conn, "events")
