"""Reads of the sessions table: where and when each trace ran, and its flags."""

from __future__ import annotations

import json
from pathlib import Path

from gpuscope.store.connect import connect_writer
from gpuscope.store.sessions_read import (
    ALL_SESSIONS,
    SessionClock,
    session_clocks,
    session_flag_docs,
    session_flags,
    session_states,
    session_wall_offsets,
    traced_roots,
)
from tests.unit.analysis.builder import Events

from .recordings import FIRST_SESSION, FIRST_SESSION_WALL_NS, add_session, reading, record

WALL_B = FIRST_SESSION_WALL_NS + 3_600_000_000_000
MONO_B = 42_000_000_000


def _two_sessions(tmp_path: Path) -> tuple[Path, int]:
    path = record(Events(), tmp_path / "rec.db")
    return path, add_session(path, "b", WALL_B, MONO_B, flags={"imported_from": "ingero"})


def test_session_clocks_give_each_sessions_node_and_start_times_by_id(tmp_path: Path) -> None:
    path, second = _two_sessions(tmp_path)
    with reading(path) as conn:
        assert session_clocks(conn) == [
            SessionClock(FIRST_SESSION, "n", FIRST_SESSION_WALL_NS, 0),
            SessionClock(second, "b", WALL_B, MONO_B),
        ]


def test_session_wall_offsets_turn_each_sessions_monotonic_time_into_wall_clock_time(tmp_path: Path) -> None:
    path, second = _two_sessions(tmp_path)
    with reading(path) as conn:
        assert session_wall_offsets(conn) == [(FIRST_SESSION, FIRST_SESSION_WALL_NS), (second, WALL_B - MONO_B)]


def test_session_flags_are_the_stored_json_text_or_none(tmp_path: Path) -> None:
    path, second = _two_sessions(tmp_path)
    with reading(path) as conn:
        flags = dict(session_flags(conn))
    assert flags[FIRST_SESSION] is None
    assert json.loads(flags[second] or "") == {"imported_from": "ingero"}


def test_the_all_sessions_statement_reads_every_column_of_every_session_oldest_first(tmp_path: Path) -> None:
    path, second = _two_sessions(tmp_path)
    with reading(path) as conn:
        cur = conn.execute(ALL_SESSIONS.sql, ALL_SESSIONS.params)
        columns = [d[0] for d in cur.description]
        rows = cur.fetchall()
    assert {"id", "node", "started_wall_ns", "flags"} <= set(columns)
    assert [r[columns.index("id")] for r in rows] == [FIRST_SESSION, second]


def test_session_flag_docs_parse_each_sessions_flags_and_read_none_or_garbage_as_empty(tmp_path: Path) -> None:
    path, second = _two_sessions(tmp_path)
    # and two sessions whose flags are JSON but not an object, and not JSON
    conn = connect_writer(path)
    try:
        for uuid, raw in (("c", "[1]"), ("d", "{")):
            conn.execute(
                "INSERT INTO sessions(uuid, node, started_wall_ns, started_mono_ns, flags) VALUES (?, 'n', 0, 0, ?)",
                (uuid, raw),
            )
    finally:
        conn.close()
    with reading(path) as conn:
        docs = session_flag_docs(conn)
    assert docs[FIRST_SESSION] == {} and docs[second] == {"imported_from": "ingero"}
    assert list(docs.values())[2:] == [{}, {}]


# Deeper than Python's json can parse (it recurses once per level): 200,000 levels raised RecursionError.
DEEP_JSON = "[" * 200_000 + "]" * 200_000


def test_json_nested_200000_deep_in_a_sessions_flags_targets_and_drops_reads_as_absent(tmp_path: Path) -> None:
    # given a session whose JSON columns are all arrays nested 200,000 deep (the session targeted pid 7)
    path, second = _two_sessions(tmp_path)
    conn = connect_writer(path)
    try:
        conn.execute("UPDATE sessions SET targets = '[7]' WHERE id = ?", (FIRST_SESSION,))
        conn.execute("UPDATE sessions SET flags = ?, targets = ?, drops = ? WHERE id = ?", (DEEP_JSON,) * 3 + (second,))
        conn.commit()
    finally:
        conn.close()
    # when
    with reading(path) as conn:
        flags, roots, states = session_flag_docs(conn), traced_roots(conn), session_states(conn)
    # then the session without readable JSON has none, and the other keeps its own
    assert flags[second] == {}
    assert roots == {FIRST_SESSION: frozenset({7}), second: None}
    assert [s.drops for s in states if s.session_id == second] == [{}]
