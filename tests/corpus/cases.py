"""The bad files: each case makes one from the valid recordings, in a folder of its own.

A case is refused (``must_refuse``: every command must exit 1, 2 or 3 with
one ``error:`` line and a ``fix:`` line) or tolerated (a command may also
succeed, with a correct result). Cases whose reading could block or never
end (a FIFO, /dev/zero), or that need another user or another home, run in
a subprocess with a time limit (``isolated``); the others run in-process.

Add a case by appending to ``CASES``: every command in ``commands.COMMANDS``
then reads it.
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuscope.store.schema import SCHEMA_VERSION
from tests.corpus.recordings import STACK_HASH, Sources

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


class Isolation:
    """How a case is run: in this process, or in a subprocess (as root, or as the user nobody)."""

    IN_PROCESS = "in-process"
    SUBPROCESS = "subprocess"
    NOBODY = "as nobody"


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[Path, Sources], Path]
    """Write the bad file into the given (empty) folder; returns the path the commands are given."""
    must_refuse: bool
    isolation: str = Isolation.IN_PROCESS
    must_read: bool = False
    """Every command must read it (exit 0): its oddity is one a reader is expected to cope with."""
    reference: bool = False
    """Made from a reference-system file (``import`` converts it; a gpuscope recording it refuses)."""
    home: str = "normal"
    """For ``NOBODY`` runs, ``unwritable``: a home nobody may not write, TMPDIR writable. (A run with nowhere to
    write cannot be made here: Python's tempfile falls back to /tmp whatever TMPDIR says.)"""


# -- helpers ------------------------------------------------------------------------------------------


def _copy(source: Path, folder: Path, name: str | None = None) -> Path:
    out = folder / (name or source.name)
    shutil.copyfile(source, out)
    return out


def _sql(path: Path, *statements: str) -> Path:
    """Run ``statements`` on ``path`` with a plain connection (as another tool would), leaving no -wal behind."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for statement in statements:
            conn.execute(statement)
    finally:
        conn.close()
    return path


def _loosen(path: Path, table: str) -> Path:
    """Drop the NOT NULL constraints of ``table`` from the file's schema (a file written by another tool)."""
    _sql(
        path,
        "PRAGMA writable_schema=ON",
        f"UPDATE sqlite_master SET sql = replace(sql, 'NOT NULL', '') WHERE type = 'table' AND name = '{table}'",
        "PRAGMA writable_schema=OFF",
    )
    return path


def _truncate(source: Path, folder: Path, size: Callable[[int], int]) -> Path:
    out = _copy(source, folder)
    data = out.read_bytes()
    out.write_bytes(data[: size(len(data))])
    return out


def _scribble(source: Path, folder: Path) -> Path:
    """Overwrite stretches of the pages after the schema with random bytes (a disk or copy gone bad)."""
    out = _copy(source, folder)
    data = bytearray(out.read_bytes())
    rnd = random.Random(20)
    for page in range(2, len(data) // 4096, 3):
        at = page * 4096 + rnd.randrange(0, 3000)
        data[at : at + 512] = rnd.randbytes(512)
    out.write_bytes(bytes(data))
    return out


def _write(folder: Path, name: str, data: bytes) -> Path:
    out = folder / name
    out.write_bytes(data)
    return out


def _events(source: Path, folder: Path, *statements: str, loosen: str | None = None) -> Path:
    out = _copy(source, folder)
    if loosen:
        _loosen(out, loosen)
    return _sql(out, *statements)


def _steady(*statements: str, loosen: str | None = None) -> Callable[[Path, Sources], Path]:
    return lambda folder, s: _events(s.steady, folder, *statements, loosen=loosen)


def _training(*statements: str, loosen: str | None = None) -> Callable[[Path, Sources], Path]:
    return lambda folder, s: _events(s.training, folder, *statements, loosen=loosen)


def _ingero(*statements: str, loosen: str | None = None) -> Callable[[Path, Sources], Path]:
    return lambda folder, s: _events(s.ingero, folder, *statements, loosen=loosen)


def _beside(source: Path, folder: Path, suffix: str) -> Path:
    """A recording with random bytes where a killed writer leaves its ``-wal`` or ``-journal``."""
    out = _copy(source, folder)
    Path(f"{out}{suffix}").write_bytes(random.Random(3).randbytes(8192))
    return out


def _other_sqlite(folder: Path, _s: Sources) -> Path:
    out = folder / "other.db"
    return _sql(out, "CREATE TABLE accounts(id INTEGER PRIMARY KEY, name TEXT)", "INSERT INTO accounts VALUES (1, 'a')")


def _made_up_event_log(folder: Path, _s: Sources) -> Path:
    """gpuscope's table names with columns of another tool's choosing, and no version."""
    return _sql(
        folder / "made-up.db",
        "CREATE TABLE event_log(id INTEGER PRIMARY KEY, what TEXT)",
        "CREATE TABLE sessions(id INTEGER PRIMARY KEY, name TEXT)",
        "INSERT INTO event_log VALUES (1, 'x')",
    )


def _utf16(folder: Path, s: Sources) -> Path:
    """The valid recording rewritten by another tool that stores text as UTF-16 (SQLite cannot re-encode a file)."""
    out = folder / "utf16.db"
    source = sqlite3.connect(s.steady)
    target = sqlite3.connect(out, isolation_level=None)
    try:
        target.execute("PRAGMA encoding='UTF-16le'")
        target.execute("BEGIN")
        for statement in source.iterdump():
            if statement not in ("BEGIN TRANSACTION;", "COMMIT;"):
                target.execute(statement)
        target.execute("COMMIT")
        target.execute(f"PRAGMA user_version={source.execute('PRAGMA user_version').fetchone()[0]}")
    finally:
        source.close()
        target.close()
    return out


def _empty_sqlite(folder: Path, _s: Sources) -> Path:
    """A valid SQLite file with no table at all (a page of header, not zero bytes)."""
    return _sql(folder / "empty-schema.db", "PRAGMA user_version=1")


def _fifo(folder: Path, _s: Sources) -> Path:
    out = folder / "fifo.db"
    os.mkfifo(out)
    return out


def _dev_zero(folder: Path, _s: Sources) -> Path:
    out = folder / "zero.db"
    out.symlink_to("/dev/zero")
    return out


def _symlink_loop(folder: Path, _s: Sources) -> Path:
    (folder / "b.db").symlink_to(folder / "a.db")
    (folder / "a.db").symlink_to(folder / "b.db")
    return folder / "a.db"


def _directory(folder: Path, _s: Sources) -> Path:
    out = folder / "dir.db"
    out.mkdir()
    return out


def _unreadable(folder: Path, s: Sources) -> Path:
    out = _copy(s.steady, folder)
    out.chmod(0)
    return out


def _readable_ingero(folder: Path, s: Sources) -> Path:
    return _copy(s.ingero, folder)


def _rows(source: Path, folder: Path, rows: int) -> Path:
    """A gpuscope recording whose event_log keeps only its first ``rows`` rows (0: an empty recording)."""
    return _events(source, folder, f"DELETE FROM event_log WHERE id > {rows}", "DELETE FROM event_aggregates")


# An array nested 200,000 deep, as SQL: Python's json parses it recursively (RecursionError).
_DEEP_JSON = "printf('%.200000c', '[') || printf('%.200000c', ']')"

# The row ``k`` places after the first of Ingero's events table (its rowids do not start at 1).
_NTH = "(SELECT rowid FROM events ORDER BY rowid LIMIT 1 OFFSET {})"

CASES: list[Case] = [
    # Files that are not a recording at all.
    Case("zero-length", lambda f, s: _write(f, "zero-length.db", b""), True),
    Case("text-file", lambda f, s: _write(f, "notes.db", b"ts_ns,duration_ns\n1,2\nnot a database\n"), True),
    Case("random-bytes", lambda f, s: _write(f, "random.db", random.Random(1).randbytes(16384)), True),
    Case(
        "sqlite-header-then-random",
        lambda f, s: _write(f, "header.db", b"SQLite format 3\x00" + random.Random(2).randbytes(8176)),
        True,
    ),
    Case("other-sqlite-database", _other_sqlite, True),
    Case("sqlite-without-tables", _empty_sqlite, True),
    Case("directory", _directory, True),
    Case("symlink-loop", _symlink_loop, True),
    Case("missing-file", lambda f, s: f / "missing.db", True),
    Case("fifo", _fifo, True, Isolation.SUBPROCESS),
    Case("dev-zero", _dev_zero, True, Isolation.SUBPROCESS),
    Case("unreadable-file", _unreadable, True, Isolation.NOBODY),
    # Recordings cut short or damaged.
    Case("truncated-in-header", lambda f, s: _truncate(s.steady, f, lambda n: 60), True),
    Case("truncated-to-first-page", lambda f, s: _truncate(s.steady, f, lambda n: 4096), True),
    Case("truncated-to-half", lambda f, s: _truncate(s.steady, f, lambda n: n // 2), True),
    Case("truncated-last-page", lambda f, s: _truncate(s.steady, f, lambda n: n - 4096), True),
    Case("truncated-mid-page", lambda f, s: _truncate(s.steady, f, lambda n: n - 1000), True),
    Case("pages-scribbled", lambda f, s: _scribble(s.steady, f), True),
    Case("reference-truncated-to-half", lambda f, s: _truncate(s.ingero, f, lambda n: n // 2), True, reference=True),
    Case("reference-pages-scribbled", lambda f, s: _scribble(s.ingero, f), True, reference=True),
    # A schema this gpuscope does not read.
    Case("future-schema-version", _steady(f"PRAGMA user_version={SCHEMA_VERSION + 1}"), True),
    Case("event-log-missing", _steady("ALTER TABLE event_log RENAME TO event_log_old"), True),
    Case(
        "half-a-reference-file",
        _ingero("DROP INDEX idx_events_source_op_stack", "ALTER TABLE events DROP COLUMN op"),
        True,
        reference=True,
    ),
    # Schema changed by hand: views and tables.
    Case(
        "views-dropped",
        _steady(
            "DROP VIEW events_aligned",
            "DROP VIEW event_call_stacks",
            "DROP VIEW cuda_calls",
            "DROP VIEW sched_switches",
            "DROP VIEW events",
        ),
        False,
    ),
    Case("events-view-replaced", _steady("DROP VIEW events", "CREATE VIEW events AS SELECT 1 AS x"), False),
    Case("sessions-dropped", _steady("DROP TABLE sessions"), False),
    Case("ops-emptied", _steady("DELETE FROM ops"), False),
    # Values out of range.
    Case("ts-at-int64-max", _steady(f"UPDATE event_log SET ts_ns = {INT64_MAX} WHERE id = 3"), False),
    Case("ts-at-int64-min", _steady(f"UPDATE event_log SET ts_ns = {INT64_MIN} WHERE id = 3"), False),
    Case("ts-negative", _steady("UPDATE event_log SET ts_ns = -5 - id"), False),
    Case("duration-at-int64-max", _steady(f"UPDATE event_log SET duration_ns = {INT64_MAX} WHERE id % 2 = 0"), False),
    Case("duration-negative", _steady("UPDATE event_log SET duration_ns = -1000 WHERE id % 3 = 0"), False),
    Case("durations-huge", _steady("UPDATE event_log SET duration_ns = 4000000000000000000"), False),
    Case("session-start-at-int64-max", _steady(f"UPDATE sessions SET started_wall_ns = {INT64_MAX}"), False),
    Case(
        "session-stop-before-start",
        _training(f"UPDATE sessions SET stopped_mono_ns = {INT64_MIN}, stopped_wall_ns = -1"),
        False,
    ),
    Case("pid-out-of-range", _steady(f"UPDATE event_log SET pid = {INT64_MAX}, tid = -1 WHERE id < 10"), False),
    Case("unknown-op", _steady("UPDATE event_log SET op_id = 65000 WHERE id % 2 = 1"), False),
    Case("bytes-huge", _training(f"UPDATE event_log SET bytes = {INT64_MAX}, arg0 = {INT64_MIN}"), False),
    Case("ts-real-huge", _steady("UPDATE event_log SET ts_ns = 1.5e300 WHERE id = 4"), False),
    # Wrong types in integer columns.
    Case("text-in-ts", _steady("UPDATE event_log SET ts_ns = 'yesterday' WHERE id = 5"), False),
    Case("blob-in-duration", _steady("UPDATE event_log SET duration_ns = x'deadbeef' WHERE id = 6"), False),
    Case("text-in-pid", _training("UPDATE event_log SET pid = 'init', tid = x'00' WHERE id < 4"), False),
    Case("text-in-op", _steady("UPDATE event_log SET op_id = 'cudaMalloc' WHERE id = 7"), False),
    Case(
        "text-in-session-start", _steady("UPDATE sessions SET started_mono_ns = 'boot', started_wall_ns = 'x'"), False
    ),
    Case("stack-frames-not-json", _steady("UPDATE stacks SET frames = '{not json'"), False),
    Case("stack-hash-as-text", _steady("UPDATE event_log SET stack_hash = 'abc' WHERE id < 5"), False),
    # NULLs where the schema says NOT NULL (written by a tool that did not enforce it).
    Case(
        "nulls-in-events",
        _steady(
            "UPDATE event_log SET ts_ns = NULL WHERE id = 2",
            "UPDATE event_log SET duration_ns = NULL WHERE id = 3",
            "UPDATE event_log SET pid = NULL, tid = NULL WHERE id = 4",
            "UPDATE event_log SET op_id = NULL WHERE id = 5",
            "UPDATE event_log SET session_id = NULL WHERE id = 6",
            loosen="event_log",
        ),
        False,
    ),
    Case(
        "nulls-in-training-events",
        _training(
            "UPDATE event_log SET ts_ns = NULL, duration_ns = NULL, cgroup_id = NULL, arg0 = NULL, handle = NULL "
            "WHERE id % 5 = 0",
            loosen="event_log",
        ),
        False,
    ),
    Case(
        "nulls-in-sessions",
        _steady("UPDATE sessions SET started_wall_ns = NULL, started_mono_ns = NULL, node = NULL", loosen="sessions"),
        False,
    ),
    Case("nulls-in-stacks", _steady("UPDATE stacks SET frames = NULL", loosen="stacks"), False),
    # Names longer than gpuscope writes: the views copy them into every row a command reads (a 4 MB node made
    # merge take 150 s and 15 GB; a 10 MB comm made export take a minute and write 230 MB).
    Case("node-of-4-mb", _steady("UPDATE sessions SET node = printf('%.4000000c', 'n')"), True),
    Case(
        "cmdline-of-10-mb",
        _steady(
            "INSERT OR REPLACE INTO processes(session_id, pid, comm, cmdline, first_seen_ns) "
            "SELECT session_id, pid, 'x', printf('%.10000000c', 'x'), 1 FROM event_log LIMIT 1"
        ),
        True,
    ),
    Case("session-argv-of-10-mb", _steady("UPDATE sessions SET argv = printf('[\"%.10000000c\"]', 'x')"), True),
    Case(
        "comm-of-10-mb",
        _steady("UPDATE comms SET comm = printf('%.10000000c', 'x') WHERE id = (SELECT min(comm_id) FROM event_log)"),
        True,
    ),
    Case(
        "op-name-of-1-mb",
        _steady("UPDATE ops SET name = printf('%.1000000c', 'o') WHERE id = (SELECT min(op_id) FROM event_log)"),
        True,
    ),
    # Side tables with values gpuscope never writes.
    Case("session-flags-not-json", _training("UPDATE sessions SET flags = '{bad', drops = '[1,'"), False),
    # JSON nested deeper than Python's json parses (RecursionError, was "internal error" and HTTP 500).
    Case(
        "session-json-nested-200000-deep",
        _training(
            f"UPDATE sessions SET flags = {_DEEP_JSON}, drops = {_DEEP_JSON}, targets = {_DEEP_JSON}",
            f"UPDATE findings SET symptom = {_DEEP_JSON}",
            f"UPDATE stacks SET frames = {_DEEP_JSON}",
        ),
        False,
    ),
    Case(
        "session-counts-as-text",
        _training("UPDATE sessions SET agent_pid = 'abc', events_recorded = 'many', events_dropped = x'00'"),
        False,
    ),
    Case("session-lists-not-json", _training("UPDATE sessions SET targets = 'x', libraries = '{', argv = '7'"), False),
    Case("findings-not-json", _training("UPDATE findings SET symptom = '{', causes = 'null'"), False),
    Case(
        "findings-wrong-types",
        _training("UPDATE findings SET window_start_ns = 'a', lost_ns = x'00', severity = 'apocalyptic'"),
        False,
    ),
    Case("histogram-garbage", _training("UPDATE event_aggregates SET histogram = randomblob(37)"), False),
    Case(
        "aggregates-out-of-range",
        _training(f"UPDATE event_aggregates SET count = -1, sum_duration_ns = {INT64_MAX}, max_duration_ns = 'x'"),
        False,
    ),
    Case("aggregate-bucket-text", _training("UPDATE event_aggregates SET bucket_ns = 'x' WHERE rowid = 1"), False),
    Case("processes-garbage", _training("UPDATE processes SET comm = x'ff00', first_seen_ns = 'x'"), False),
    Case("comm-control-characters", _steady("UPDATE comms SET comm = char(27) || '[2J' || char(0) || 'x'"), False),
    Case(
        "comm-bidi-and-bell",
        _training("UPDATE processes SET comm = char(7) || char(8238) || 'gnp.exe' || char(155) || '2J'"),
        False,
    ),
    Case("comm-not-utf8", _steady("UPDATE comms SET comm = CAST(x'74726169ff6e' AS TEXT)"), False),
    Case("drop-log-garbage", _training("INSERT INTO drop_log VALUES (1, 'x', 'cuda', -5), (1, 7, x'00', 'y')"), False),
    Case("stack-link-garbage", _steady(f"INSERT INTO event_stacks VALUES (1, 42, 43, 'x', {STACK_HASH})"), False),
    # Its version or indexes changed, or a killed writer's files beside it.
    # A version of 0 says nothing about which schema the tables follow: refused, not read unchecked.
    Case("schema-version-zero", _steady("PRAGMA user_version=0"), True),
    Case("schema-version-zero-made-up-event-log", _made_up_event_log, True),
    Case("text-stored-as-utf16", _utf16, False),
    Case("schema-version-rewound", _steady("PRAGMA user_version=5"), False),
    Case("index-dropped", _training("DROP INDEX findings_session"), False),
    Case("garbage-wal-beside", lambda f, s: _beside(s.steady, f, "-wal"), False),
    Case("garbage-journal-beside", lambda f, s: _beside(s.steady, f, "-journal"), False),
    # Little or nothing in it.
    Case("no-events", lambda f, s: _rows(s.steady, f, 0), False, must_read=True),
    Case("one-event", lambda f, s: _rows(s.training, f, 1), False, must_read=True),
    # Reference-system files with every quirk.
    Case("reference-without-tid", _ingero("ALTER TABLE events DROP COLUMN tid"), False, reference=True, must_read=True),
    Case(
        "reference-ts-at-int64-max",
        _ingero(f"UPDATE events SET timestamp = {INT64_MAX} WHERE rowid = {_NTH.format(3)}"),
        False,
        reference=True,
    ),
    Case(
        "reference-ts-negative",
        _ingero("UPDATE events SET timestamp = -timestamp WHERE rowid % 4 = 0"),
        False,
        reference=True,
    ),
    Case(
        "reference-duration-at-int64-max", _ingero(f"UPDATE events SET duration = {INT64_MAX}"), False, reference=True
    ),
    Case(
        "reference-text-in-timestamp",
        _ingero(f"UPDATE events SET timestamp = 'noon' WHERE rowid = {_NTH.format(2)}"),
        False,
        reference=True,
    ),
    Case(
        "reference-blob-in-op",
        _ingero(f"UPDATE events SET op = x'ff', arg0 = 'big' WHERE rowid = {_NTH.format(5)}"),
        False,
        reference=True,
    ),
    Case(
        "reference-nulls",
        _ingero(
            f"UPDATE events SET timestamp = NULL WHERE rowid = {_NTH.format(2)}",
            f"UPDATE events SET pid = NULL, tid = NULL, duration = NULL WHERE rowid = {_NTH.format(3)}",
            f"UPDATE events SET source = NULL, op = NULL WHERE rowid = {_NTH.format(4)}",
            loosen="events",
        ),
        False,
        reference=True,
    ),
    Case(
        "reference-session-text",
        _ingero("UPDATE sessions SET started_at = 'x', stopped_at = x'00'"),
        False,
        reference=True,
    ),
    Case(
        "reference-stacks-not-json",
        _ingero("UPDATE stack_traces SET ips = '[0x', frames = '{'"),
        False,
        reference=True,
    ),
    Case("reference-no-events", _ingero("DELETE FROM events"), False, reference=True),
    Case(
        "reference-side-tables-garbage",
        _ingero(
            "UPDATE process_names SET seen_at = 'x', name = x'ff'",
            "UPDATE causal_chains SET detected_at = 'x', recommendations = '{', timeline = 'x', tail_ratio = 'y'",
            "UPDATE system_snapshots SET cpu_pct = 'x', load_avg = x'00'",
            "UPDATE ops SET name = x'00'",
        ),
        False,
        reference=True,
    ),
    Case("reference-snapshot-time-text", _ingero("UPDATE system_snapshots SET timestamp = 'y'"), False, reference=True),
    Case(
        "reference-sessions-without-stop",
        _ingero("ALTER TABLE sessions DROP COLUMN stopped_at", "ALTER TABLE sessions DROP COLUMN pid_filter"),
        False,
        reference=True,
    ),
    Case("reference-node-with-colon", _ingero("UPDATE events SET node = 'a:b'"), False, reference=True),
    Case(
        "reference-some-rows-without-node",
        _ingero("UPDATE events SET node = '' WHERE rowid % 2 = 0"),
        False,
        reference=True,
    ),
    Case(
        "reference-unwritable-home",
        _readable_ingero,
        False,
        Isolation.NOBODY,
        home="unwritable",
        reference=True,
        must_read=True,
    ),
]
