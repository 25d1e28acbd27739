"""Tell a gpuscope recording from an Ingero one without changing either."""

from __future__ import annotations

import enum
import os
import sqlite3

from gpuscope.config import expand_home
from gpuscope.errors import DatabaseError
from gpuscope.importers.detect import is_ingero
from gpuscope.store.connect import connect_probe, table_names


class Format(enum.Enum):
    GPUSCOPE = "gpuscope"
    INGERO = "ingero"


def detect_format(path: str | os.PathLike[str]) -> Format:
    """The format of the recording at ``path``.

    It opens the file as readers do (``gpuscope.store.connect.open_read_only``),
    which for a recording whose writer was killed copies it with ordinary
    opens. Never call it on a file this process has open through SQLite:
    closing any descriptor of a file drops every POSIX lock the process holds
    on it, its SQLite locks included. Where the format is known, or can be
    told from a connection already open (``open_recording`` does), do not
    call it at all.

    Raises DatabaseError for a missing file, a file that is not SQLite, or a
    SQLite file of neither format.
    """
    p = expand_home(path)
    if not p.is_file():
        raise DatabaseError(f"{p}: no such database", remedy="record one with `gpuscope trace`, or pass --db PATH")
    try:
        conn = connect_probe(p)
        try:
            if is_ingero(conn):
                return Format.INGERO
            tables = table_names(conn)
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise DatabaseError(f"{p}: not a valid SQLite database ({exc})", remedy="check the file is intact") from None
    if "event_log" in tables:
        return Format.GPUSCOPE
    raise DatabaseError(
        f"{p}: not a gpuscope database (no event_log table)",
        remedy="pass a database written by `gpuscope trace` or by Ingero",
    )
