"""Guards for user SQL: an authorizer that refuses writes and a time limit.

``connect_reader`` already opens ``mode=ro`` with ``query_only``; the
authorizer is a second, independent wall: it allows reading and nothing else,
so ``ATTACH`` (which could open a writable file), ``PRAGMA writable_schema``,
temp tables and transactions are refused before they run. The time limit is
datasette's ``sqlite_timelimit`` pattern: a progress handler that aborts the
statement once a deadline has passed.

Memory is bounded in two ways, because the time limit covers only SQLite's
virtual machine, not one call of a function: ``randomblob(1000000000)`` is a
single step. ``SQLITE_LIMIT_LENGTH`` on the reader caps every string or blob
SQLite makes (``ResultLimits`` in ``gpuscope.query.guarded``), and a process
that exists to run user SQL (``query``, the servers) caps SQLite's whole heap
(``cap_sqlite_heap``), which also bounds a row of many long columns.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager

from gpuscope.errors import EXIT_USAGE, DatabaseError, GpuscopeError
from gpuscope.model.units import fmt_ns

# Pragmas that only read: those that take a table or index name, and those
# allowed only without a value (with one, they would set it).
READ_ONLY_PRAGMAS_WITH_ARG = frozenset(
    {"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo", "foreign_key_list", "table_list"}
)
READ_ONLY_PRAGMAS = READ_ONLY_PRAGMAS_WITH_ARG | frozenset(
    {
        "database_list",
        "collation_list",
        "function_list",
        "pragma_list",
        "compile_options",
        "user_version",
        "schema_version",
        "application_id",
        "page_count",
        "page_size",
        "freelist_count",
        "encoding",
        "query_only",
    }
)

MiB = 1 << 20
SQLITE_HEAP_BYTES = 256 * MiB  # what cap_sqlite_heap allows SQLite in a process that runs user SQL
_MESSAGE_CHARS = 400
# Python's sqlite3 met a TEXT value whose bytes are not UTF-8: a recording changed by hand (or a CAST in the SQL).
NOT_UTF8_MESSAGE = "Could not decode to UTF-8"
_heap_cap: list[int] = []  # the cap this process set, for the message when a statement reaches it

_ALLOWED_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION})
# Functions a read may not call: they reveal the reading process, not the recording (``fts3_tokenizer(name)``
# returns a tokenizer's address in memory: an address-layout leak to anyone who may query, over the API too).
PROCESS_STATE_FUNCTIONS = frozenset({"fts3_tokenizer"})
_SCHEMA_TABLES = frozenset({"sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_temp_schema"})
_RECURSIVE = getattr(sqlite3, "SQLITE_RECURSIVE", 33)

# Authorizer action codes (sqlite3.h), for the one-line refusal message.
_ACTION_NAMES = {
    1: "CREATE INDEX",
    2: "CREATE TABLE",
    3: "CREATE TEMP INDEX",
    4: "CREATE TEMP TABLE",
    5: "CREATE TEMP TRIGGER",
    6: "CREATE TEMP VIEW",
    7: "CREATE TRIGGER",
    8: "CREATE VIEW",
    9: "DELETE",
    10: "DROP INDEX",
    11: "DROP TABLE",
    12: "DROP TEMP INDEX",
    13: "DROP TEMP TABLE",
    14: "DROP TEMP TRIGGER",
    15: "DROP TEMP VIEW",
    16: "DROP TRIGGER",
    17: "DROP VIEW",
    18: "INSERT",
    19: "PRAGMA",
    20: "READ",
    21: "SELECT",
    22: "TRANSACTION",
    23: "UPDATE",
    24: "ATTACH",
    25: "DETACH",
    26: "ALTER TABLE",
    27: "REINDEX",
    28: "ANALYZE",
    29: "CREATE VTABLE",
    30: "DROP VTABLE",
    31: "FUNCTION",
    32: "SAVEPOINT",
    33: "RECURSIVE",
}


class QueryRefusedError(GpuscopeError):
    """The SQL tried something other than reading."""

    exit_code = EXIT_USAGE
    remedy = "gpuscope query is read-only: use one SELECT (or WITH … SELECT) statement"


class QueryTimeoutError(GpuscopeError):
    remedy = "narrow the query (a LIMIT, --since, --pid, a WHERE on ts_ns) or raise --timeout"


class QueryTooLargeError(GpuscopeError):
    """The result, or one value in it, is over the size limit."""

    remedy = "add a LIMIT, select fewer columns, or cut long values (substr(x, 1, 200), length(x))"


class QuerySyntaxError(GpuscopeError):
    exit_code = EXIT_USAGE
    remedy = "`gpuscope docs schema` lists the tables, views and columns"


class ReadOnlyAuthorizer:
    """An ``sqlite3`` authorizer that allows reads and records the first refusal."""

    def __init__(self) -> None:
        self.refused: str | None = None
        self.reveals = False  # the refusal is a function that reveals process state, not a write
        self._in_select = False

    def reset(self) -> None:
        """Forget the previous statement (call before preparing the next)."""
        self.refused = None
        self.reveals = False
        self._in_select = False

    def __call__(self, action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None) -> int:
        if action == sqlite3.SQLITE_SELECT:
            self._in_select = True
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in PROCESS_STATE_FUNCTIONS:
            if self.refused is None:
                self.refused = f"{(arg2 or '').lower()}() reveals the reading process's memory, not the recording"
                self.reveals = True
            return sqlite3.SQLITE_DENY
        if action in _ALLOWED_ACTIONS or action == _RECURSIVE:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_UPDATE and self._in_select and (arg1 or "").lower() in _SCHEMA_TABLES:
            # Inside a SELECT, SQLite asks this while it sets up a table-valued pragma (pragma_table_info(...));
            # an UPDATE statement never starts with a SELECT. Nothing could write the schema table anyway:
            # that needs PRAGMA writable_schema (refused) on a mode=ro connection.
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA:
            name = (arg1 or "").lower()
            if name in READ_ONLY_PRAGMAS_WITH_ARG or (arg2 is None and name in READ_ONLY_PRAGMAS):
                return sqlite3.SQLITE_OK
        if self.refused is None:
            what = _ACTION_NAMES.get(action, f"action {action}")
            target = " ".join(a for a in (arg1, arg2) if a)
            self.refused = f"{what} {target}".strip()
        return sqlite3.SQLITE_DENY


def install_read_only_authorizer(conn: sqlite3.Connection) -> ReadOnlyAuthorizer:
    """Refuse every statement that is not a read on ``conn``; returns the authorizer."""
    auth = ReadOnlyAuthorizer()
    conn.set_authorizer(auth)
    return auth


# VM steps between looks at the clock. A step may call a function that takes milliseconds (randomblob of a
# value near the 4 MiB limit: ~3 ms): 1000 of them overran a 1 s limit by a second; 100 by a tenth.
# Looking costs nothing measurable (an aggregate over 2M rows: 0.30 s either way).
PROGRESS_STEPS = 100


@contextmanager
def time_limit(conn: sqlite3.Connection, seconds: float, *, deadline: float | None = None) -> Iterator[None]:
    """Abort any statement on ``conn`` still running ``seconds`` from now (or at ``deadline``, monotonic).

    ``seconds <= 0`` means no limit. The handler runs every ``PROGRESS_STEPS`` VM
    steps (every step for limits under 50 ms), like datasette's ``sqlite_timelimit``.
    """
    if seconds <= 0:
        yield
        return
    if deadline is None:
        deadline = time.monotonic() + seconds

    def handler() -> int:
        return 1 if time.monotonic() >= deadline else 0

    conn.set_progress_handler(handler, 1 if seconds < 0.05 else PROGRESS_STEPS)
    try:
        yield
    finally:
        conn.set_progress_handler(None, 0)


def cap_sqlite_heap(nbytes: int = SQLITE_HEAP_BYTES) -> None:
    """Cap the memory SQLite may take in this whole process at ``nbytes`` (``PRAGMA hard_heap_limit``).

    Process-wide, so only a process that exists to run user SQL calls it (the
    ``query`` command, the dashboard and MCP servers): past the cap, an
    allocation fails as SQLITE_NOMEM (Python's MemoryError), which the engine
    reports as a result too large. A SQLite built without memory statistics
    ignores the pragma; ``SQLITE_LIMIT_LENGTH`` still holds there.
    """
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute(f"PRAGMA hard_heap_limit = {int(nbytes)}")
    finally:
        conn.close()
    _heap_cap[:] = [int(nbytes)]


def out_of_memory() -> QueryTooLargeError:
    """The error for SQLITE_NOMEM (Python's MemoryError) while running user SQL: a row of many long values."""
    cap = f" ({size_text(_heap_cap[0])} in this process)" if _heap_cap else ""
    return too_large(f"the query needs more memory than SQLite may use{cap}")


def size_text(nbytes: int) -> str:
    """A byte count as the limits are written: ``64 MiB``, ``512 KiB``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size and nbytes % size == 0:
            return f"{nbytes // size} {unit}"
    return f"{nbytes} bytes"


def too_large(what: str) -> QueryTooLargeError:
    """The one-line error for a result over a limit: ``what`` names the limit passed."""
    return QueryTooLargeError(f"result too large: {what}")


def translate_error(
    exc: sqlite3.Error, *, auth: ReadOnlyAuthorizer | None, timeout_s: float, value_bytes: int | None = None
) -> GpuscopeError:
    """Turn an sqlite3 error from user SQL into a one-line error with its remedy.

    ``value_bytes``: the reader's longest value, named when SQLite refuses a longer one.
    """
    msg = str(exc)
    if "interrupted" in msg:
        return QueryTimeoutError(f"query interrupted after the {fmt_ns(timeout_s * 1e9)} time limit")
    if "too big" in msg:  # SQLITE_TOOBIG: a string or blob past SQLITE_LIMIT_LENGTH
        limit = size_text(value_bytes) if value_bytes else "the limit"
        return too_large(f"a value longer than {limit} (string or blob too big)")
    if any(
        m in msg for m in ("not authorized", "authorization denied", "readonly", "read-only", "may not be modified")
    ):
        if auth is not None and auth.reveals and auth.refused:
            return QueryRefusedError(f"refused: {auth.refused}", remedy="leave it out: it reads nothing recorded")
        what = f" ({auth.refused})" if auth is not None and auth.refused else ""
        return QueryRefusedError(f"refused: only reads are allowed{what}")
    if isinstance(exc, sqlite3.ProgrammingError) and "one statement" in msg:
        return QueryRefusedError("refused: one statement at a time")
    if msg.startswith(NOT_UTF8_MESSAGE):
        return DatabaseError(
            f"a text value of the result is not UTF-8 ({msg[:_MESSAGE_CHARS]})",
            remedy="select that column's bytes instead: CAST(column AS BLOB) or hex(column)",
        )
    if len(msg) > _MESSAGE_CHARS:  # SQLite quotes the token it stopped at, however long
        msg = msg[: _MESSAGE_CHARS - 80] + "…" + msg[-80:]
    return QuerySyntaxError(f"SQL error: {msg}")
