"""Run user SQL on a guarded, read-only connection: filters, refusals, time limit."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuscope.errors import GpuscopeError
from gpuscope.query.filters import EventFilter, apply_filter
from gpuscope.query.guard import (
    QueryRefusedError,
    ReadOnlyAuthorizer,
    install_read_only_authorizer,
    time_limit,
    translate_error,
)
from gpuscope.recording import open_recording

DEFAULT_TIMEOUT_S = 5.0


@dataclass
class GuardedReader:
    """A read-only connection with optional event filters and a write-refusing authorizer.

    Use ``query()`` for user SQL. ``conn`` is exposed for trusted, internal
    reads that still go through the authorizer (and so cannot write either).
    """

    conn: sqlite3.Connection
    auth: ReadOnlyAuthorizer
    timeout_s: float = DEFAULT_TIMEOUT_S
    _closed: bool = field(default=False, repr=False)

    def query(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> QueryResult:
        """Prepare ``sql`` and return its columns and a row iterator, both under the time limit.

        Raises QueryRefusedError (anything but a read, several statements),
        QueryTimeoutError (the limit passed while running or fetching),
        QuerySyntaxError (anything else SQLite rejects).
        """
        sql = one_statement(sql)
        self.auth.reset()
        # One deadline for running the statement and fetching its rows.
        deadline = time.monotonic() + self.timeout_s
        cursor = self.conn.cursor()
        try:
            with time_limit(self.conn, self.timeout_s, deadline=deadline):
                cursor.execute(sql, params)
        except sqlite3.Error as exc:
            raise translate_error(exc, auth=self.auth, timeout_s=self.timeout_s) from None
        columns = [d[0] for d in cursor.description or ()]
        return QueryResult(columns, self._rows(cursor, deadline))

    def _rows(self, cursor: sqlite3.Cursor, deadline: float) -> Iterator[tuple[Any, ...]]:
        try:
            with time_limit(self.conn, self.timeout_s, deadline=deadline):
                while True:
                    chunk = cursor.fetchmany(512)
                    if not chunk:
                        return
                    yield from chunk
        except sqlite3.Error as exc:
            raise translate_error(exc, auth=self.auth, timeout_s=self.timeout_s) from None

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
    """
    text = sql.strip()
    for i, ch in enumerate(text):
        if ch == ";" and sqlite3.complete_statement(text[: i + 1]):
            if _without_comments(text[i + 1 :]):
                raise QueryRefusedError("refused: one statement at a time")
            return text[:i]
    return sql


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
    path: str | os.PathLike[str], *, event_filter: EventFilter | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
) -> GuardedReader:
    """Open ``path`` read-only for user SQL: filter views first, then the authorizer.

    Raises DatabaseError / SchemaTooNewError from ``open_recording``.
    """
    conn = open_recording(path)
    try:
        if event_filter is not None:
            with time_limit(conn, max(timeout_s, 30.0) if timeout_s > 0 else 0):
                apply_filter(conn, event_filter)
        auth = install_read_only_authorizer(conn)
    except BaseException:
        conn.close()
        raise
    return GuardedReader(conn, auth, timeout_s)


def run_query(
    path: str | os.PathLike[str],
    sql: str,
    *,
    event_filter: EventFilter | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    params: Sequence[Any] | dict[str, Any] = (),
) -> tuple[GuardedReader, QueryResult]:
    """Open ``path`` and run ``sql``; the caller closes the reader after consuming the rows."""
    reader = open_reader(path, event_filter=event_filter, timeout_s=timeout_s)
    try:
        return reader, reader.query(sql, params)
    except GpuscopeError:
        reader.close()
        raise
