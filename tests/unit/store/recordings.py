"""Recordings for the store read tests: events through the analysis builder, plus the rows it does not write."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from gpuscope.bpf.wire import EVENT_DTYPE
from gpuscope.recording import open_recording
from gpuscope.store.aggregates import Aggregator, insert_aggregates
from gpuscope.store.connect import connect_writer
from tests.unit.analysis.builder import Events

# The session ``Events.to_db`` writes: id 1, node "n", wall clock 1700000000 s at monotonic 0.
FIRST_SESSION = 1
FIRST_SESSION_WALL_NS = 1_700_000_000_000_000_000


def without_blocks(path: Path) -> Path:
    """A copy of a recording beside it, without its column blocks: explain reads every row of it as a row."""
    copy = path.with_name(path.stem + "-rows.db")
    shutil.copy(path, copy)
    conn = sqlite3.connect(copy)
    conn.execute("DELETE FROM event_blocks")
    conn.commit()
    conn.close()
    return copy


def record(ev: Events, path: Path) -> Path:
    """Write ``ev`` as one session (``FIRST_SESSION``), one row per event in the order added."""
    return ev.to_db(path)


@contextmanager
def reading(path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection to ``path``, opened as every reader opens one."""
    conn = open_recording(path)
    try:
        yield conn
    finally:
        conn.close()


def add_session(path: Path, node: str, wall_ns: int, mono_ns: int, flags: dict[str, object] | None = None) -> int:
    """Append a session row; returns its id."""
    conn = connect_writer(path)
    try:
        cur = conn.execute(
            "INSERT INTO sessions(uuid, node, started_wall_ns, started_mono_ns, flags) VALUES (?, ?, ?, ?, ?)",
            (f"u-{node}-{wall_ns}", node, wall_ns, mono_ns, None if flags is None else json.dumps(flags)),
        )
        return int(cur.lastrowid or 0)
    finally:
        conn.close()


def add_process(path: Path, session_id: int, pid: int, comm: str | None, cgroup_id: int | None = None) -> None:
    conn = connect_writer(path)
    try:
        conn.execute(
            "INSERT INTO processes(session_id, pid, comm, cgroup_id, first_seen_ns) VALUES (?, ?, ?, ?, 0)",
            (session_id, pid, comm, cgroup_id),
        )
    finally:
        conn.close()


def add_events(path: Path, session_id: int, ev: Events, comm_id: int | None = 1) -> None:
    """Append the rows of ``ev`` to ``session_id`` (``Events.to_db`` only writes the first session)."""
    conn = connect_writer(path)
    try:
        conn.executemany(
            "INSERT INTO event_log(session_id, ts_ns, duration_ns, pid, tid, comm_id, cgroup_id, op_id, flags, ret, "
            "bytes, handle, stream, arg0, arg1) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, 0, ?, ?, ?, ?, ?)",
            [(session_id, r[0], r[1], r[2], r[3], comm_id, r[5], r[4], r[6], r[7], r[8], r[9], r[10]) for r in ev.rows],
        )
    finally:
        conn.close()


def add_aggregates(path: Path, session_id: int, ev: Events) -> None:
    """Count every event of ``ev`` into ``event_aggregates`` of ``session_id``, as a trace does."""
    batch = np.zeros(len(ev.rows), dtype=EVENT_DTYPE)
    cols = np.array(ev.rows, dtype=np.int64).reshape(-1, 11)
    for j, name in ((0, "ts_ns"), (1, "duration_ns"), (2, "pid"), (3, "tid"), (4, "op"), (6, "bytes")):
        batch[name] = cols[:, j]
    agg = Aggregator(session_id)
    agg.add(batch, np.ones(len(batch), dtype=bool))
    conn = connect_writer(path)
    try:
        insert_aggregates(conn, agg.take())
    finally:
        conn.close()


def add_comm(path: Path, comm_id: int, comm: str) -> None:
    conn = connect_writer(path)
    try:
        conn.execute("INSERT INTO comms(id, comm) VALUES (?, ?)", (comm_id, comm))
    finally:
        conn.close()


def add_stack(path: Path, stack_hash: int, call_site: str | None, frames: list[dict[str, object]]) -> None:
    conn = connect_writer(path)
    try:
        conn.execute(
            "INSERT INTO stacks(hash, frames, call_site, native_depth, python_depth, marker) VALUES (?, ?, ?, 1, 0, NULL)",
            (stack_hash, json.dumps(frames), call_site),
        )
    finally:
        conn.close()


def tie_stack(path: Path, session_id: int, pid: int, tid: int, ts_ns: int, stack_hash: int) -> None:
    """Give the call of ``tid`` at ``ts_ns`` the stack ``stack_hash``."""
    conn = connect_writer(path)
    try:
        conn.execute("INSERT INTO event_stacks VALUES (?, ?, ?, ?, ?)", (session_id, pid, tid, ts_ns, stack_hash))
    finally:
        conn.close()
