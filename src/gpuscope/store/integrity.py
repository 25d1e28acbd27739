"""Is a recording damaged? A full ``PRAGMA quick_check`` where affordable, a bounded check above that.

What the checks cost, measured on a 2-CPU VM whose disk reads about 50 MB/s
(recordings made by ``bench/explain_bench.py``'s generator, every row stored):

    file        quick_check warm   quick_check cold   bounded check (cold)
    51 MB       0.26-0.36 s        1.1 s              < 0.05 s
    523 MB      2.5-2.9 s          11 s               < 0.05 s
    2.1 GB      9.7-13 s           43 s               < 0.05 s

quick_check reads every page, so it grows with the file. Readers run it on
closed recordings up to ``READER_FULL_CHECK_BYTES`` (a few tenths of a second
warm) and the bounded check above; a writer, which would spread damage into
new pages and keep a trace running on a broken file for hours, runs it up to
the larger ``WRITER_FULL_CHECK_BYTES`` (a few seconds, once per trace). A live
recording is checked only boundedly: a writer checked it when it opened it,
and the live view reopens it every second.

The bounded check runs quick_check on every table (and its indexes) that
holds at most ``SMALL_TABLE_ROWS`` rows (sessions, aggregates, processes,
findings: everything but the per-event tables), reads the first rows of the
large tables and walks the b-tree of each large rowid table from its root to
``PROBES`` leaves spread over its key range, and compares the page count with
the file size (a truncated file). Damage in an unvisited page of a large
event table is not found before a query reads it; SQLite reports it then.
"""

from __future__ import annotations

import sqlite3

READER_FULL_CHECK_BYTES = 64 << 20
WRITER_FULL_CHECK_BYTES = 512 << 20
SMALL_TABLE_ROWS = 50_000
PROBES = 64

_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26


# The fix lines for a damaged recording: for one about to be appended to, and for one being read.
WRITER_DAMAGE_REMEDY = (
    "record into a new file with --db NEW.db; salvage the rest with `sqlite3 OLD.db .recover | sqlite3 NEW.db`"
)
READER_DAMAGE_REMEDY = "salvage what is left with `sqlite3 FILE .recover | sqlite3 NEW.db` and read NEW.db"


def first_problem(conn: sqlite3.Connection, *, full: bool, file_size: int | None = None) -> str | None:
    """The first problem found in the ``main`` database of ``conn`` (one line), or None when it looks sound.

    ``full`` runs ``PRAGMA quick_check`` over every page; otherwise the bounded
    check. ``file_size`` (the size of a closed file, not of a live one whose
    pages may still be in its ``-wal``) adds the truncation check.
    """
    try:
        if file_size is not None and (short := _truncation(conn, file_size)):
            return short
        if full:
            return _quick_check(conn, None)
        return _bounded_check(conn)
    except sqlite3.DatabaseError as exc:
        if is_damage(exc):
            return f"{'quick_check' if full else 'bounded check'}: {exc}"
        raise


def is_damage(exc: sqlite3.Error) -> bool:
    """Whether SQLite raised ``exc`` because the file is corrupt (not busy, locked or refused)."""
    return (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in (_SQLITE_CORRUPT, _SQLITE_NOTADB)


def _truncation(conn: sqlite3.Connection, file_size: int) -> str | None:
    pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
    page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    if file_size < pages * page_size:
        return f"truncated: {file_size} bytes where its header counts {pages} pages of {page_size}"
    return None


def _quick_check(conn: sqlite3.Connection, table: str | None) -> str | None:
    sql = "PRAGMA quick_check" if table is None else f"PRAGMA quick_check({_quoted(table)})"
    rows = [str(r[0]) for r in conn.execute(sql).fetchall()]
    if rows == ["ok"]:
        return None
    # The first row may start with "*** in database main ***" and span lines.
    text = " ".join(" ".join(rows).replace("*** in database main ***", "").split())
    return "quick_check: " + (text[:200] or "no row")


def _bounded_check(conn: sqlite3.Connection) -> str | None:
    for name, rowid in _tables(conn):
        table = _quoted(name)
        (rows,) = conn.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM {table} LIMIT ?)", (SMALL_TABLE_ROWS + 1,)
        ).fetchone()
        if rows <= SMALL_TABLE_ROWS:
            if problem := _quick_check(conn, name):
                return problem
        elif rowid:
            # Two statements: only a lone min() or max() walks one edge of the b-tree instead of all of it.
            (lo,) = conn.execute(f"SELECT min(rowid) FROM {table}").fetchone()
            (hi,) = conn.execute(f"SELECT max(rowid) FROM {table}").fetchone()
            for k in range(PROBES + 1):
                conn.execute(
                    f"SELECT * FROM {table} WHERE rowid >= ? ORDER BY rowid LIMIT 1", (lo + (hi - lo) * k // PROBES,)
                ).fetchall()
    return None


def _tables(conn: sqlite3.Connection) -> list[tuple[str, bool]]:
    """(name, has a rowid) of every ordinary table."""
    out = []
    for name, sql in conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
    ):
        text = " ".join(str(sql or "").upper().split())
        if not text.startswith("CREATE VIRTUAL"):
            out.append((str(name), "WITHOUT ROWID" not in text))
    return out


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
