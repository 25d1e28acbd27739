"""Call stacks: each distinct stack stored once, one link per call."""

from __future__ import annotations

import sqlite3

from gpuscope.store.stacks_write import insert_event_stacks, insert_stacks

FRAMES = '[{"fn":"forward","file":"train.py","line":142}]'


def test_a_stack_is_stored_once_by_its_hash(conn: sqlite3.Connection) -> None:
    insert_stacks(conn, [(17, FRAMES, "forward (train.py:142)", 3, 1, None)])

    insert_stacks(conn, [(17, "[]", None, 0, 0, "other"), (18, "[]", None, 2, 0, "no-python")])

    assert conn.execute("SELECT * FROM stacks ORDER BY hash").fetchall() == [
        (17, FRAMES, "forward (train.py:142)", 3, 1, None),
        (18, "[]", None, 2, 0, "no-python"),
    ]


def test_each_call_links_to_one_stack(conn: sqlite3.Connection, session_id: int) -> None:
    insert_event_stacks(conn, [(session_id, 41, 42, 5_000, 17), (session_id, 41, 42, 6_000, 18)])

    insert_event_stacks(conn, [(session_id, 41, 42, 5_000, 18)])

    rows = conn.execute("SELECT session_id, pid, tid, ts_ns, stack_hash FROM event_stacks ORDER BY ts_ns").fetchall()
    assert rows == [(session_id, 41, 42, 5_000, 17), (session_id, 41, 42, 6_000, 18)]
