"""Is a recording as gpuscope wrote it? Its schema, and the values every reader does arithmetic with.

SQLite keeps whatever it is given: a view dropped or replaced by hand, a
table rebuilt without its NOT NULL constraints, text or a blob in an
INTEGER column, a time at the very end of the 64-bit range. Readers are
written against the schema of ``gpuscope.store.schema`` and add times and
durations together, so such a file would fail deep inside a command. It is
refused on open instead, in one line that names what differs.

The schema check compares the file with the schema its own version had
(``PRAGMA user_version``): every table present (its columns, their types
and NOT NULL) and every view (its SQL) must be as gpuscope made it, and the
tables of the first schema must be there; a later table may be missing
(readers look for those, as in older files); indexes, and objects a user
added, are left alone.

The value check keeps times, durations and ids within ``VALUE_LIMIT_NS``, so
that the sum or difference of two never leaves the 64-bit range SQLite and
numpy compute in. The small tables (sessions, findings, drops) are read
whole; the ``ts_ns``, ``duration_ns``, ``pid`` and ``tid`` of every event
only where the caller can afford a scan (a file that also gets the full
integrity check): measured on a 2-CPU VM, opening a closed recording of a
million events (34 MB) takes 0.63 s with the scan, 0.42 s without.
"""

from __future__ import annotations

import functools
import sqlite3

from gpuscope.config import MAX_NODE_NAME
from gpuscope.store.schema import MIGRATIONS

VALUE_LIMIT_NS = 2**62
"""Times, durations and ids a recording holds lie within ±2^62 (±146 years in ns)."""

CHANGED_REMEDY = (
    "read the original recording (this copy was changed after gpuscope wrote it); "
    "`sqlite3 FILE` still opens it as it is"
)

_Columns = tuple[tuple[str, str, int], ...]  # (name, declared type, not null)

# The tables of the first schema, which every reader needs; a later table may be absent (as in older files).
_CORE_TABLES = frozenset({"sessions", "sources", "ops", "comms", "processes", "event_log"})


@functools.cache
def expected_schema(version: int) -> tuple[dict[str, _Columns], dict[str, str]]:
    """The tables (their columns) and views (their SQL, whitespace collapsed) of schema ``version``."""
    conn = sqlite3.connect(":memory:")
    try:
        for migration in MIGRATIONS:
            if migration.version <= version:
                conn.executescript(migration.sql)
        return _schema_of(conn)
    finally:
        conn.close()


def _schema_of(conn: sqlite3.Connection) -> tuple[dict[str, _Columns], dict[str, str]]:
    tables: dict[str, _Columns] = {}
    views: dict[str, str] = {}
    for kind, name, sql in conn.execute("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite%'"):
        if kind == "table":
            tables[name] = _columns(conn, name)
        elif kind == "view":
            views[name] = _normal(sql)
    return tables, views


def _columns(conn: sqlite3.Connection, table: str) -> _Columns:
    quoted = '"' + table.replace('"', '""') + '"'
    return tuple((str(r[1]), str(r[2]).upper(), int(r[3])) for r in conn.execute(f"PRAGMA table_info({quoted})"))


def _normal(sql: object) -> str:
    return " ".join(str(sql or "").split()).rstrip(";").strip()


def schema_problem(conn: sqlite3.Connection, version: int) -> str | None:
    """What in the ``main`` schema of ``conn`` differs from gpuscope's schema ``version`` (one line), or None.

    Version 0 is no schema of gpuscope's: each migration sets ``user_version``
    in the transaction that makes its tables, so tables at version 0 (an
    ``event_log`` made by hand, the version reset) were not made by gpuscope.
    """
    if version < 1:
        return "its schema version (PRAGMA user_version) is 0: its tables were not made by gpuscope"
    tables, views = expected_schema(version)
    found = {
        (str(kind), str(name)): sql
        for kind, name, sql in conn.execute("SELECT type, name, sql FROM sqlite_master WHERE type != 'trigger'")
    }
    for name, columns in tables.items():
        if ("table", name) not in found:
            if name in _CORE_TABLES:
                return f"table {name} is missing"
            continue  # readers look for the later tables before they read one, as they do in older files

        have = {c[0]: c for c in _columns(conn, name)}
        for column in columns:
            if column[0] not in have:
                return f"column {name}.{column[0]} is missing"
            if have[column[0]] != column:
                was = "NOT NULL" if column[2] else "nullable"
                return f"column {name}.{column[0]} is no longer {column[1]} {was}"
    for name, sql in views.items():
        if ("view", name) not in found:
            return f"view {name} is missing"
        if _normal(found[("view", name)]) != sql:
            return f"view {name} was replaced"
    return None


# Columns read as numbers, by table: always for the small tables, with ``scan`` for the events.
_SMALL_TABLES = {
    "sessions": (
        "started_wall_ns",
        "started_mono_ns",
        "stopped_wall_ns",
        "stopped_mono_ns",
        "committed_wall_ns",
        "committed_mono_ns",
        "agent_pid",
        "events_recorded",
        "events_dropped",
    ),
    "findings": ("window_start_ns", "window_end_ns", "lost_ns", "created_at_ns"),
    "drop_log": ("bucket_ns", "dropped"),
}
_EVENTS = ("ts_ns", "duration_ns", "pid", "tid")

MAX_NAME_CHARS = 256
"""The longest process name a recording holds (the kernel's are 15 bytes; an imported one may be longer)."""
MAX_OP_NAME_CHARS = 128
MAX_TEXT_CHARS = 4 << 20
MAX_PATH_CHARS = 16 << 10
# Names the views join onto every event (``events``: node, comm, op and its source) or onto every process: one
# crafted long value is copied into every row a command reads. A 4 MB node made `merge` take 150 s and 15 GB;
# a 10 MB comm made `export` take a minute and write 230 MB. gpuscope never writes them longer than this.
_NAME_LIMITS = (
    ("sessions", "node", MAX_NODE_NAME),
    ("comms", "comm", MAX_NAME_CHARS),
    ("processes", "comm", MAX_NAME_CHARS),
    ("ops", "name", MAX_OP_NAME_CHARS),
    ("ops", "source", MAX_OP_NAME_CHARS),
    ("ops", "kind", MAX_OP_NAME_CHARS),
    ("sources", "name", MAX_OP_NAME_CHARS),
    # Read once per process or session, never per event, but whole: bounded too. A command line is at most the
    # kernel's ARG_MAX (2 MiB with the usual 8 MiB stack) and a path PATH_MAX; the session's documents (its
    # argv, options, targets, libraries, drops) are gpuscope's own, kilobytes.
    ("processes", "cmdline", MAX_TEXT_CHARS),
    ("processes", "exe", MAX_PATH_CHARS),
    ("processes", "cgroup_path", MAX_PATH_CHARS),
    ("sessions", "argv", MAX_TEXT_CHARS),
    ("sessions", "flags", MAX_TEXT_CHARS),
    ("sessions", "targets", MAX_TEXT_CHARS),
    ("sessions", "libraries", MAX_TEXT_CHARS),
    ("sessions", "drops", MAX_TEXT_CHARS),
)


def value_problem(conn: sqlite3.Connection, *, scan: bool) -> str | None:
    """The first time, duration or id of ``conn``'s recording out of range or not an integer (one line), or None.

    Call it on a recording whose schema passed ``schema_problem`` (so a NOT
    NULL column holds no NULL). ``scan`` also reads every event (see the
    module's note on the cost).
    """
    tables = {**_SMALL_TABLES, **({"event_log": _EVENTS} if scan else {})}
    for table, wanted in tables.items():
        present = {c[0] for c in _columns(conn, table)}
        names = [c for c in wanted if c in present]  # an older schema lacks some
        if not names:
            continue
        # NOT BETWEEN holds for text and blobs too (they sort above every number); NULL passes (nullable columns).
        where = " OR ".join(f"{c} NOT BETWEEN -{VALUE_LIMIT_NS} AND {VALUE_LIMIT_NS}" for c in names)
        row = conn.execute(f"SELECT rowid, {', '.join(names)} FROM {table} WHERE {where} LIMIT 1").fetchone()
        if row is not None:
            bad = [(c, v) for c, v in zip(names, row[1:], strict=True) if v is not None and not _in_range(v)]
            column, value = bad[0] if bad else (names[0], row[1])
            return f"{table} row {row[0]}: {column} is {_shown(value)}"
    return None


def name_problem(conn: sqlite3.Connection) -> str | None:
    """The first name (node, process, op) of ``conn``'s recording longer than gpuscope writes (one line), or None.

    Read from the small tables only: a bounded cost on open, whatever the file holds.
    """
    for table, column, limit in _NAME_LIMITS:
        if column not in {c[0] for c in _columns(conn, table)}:
            continue
        size = f"length({column})"  # characters of text, bytes of a blob
        row = conn.execute(f"SELECT rowid, {size} FROM {table} WHERE {size} > ? LIMIT 1", (limit,)).fetchone()
        if row is not None:
            return f"{table} row {row[0]}: {column} is {row[1]:,} characters long (gpuscope writes at most {limit:,})"
    return None


def _in_range(value: object) -> bool:
    return type(value) is int and -VALUE_LIMIT_NS <= value <= VALUE_LIMIT_NS


def _shown(value: object) -> str:
    if isinstance(value, int):
        return f"{value}, beyond ±2^62"
    if value is None:
        return "NULL"
    text = repr(value)
    return f"{text[:40]}{'…' if len(text) > 40 else ''} ({type(value).__name__}), not an integer"
