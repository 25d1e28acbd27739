"""Open databases: ``connect_writer`` (migrates) and ``connect_reader`` (read-only)."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from urllib.parse import quote

from gpuscope.config import DEFAULT_DB as DEFAULT_DB  # re-exported: the default's one definition is in config
from gpuscope.config import resolve_db_path
from gpuscope.errors import DatabaseError, SchemaTooNewError
from gpuscope.store.schema import MIGRATIONS, SCHEMA_VERSION, lookup_rows


def default_db_path() -> Path:
    """The recording used when none is named: ``$GPUSCOPE_DB``, else the config file's ``db``, else DEFAULT_DB.

    Raises UsageError for a malformed config file (see ``gpuscope.config.resolve_db_path``).
    """
    return resolve_db_path().path


def _schema_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def connect_writer(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """Open (creating if needed) a database for writing and bring its schema current.

    Raises DatabaseError when the path cannot be written or is not a database,
    SchemaTooNewError when it was written by a newer gpuscope.
    """
    p = Path(path).expanduser()
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(file_uri(p, "rwc"), uri=True, check_same_thread=False, isolation_level=None)
        if int(conn.execute("PRAGMA page_count").fetchone()[0]) == 0:
            # Only settable before the first table: lets --max-db give pages back.
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
        conn.create_function("gs_hist_merge", 2, _hist_merge, deterministic=True)
        if _schema_version(conn) == 0:
            foreign = [
                r[0]
                for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                if r[0] not in ("schema_migrations",) and not r[0].startswith("sqlite_")
            ]
            if foreign:
                conn.close()
                raise DatabaseError(
                    f"{p}: not a gpuscope database (it has other tables: {', '.join(sorted(foreign)[:5])})",
                    remedy="record into a new file with --db PATH; convert an Ingero file with `gpuscope import`",
                )
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=5000")
        migrate(conn)
    except sqlite3.DatabaseError as exc:
        raise DatabaseError(f"{p}: {_describe(exc)}") from None
    except OSError as exc:
        raise DatabaseError(f"{p}: cannot create: {exc.strerror}") from None
    return conn


def _hist_merge(a: bytes | None, b: bytes | None) -> bytes:
    from gpuscope.store.aggregates import decode_hist, encode_hist

    return encode_hist(decode_hist(a) + decode_hist(b))


def file_uri(path: str | os.PathLike[str], mode: str) -> str:
    """The SQLite URI of ``path`` opened with ``mode`` (``ro``, ``rw`` or ``rwc``).

    Every connection goes through here: a path is percent-quoted, so a file
    named ``a#b.db`` or ``100%.db`` is opened as itself, not as ``a`` with a
    fragment (which would also drop ``mode=ro``).
    """
    return f"file:{quote(os.fspath(path))}?mode={mode}"


def connect_reader(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """Open an existing gpuscope database read-only (``mode=ro`` and ``query_only``).

    Never migrates: reading an archive must not change it. Files of other
    formats are opened through ``gpuscope.recording.open_recording``.
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise DatabaseError(f"{p}: no such database", remedy="record one with `gpuscope trace`, or pass --db PATH")
    try:
        conn = sqlite3.connect(file_uri(p, "ro"), uri=True, check_same_thread=False)
        conn.execute("PRAGMA query_only=1")
        version = _schema_version(conn)
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view')")}
    except sqlite3.DatabaseError as exc:
        raise DatabaseError(f"{p}: {_describe(exc)}", remedy="check the file is a gpuscope database") from None
    if version > SCHEMA_VERSION:
        conn.close()
        raise SchemaTooNewError(f"{p}: schema version {version} is newer than this gpuscope ({SCHEMA_VERSION})")
    if "event_log" not in tables:
        conn.close()
        raise DatabaseError(
            f"{p}: not a gpuscope database (no event_log table)", remedy="pass a database written by `gpuscope trace`"
        )
    return conn


def database_path(conn: sqlite3.Connection) -> str:
    """Return the file behind the ``main`` schema of ``conn`` (for a converted recording, the converted file)."""
    return str(conn.execute("PRAGMA database_list").fetchone()[2])


def connect_probe(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """Open any SQLite file read-only to look at its schema (no gpuscope checks)."""
    conn = sqlite3.connect(file_uri(path, "ro"), uri=True)
    conn.execute("PRAGMA query_only=1")
    return conn


def table_names(conn: sqlite3.Connection) -> set[str]:
    """The tables (not views) of a database."""
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def migrate(conn: sqlite3.Connection) -> None:
    """Apply every migration newer than the database, in order, each in a transaction."""
    version = _schema_version(conn)
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
            for stmt in _statements(m.sql):
                conn.execute(stmt)
            conn.execute(
                "INSERT INTO schema_migrations(version, description, applied_at_ns) VALUES (?, ?, ?)",
                (m.version, m.description, time.time_ns()),
            )
            conn.execute(f"PRAGMA user_version={m.version}")
            conn.execute("COMMIT")
        except BaseException:
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


def _describe(exc: sqlite3.DatabaseError) -> str:
    msg = str(exc)
    if "file is not a database" in msg or "malformed" in msg:
        return f"not a valid SQLite database ({msg})"
    if "readonly" in msg or "unable to open" in msg:
        return f"cannot write ({msg})"
    return msg
