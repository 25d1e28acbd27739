"""Open a recording read-only, converting an Ingero file once into a cached gpuscope copy."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

from gpuscope.config import expand_home
from gpuscope.importers import every_event_has_a_node, import_file
from gpuscope.importers.detect import is_ingero
from gpuscope.recording.formats import Format, detect_format
from gpuscope.store.connect import PendingCheck, connect_reader, open_read_only, verify_reader, verify_reader_meanwhile
from gpuscope.store.private_snapshot import user_cache_dir


def open_recording(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """A read-only connection to the recording at ``path``, of either format.

    The file is opened once and its format told from that connection (no
    separate sniffing open), the way ``connect_reader`` opens it: no file is
    created or changed beside it (see ``gpuscope.store.connect.read_uri``).

    Raises DatabaseError (missing, unreadable, corrupt, neither format) or
    SchemaTooNewError (written by a newer gpuscope).
    """
    return _open(path, meanwhile=False)[0]


def open_recording_meanwhile(path: str | os.PathLike[str]) -> tuple[sqlite3.Connection, PendingCheck]:
    """``open_recording``, with a closed file's page check running while the caller reads it.

    For a caller that reads much of the file (explain): the check and the
    reads overlap. Call ``result()`` on the check before trusting what was read.
    """
    return _open(path, meanwhile=True)


def _open(path: str | os.PathLike[str], *, meanwhile: bool) -> tuple[sqlite3.Connection, PendingCheck]:
    p = expand_home(path)
    conn, mode = open_read_only(p)
    try:
        try:
            ingero = is_ingero(conn)
        except sqlite3.DatabaseError:
            ingero = False  # not SQLite, or damaged: verify_reader says which in one line
        if not ingero:
            if meanwhile:
                return conn, verify_reader_meanwhile(conn, p, mode)
            verify_reader(conn, p, mode)
            return conn, PendingCheck()
    except BaseException:
        conn.close()
        raise
    conn.close()
    return connect_reader(_converted(p)), PendingCheck()


def as_gpuscope_file(path: str | os.PathLike[str]) -> Path:
    """``path`` itself for a gpuscope recording; for an Ingero one, its cached conversion."""
    p = expand_home(path)
    if detect_format(p) is Format.GPUSCOPE:
        return p
    return _converted(p)


def _converted(p: Path) -> Path:
    """The cached gpuscope conversion of the Ingero file ``p``, made when missing.

    The conversion is keyed by the file's resolved path, size and
    modification time, so a file that changes is converted again.
    """
    st = p.stat()
    key = hashlib.sha256(f"{p.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
    out = conversion_cache_dir() / f"{p.stem}-{key}.db"
    if not out.is_file():
        import_file(p, out, node=None if every_event_has_a_node(p) else p.stem)
    return out


def conversion_cache_dir() -> Path:
    """Where conversions are cached: ``$XDG_CACHE_HOME/gpuscope/imports`` (default ``~/.cache``).

    Falls back to a per-user folder under the temporary directory when the
    cache cannot be created (a read-only or foreign home), so reading an
    Ingero file never needs a writable home.
    """
    return user_cache_dir(
        "imports",
        remedy="set XDG_CACHE_HOME to a writable folder, or convert once with `gpuscope import FILE -o OUT.db`",
    )
