"""Open a recording read-only, converting an Ingero file once into a cached gpuscope copy."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import tempfile
from pathlib import Path

from gpuscope.errors import DatabaseError
from gpuscope.importers import every_event_has_a_node, import_file
from gpuscope.recording.formats import Format, detect_format
from gpuscope.store.connect import connect_reader


def open_recording(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """A read-only connection to the recording at ``path``, of either format.

    Raises DatabaseError (missing, corrupt, neither format) or
    SchemaTooNewError (written by a newer gpuscope).
    """
    return connect_reader(as_gpuscope_file(path))


def as_gpuscope_file(path: str | os.PathLike[str]) -> Path:
    """``path`` itself for a gpuscope recording; for an Ingero one, its cached conversion.

    The conversion is keyed by the file's resolved path, size and
    modification time, so a file that changes is converted again.
    """
    p = Path(path).expanduser()
    if detect_format(p) is Format.GPUSCOPE:
        return p
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
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    for candidate in (base / "gpuscope" / "imports", Path(tempfile.gettempdir()) / f"gpuscope-{os.getuid()}-imports"):
        try:
            candidate.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError:
            continue
        if os.access(candidate, os.W_OK | os.X_OK):
            return candidate
    raise DatabaseError(
        f"{base / 'gpuscope' / 'imports'}: cannot create the cache for converted Ingero files",
        remedy="set XDG_CACHE_HOME to a writable folder, or convert once with `gpuscope import FILE -o OUT.db`",
    )
