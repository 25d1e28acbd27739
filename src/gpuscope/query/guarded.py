"""Run user SQL on a guarded, read-only connection: filters, refusals, time limit."""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuscope.errors import GpuscopeError
from gpuscope.query.filters import EventFilter, apply_filter
from gpuscope.query.guard import (
    MiB,
    QueryRefusedError,
    QuerySyntaxError,
    ReadOnlyAuthorizer,
    install_read_only_authorizer,
    out_of_memory,
    size_text,
    time_limit,
    too_large,
    translate_error,
)
from gpuscope.recording import open_recording
from gpuscope.store.session_scope import ChosenSessions

DEFAULT_TIMEOUT_S = 5.0
MAX_VALUE_BYTES = 4 * MiB
# Rows fetched from SQLite at a time: few, so that a result's size is checked before many long rows pile up.
_FETCH_ROWS = 64
# Python 3.10's sqlite3 cannot set SQLITE_LIMIT_LENGTH: each value is then checked once fetched.
_CAN_SET_LIMITS = sys.version_info >= (3, 11)


@dataclass(frozen=True, slots=True)
class ResultLimits:
    """How much one query may produce.

    ``value_bytes``: the longest string or blob SQLite may make, its
    SQLITE_LIMIT_LENGTH (``randomblob(1000000000)`` fails at once instead of
    allocating a gigabyte); on Python 3.10, which cannot set it, each fetched
    value is checked instead. ``result_bytes``: the most the fetched rows may
    hold together (text in characters, blobs in bytes, 8 for a number), for a
    caller that keeps them all (the API); None for one that streams them.
    """

    value_bytes: int = MAX_VALUE_BYTES
    result_bytes: int | None = None


@dataclass
class GuardedReader:
    """A read-only connection with optional event filters and a write-refusing authorizer.

    Use ``query()`` for user SQL. ``conn`` is exposed for trusted, internal
    reads that still go through the authorizer (and so cannot write either).
    """

    conn: sqlite3.Connection
    auth: ReadOnlyAuthorizer
    timeout_s: float = DEFAULT_TIMEOUT_S
    limits: ResultLimits = field(default_factory=ResultLimits)
    sessions: ChosenSessions | None = None  # the sessions the filter views show (None: no filter, every row)
    _closed: bool = field(default=False, repr=False)

    def sessions_note(self) -> str | None:
        """One line naming the sessions the default left out (``ChosenSessions.note``); None if none."""
        return self.sessions.note() if self.sessions is not None else None

    def query(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> QueryResult:
        """Prepare ``sql`` and return its columns and a row iterator, both under the time limit.

        Raises QueryRefusedError (anything but a read, several statements),
        QueryTimeoutError (the limit passed while running or fetching),
        QueryTooLargeError (a value or the rows over ``limits``, or SQLite out
        of its memory cap), QuerySyntaxError (anything else SQLite rejects).
        """
        if not _is_utf8(sql):
            raise QuerySyntaxError("SQL error: the statement is not valid Unicode text (a lone surrogate)")
        refuse_empty_sql(sql)
        sql = one_statement(sql)
        self.auth.reset()
        # One deadline for running the statement and fetching its rows.
        deadline = time.monotonic() + self.timeout_s
        cursor = self.conn.cursor()
        try:
            with time_limit(self.conn, self.timeout_s, deadline=deadline):
                cursor.execute(sql, params)
        except sqlite3.Error as exc:
            raise self._translate(exc) from None
        except MemoryError:
            raise out_of_memory() from None
        columns = [d[0] for d in cursor.description or ()]
        return QueryResult(columns, self._rows(cursor, deadline))

    def _rows(self, cursor: sqlite3.Cursor, deadline: float) -> Iterator[tuple[Any, ...]]:
        budget = self.limits.result_bytes
        check_values = not _CAN_SET_LIMITS
        try:
            with time_limit(self.conn, self.timeout_s, deadline=deadline):
                while True:
                    chunk = cursor.fetchmany(_FETCH_ROWS)
                    if not chunk:
                        return
                    if budget is not None or check_values:
                        for row in chunk:
                            size = self._row_size(row)
                            if budget is not None:
                                budget -= size
                                if budget < 0:
                                    raise too_large(f"more than {size_text(self.limits.result_bytes or 0)} of rows")
                    yield from chunk
        except sqlite3.Error as exc:
            raise self._translate(exc) from None
        except MemoryError:
            raise out_of_memory() from None

    def _row_size(self, row: tuple[Any, ...]) -> int:
        size = 0
        for v in row:
            n = len(v) if isinstance(v, (str, bytes)) else 8
            if n > self.limits.value_bytes:  # Python 3.10 only: SQLite's own limit caught it otherwise
                raise too_large(f"a value longer than {size_text(self.limits.value_bytes)}")
            size += n
        return size

    def _translate(self, exc: sqlite3.Error) -> GpuscopeError:
        return translate_error(exc, auth=self.auth, timeout_s=self.timeout_s, value_bytes=self.limits.value_bytes)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.conn.close()

    def __enter__(self) -> GuardedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class QueryResult:
    """Column names and a one-pass iterator over the rows (streamed from the cursor)."""

    columns: list[str]
    rows: Iterator[tuple[Any, ...]]

    def close(self) -> None:
        """End the row stream now: a caller that stops early (a closed pipe) must do so before closing the reader."""
        close = getattr(self.rows, "close", None)
        if close is not None:
            close()


def one_statement(sql: str) -> str:
    """``sql`` up to the end of its first statement; raises QueryRefusedError when another statement follows.

    Only semicolons, white space and comments may follow (``SELECT 1; -- why``):
    Python's sqlite3 refuses any text after a statement, comments included.
    Raises QuerySyntaxError for text with a NUL character.
    """
    if "\x00" in sql:
        # Python's sqlite3 refuses a NUL in a statement (ValueError); the API and MCP can send one.
        raise QuerySyntaxError("SQL error: the statement contains a NUL character", remedy="remove the NUL (\\0)")
    text = sql.strip()
    for i, ch in enumerate(text):
        if ch == ";" and sqlite3.complete_statement(text[: i + 1]):
            if _without_comments(text[i + 1 :]):
                raise QueryRefusedError("refused: one statement at a time")
            return text[:i]
    return sql


def refuse_empty_sql(sql: str) -> None:
    """Raise QuerySyntaxError for SQL with no statement: empty, blank, or only semicolons and comments.

    SQLite runs such text as nothing and returns no columns: an empty
    result would read as "no rows matched".
    """
    if _without_comments(sql):
        return
    if not sql.strip():
        raise QuerySyntaxError(
            "no SQL statement: the SQL is empty", remedy='give one SELECT, e.g. "SELECT op, count(*) FROM events"'
        )
    raise QuerySyntaxError(
        f"no SQL statement in {sql.strip()[:80]!r}: only semicolons and comments",
        remedy='give one SELECT, e.g. "SELECT op, count(*) FROM events"',
    )


def _is_utf8(text: str) -> bool:
    """Whether ``text`` can be handed to SQLite (JSON and MCP arguments can carry lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _without_comments(tail: str) -> str:
    """What is left of ``tail`` once leading white space, semicolons and comments are removed."""
    while True:
        tail = tail.lstrip(" \t\r\n\f;")
        if tail.startswith("--"):
            end = tail.find("\n")
            tail = "" if end < 0 else tail[end + 1 :]
        elif tail.startswith("/*"):
            end = tail.find("*/")
            tail = "" if end < 0 else tail[end + 2 :]  # SQLite reads an unclosed comment to the end
        else:
            return tail


def open_reader(
    path: str | os.PathLike[str],
    *,
    event_filter: EventFilter | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    limits: ResultLimits | None = None,
) -> GuardedReader:
    """Open ``path`` read-only for user SQL: filter views first, then the size limits and the authorizer.

    ``limits``: see ``ResultLimits`` (default: 4 MiB a value, rows not counted).
    Raises DatabaseError / SchemaTooNewError from ``open_recording``.
    """
    limits = limits or ResultLimits()
    conn = open_recording(path)
    chosen = None
    try:
        if event_filter is not None:
            with time_limit(conn, max(timeout_s, 30.0) if timeout_s > 0 else 0):
                chosen = apply_filter(conn, event_filter)
        if sys.version_info >= (3, 11) and _CAN_SET_LIMITS:
            # After the filter views: the limit is for what the user's statement makes.
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limits.value_bytes)
        auth = install_read_only_authorizer(conn)
    except BaseException:
        conn.close()
        raise
    return GuardedReader(conn, auth, timeout_s, limits, chosen)


def run_query(
    path: str | os.PathLike[str],
    sql: str,
    *,
    event_filter: EventFilter | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    params: Sequence[Any] | dict[str, Any] = (),
    limits: ResultLimits | None = None,
) -> tuple[GuardedReader, QueryResult]:
    """Open ``path`` and run ``sql``; the caller closes the reader after consuming the rows."""
    reader = open_reader(path, event_filter=event_filter, timeout_s=timeout_s, limits=limits)
    try:
        return reader, reader.query(sql, params)
    except GpuscopeError:
        reader.close()
        raise
