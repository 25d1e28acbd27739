"""Tell a reference-system (Ingero) recording by its schema, without loading the importer.

Every command that opens a recording asks; only a reference file needs the
importer itself (``gpuscope.importers.ingero``, a few hundred lines and their
dataclasses, 10 ms of a command's start-up).
"""

from __future__ import annotations

import sqlite3


def is_ingero(conn: sqlite3.Connection) -> bool:
    """True when the schema is Ingero's: ``events`` with timestamp/source/op, no ``event_log``."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "events" not in tables or "event_log" in tables:
        return False
    return {"timestamp", "source", "op", "pid"} <= {r[1] for r in conn.execute('PRAGMA table_info("events")')}
