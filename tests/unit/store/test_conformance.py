"""Is a recording as gpuscope wrote it: the schema check of its version, and the values readers compute with."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gpuscope.store.conformance import schema_problem, value_problem
from gpuscope.store.schema import SCHEMA_VERSION
from tests.unit.query.builder import build_db


def test_tables_at_schema_version_zero_were_not_made_by_gpuscope(tmp_path: Path) -> None:
    # given a file with an event_log of its own making, at user_version 0 (as SQLite makes every file)
    conn = sqlite3.connect(tmp_path / "made-up.db")
    conn.execute("CREATE TABLE event_log (id INTEGER PRIMARY KEY, ts_ns INTEGER)")
    # when / then
    assert schema_problem(conn, 0) == (
        "its schema version (PRAGMA user_version) is 0: its tables were not made by gpuscope"
    )
    conn.close()


def test_a_recording_gpuscope_wrote_has_no_schema_or_value_problem(tmp_path: Path) -> None:
    conn = sqlite3.connect(build_db(tmp_path / "a.db", n=10, agent_pid=4242))
    assert schema_problem(conn, SCHEMA_VERSION) is None and value_problem(conn, scan=True) is None
    conn.close()


@pytest.mark.parametrize(
    ("column", "value", "shown"),
    [
        ("agent_pid", "abc", "'abc' (str), not an integer"),
        ("events_recorded", "many", "'many' (str), not an integer"),
        ("events_dropped", b"\x00", "b'\\x00' (bytes), not an integer"),
        ("agent_pid", 2**63 - 1, f"{2**63 - 1}, beyond ±2^62"),
    ],
)
def test_a_sessions_pid_or_event_count_that_is_not_an_integer_is_named_with_its_row(
    tmp_path: Path, column: str, value: object, shown: str
) -> None:
    conn = sqlite3.connect(build_db(tmp_path / "a.db", n=10, agent_pid=4242))
    conn.execute(f"UPDATE sessions SET {column} = ?", (value,))
    assert value_problem(conn, scan=False) == f"sessions row 1: {column} is {shown}"
    conn.close()
