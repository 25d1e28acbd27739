"""Properties of the SQL guard over generated statements: any text reads, or is refused in one documented way.

Whatever the text (keywords of every statement SQLite knows, comments,
semicolons, quotes, NUL bytes, lone surrogates), ``GuardedReader.query``
either returns rows or raises one of the query errors, and the recording is
byte-for-byte what it was, with nothing beside it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from gpuscope.query.guard import QueryRefusedError, QuerySyntaxError, QueryTimeoutError, QueryTooLargeError
from gpuscope.query.guarded import ResultLimits, one_statement, open_reader
from tests.unit.properties import quick
from tests.unit.query.builder import build_db

DOCUMENTED = (QueryRefusedError, QuerySyntaxError, QueryTimeoutError, QueryTooLargeError)

FRAGMENTS = [
    "SELECT", "*", "count(*)", "FROM", "events", "event_log", "sessions", "sqlite_master", "WHERE", "ts_ns", ">",
    "1", "0", "'x'", "x'00ff'", "NULL", ",", "(", ")", ";", "--", "/*", "*/", "\n", "ORDER BY", "LIMIT 3", "UNION ALL",
    "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c)", "SELECT n FROM c", "VALUES (1)",
    "randomblob(100)", "zeroblob(1000000000)", "printf('%.*c', 100000000, 'x')", "load_extension('x')",
    "readfile('/etc/passwd')", "pragma_table_info('events')", "json_each('[1,2]')", "sqlite_version()",
    "INSERT INTO sessions(uuid) VALUES ('x')", "UPDATE event_log SET ts_ns = 0", "DELETE FROM event_log",
    "DROP TABLE event_log", "DROP VIEW events", "CREATE TABLE t(a)", "CREATE TEMP TABLE t(a)",
    "CREATE TEMP VIEW v AS SELECT 1", "CREATE TRIGGER tr AFTER INSERT ON sessions BEGIN SELECT 1; END",
    "ATTACH DATABASE 'other.db' AS o", "DETACH o", "PRAGMA writable_schema = 1", "PRAGMA user_version = 7",
    "PRAGMA journal_mode = DELETE", "PRAGMA query_only = 0", "PRAGMA table_info(events)", "VACUUM",
    "VACUUM INTO 'copy.db'", "REINDEX", "ANALYZE", "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT s", "RELEASE s",
    "REPLACE INTO comms VALUES (9, 'x')", "ALTER TABLE comms ADD COLUMN y", "EXPLAIN", "\x00", "\ud800",
]  # fmt: skip
# Statements SQLite accepts, reading what is there and what costs time or memory, with tails that try to sneak
# a second statement in.
reads = st.builds(
    "SELECT {} FROM {} {}".format,
    st.sampled_from(
        ["*", "count(*)", "randomblob(100)", "zeroblob(1000000000)", "hex(randomblob(600000))",
         "printf('%.*c', 100000000, 'x')", "readfile('/etc/passwd')", "load_extension('x')", "sqlite_version()",
         "ts_ns + duration_ns", "max(ts_ns) * 9223372036854775807", "typeof(x'00')"]
    ),
    st.sampled_from(
        ["events", "event_log", "sessions", "sqlite_master", "pragma_table_info('events')", "json_each('[1,2]')",
         "(WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT n FROM c)",
         "events a, events b, events c", "pragma_database_list"]
    ),
    st.sampled_from(
        ["", "LIMIT 5", "; SELECT 1", "; DROP TABLE event_log", "-- x", "; -- why", "/* unclosed", ";;",
         "WHERE ts_ns > 0 ORDER BY ts_ns DESC LIMIT 2", "; PRAGMA writable_schema = 1", "\x00"]
    ),
)  # fmt: skip
statements = st.one_of(
    reads,
    reads.map(lambda sql: "WITH x AS (SELECT 1) " + sql),
    st.lists(st.sampled_from(FRAGMENTS), max_size=8).map(" ".join),
    st.text(max_size=60),
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=6)), max_size=6).map(" ".join),
)


def _state(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_any_statement_either_reads_or_is_refused_and_the_recording_never_changes(tmp_path: Path) -> None:
    # given a recording, opened once as `gpuscope query` opens it (a short limit, so a runaway query ends quickly)
    folder = tmp_path / "rec"
    folder.mkdir()
    db = build_db(folder / "run.db", n=30)
    before = _state(folder)
    cwd = os.getcwd()
    os.chdir(tmp_path)  # where ATTACH or VACUUM INTO would create a file, were they let through
    reader = open_reader(db, timeout_s=0.2, limits=ResultLimits(value_bytes=1 << 20, result_bytes=8 << 20))

    @quick(250)
    @given(statements)
    @example("\x00 SELECT 1; SELECT 2")  # a NUL once reached SQLite's statement scanner (ValueError)
    def check(sql: str) -> None:
        try:
            result = reader.query(sql)
            rows = list(result.rows)
        except DOCUMENTED as exc:
            assert "\n" not in str(exc) and exc.remedy
            return
        assert isinstance(rows, list)

    try:
        # when any text is run
        check()
    finally:
        reader.close()
        os.chdir(cwd)
    # then the recording is unchanged and nothing was created
    assert _state(folder) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec"]


@quick(400)
@given(statements)
@example("SELECT 1;\x00")
def test_one_statement_keeps_a_prefix_of_the_text_or_refuses_a_second_statement(sql: str) -> None:
    try:
        first = one_statement(sql)
    except (QueryRefusedError, QuerySyntaxError):
        return
    assert sql.strip().startswith(first.strip()) or first == sql
