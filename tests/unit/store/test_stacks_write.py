"""Call stacks: each distinct stack stored once, one link per call."""

from __future__ import annotations

import sqlite3

import numpy as np

from gpuscope.store.stacks_write import insert_event_stack_block, insert_event_stacks, insert_stacks

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


def test_a_block_of_links_is_stored_whole_and_a_call_already_linked_keeps_its_stack(
    conn: sqlite3.Connection, session_id: int
) -> None:
    # given one call linked already, and a block of 150 links (two bulk statements and a rest) that repeats it
    insert_event_stacks(conn, [(session_id, 41, 42, 1_000, 99)])
    block = np.array([(session_id, 41, 42, 1_000 * (i + 1), 17 + i % 3) for i in range(150)], dtype=np.int64)

    insert_event_stack_block(conn, block)

    # then every call has one link, the earlier one unchanged
    rows = conn.execute("SELECT session_id, pid, tid, ts_ns, stack_hash FROM event_stacks ORDER BY ts_ns").fetchall()
    assert rows == [(session_id, 41, 42, 1_000, 99)] + [tuple(r) for r in block[1:].tolist()]
