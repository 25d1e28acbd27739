"""Reads of the attribution tables and of the newest events, on recordings written by the tests."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuscope.store.attribution import (
    LIVE_EVENT_COLUMNS,
    CgroupRow,
    CommunicatorRow,
    cgroup_rows,
    communicator_rows,
    event_rows_after,
    newest_event_rowid,
    process_ranks,
)
from gpuscope.store.connect import connect_probe, connect_reader, connect_writer

CID = "c" * 64


def _insert_event(conn: sqlite3.Connection, ts_ns: int, pid: int) -> None:
    conn.execute(
        "INSERT INTO event_log(session_id, ts_ns, duration_ns, pid, tid, comm_id, cgroup_id, op_id, flags, ret, "
        "bytes, handle, stream, arg0, arg1) VALUES (1, ?, 5, ?, ?, 1, 7, 1, 0, 0, 64, 2, 3, 4, 6)",
        (ts_ns, pid, pid + 1),
    )


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    """A recording of two sessions: ranks, two cgroups, a communicator per rank, three events."""
    path = tmp_path / "rec.db"
    conn = connect_writer(path)
    for uuid in ("s1", "s2"):
        conn.execute(
            "INSERT INTO sessions(uuid, node, started_wall_ns, started_mono_ns) VALUES (?, 'n', 1000000, 0)", (uuid,)
        )
    conn.execute("INSERT INTO comms(id, comm) VALUES (1, 'train')")
    conn.executemany(
        "INSERT INTO processes(session_id, pid, comm, first_seen_ns, rank) VALUES (?, ?, 'train', 0, ?)",
        [(1, 100, 5), (2, 100, 0), (2, 101, 1), (2, 102, None)],
    )
    conn.executemany(
        "INSERT INTO cgroups(cgroup_id, hierarchy, path, container_id, runtime, pod_name, pod_namespace, "
        "slurm_job_id, first_seen_ns) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0)",
        [
            (7, "v2", f"/system.slice/docker-{CID}.scope", CID, "docker", None, None, None),
            (7, "v1:memory", "/slurm/uid_0/job_9", None, None, None, None, "9"),
            (8, "v2", "/kubepods/pod-x", None, "kubernetes", "web", "prod", None),
        ],
    )
    conn.executemany(
        "INSERT INTO nccl_comms(session_id, pid, comm_handle, comm_hash, rank, nranks, ts_ns) "
        "VALUES (2, ?, ?, 4242, ?, 2, ?)",
        [(101, 0xB1, 1, 20), (100, 0xB0, 0, 10)],
    )
    for ts in (10, 20, 30):
        _insert_event(conn, ts, 100)
    conn.close()
    return path


@pytest.fixture
def reader(recording: Path) -> Iterator[sqlite3.Connection]:
    conn = connect_reader(recording)
    yield conn
    conn.close()


def test_a_later_sessions_rank_wins_and_processes_without_one_are_left_out(reader: sqlite3.Connection) -> None:
    assert process_ranks(reader) == {100: 0, 101: 1}


def test_cgroups_are_read_with_the_v2_hierarchy_last_so_it_wins_a_shared_id(reader: sqlite3.Connection) -> None:
    rows = cgroup_rows(reader)
    # then every row is read, and the last row naming cgroup 7 is its v2 entry (the docker container)
    assert len(rows) == 3
    last_for_7 = [r for r in rows if r.cgroup_id == 7][-1]
    assert last_for_7 == CgroupRow(7, f"/system.slice/docker-{CID}.scope", CID, "docker", None, None, None)
    assert CgroupRow(8, "/kubepods/pod-x", None, "kubernetes", "web", "prod", None) in rows


def test_communicator_memberships_are_read_oldest_first(reader: sqlite3.Connection) -> None:
    assert communicator_rows(reader) == [
        CommunicatorRow(pid=100, comm_handle=0xB0, comm_hash=4242, rank=0, nranks=2),
        CommunicatorRow(pid=101, comm_handle=0xB1, comm_hash=4242, rank=1, nranks=2),
    ]


def test_a_recording_from_before_the_attribution_tables_reads_as_having_none(tmp_path: Path) -> None:
    # given a file with the first schema's processes table: no rank column, no cgroups or nccl_comms
    path = tmp_path / "old.db"
    old = sqlite3.connect(path)
    old.execute("CREATE TABLE processes (session_id INTEGER, pid INTEGER, comm TEXT, cgroup_id INTEGER)")
    old.execute("INSERT INTO processes VALUES (1, 100, 'train', 7)")
    old.commit()
    old.close()
    conn = connect_probe(path)
    try:
        # when / then
        assert (process_ranks(conn), cgroup_rows(conn), communicator_rows(conn)) == ({}, [], [])
    finally:
        conn.close()


def test_events_after_a_rowid_are_read_oldest_first_and_at_most_the_limit(reader: sqlite3.Connection) -> None:
    newest = newest_event_rowid(reader)
    assert newest is not None
    rows = event_rows_after(reader, newest - 2, limit=1)
    # then the first event after the rowid, as rowid followed by the live columns
    assert len(rows) == 1 and len(rows[0]) == 1 + len(LIVE_EVENT_COLUMNS)
    assert dict(zip(("rowid", *LIVE_EVENT_COLUMNS), rows[0], strict=True)) == {
        "rowid": newest - 1,
        "ts_ns": 20,
        "duration_ns": 5,
        "pid": 100,
        "tid": 101,
        "op_id": 1,
        "cgroup_id": 7,
        "bytes": 64,
        "handle": 2,
        "stream": 3,
        "arg0": 4,
        "arg1": 6,
    }
    assert event_rows_after(reader, newest, limit=10) == []


def test_a_recording_without_events_has_no_newest_event(tmp_path: Path) -> None:
    connect_writer(tmp_path / "empty.db").close()
    conn = connect_reader(tmp_path / "empty.db")
    try:
        assert newest_event_rowid(conn) is None
    finally:
        conn.close()
