"""Read who a process is (ranks, containers, communicators), and the newest events for the live view.

Every function takes a read-only connection and returns plain rows; what
they mean (containers, communicators, the live window) is the analysis's.
The attribution tables (``cgroups``, ``nccl_comms``, ``processes.rank``)
came with migration 3: an older recording reads as having none.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from gpuscope.store.blocks import BLOCK_COLUMNS

# The columns ``event_rows_after`` reads after the rowid, in this order: the analysis frame's, as blocks hold them.
LIVE_EVENT_COLUMNS = BLOCK_COLUMNS
_LIVE_SELECT = f"SELECT rowid, {', '.join(LIVE_EVENT_COLUMNS)} FROM event_log WHERE rowid > ? ORDER BY rowid LIMIT ?"


@dataclass(frozen=True, slots=True)
class CgroupRow:
    """One cgroup the recorder resolved: its path and the container, pod or job it belongs to."""

    cgroup_id: int
    path: str
    container_id: str | None
    runtime: str | None
    pod_name: str | None
    pod_namespace: str | None
    slurm_job_id: str | None


@dataclass(frozen=True, slots=True)
class CommunicatorRow:
    """One ``ncclCommInitRank`` a process made: its handle, the unique-id hash, its rank and the size."""

    pid: int
    comm_handle: int
    comm_hash: int
    rank: int
    nranks: int


def process_ranks(conn: sqlite3.Connection) -> dict[int, int]:
    """Read each pid's launcher rank (RANK and equivalents); a later session's entry wins."""
    try:
        rows = conn.execute("SELECT pid, rank FROM processes WHERE rank IS NOT NULL ORDER BY session_id").fetchall()
    except sqlite3.OperationalError:
        return {}  # no rank column before migration 3
    return {int(pid): int(rank) for pid, rank in rows}


def cgroup_rows(conn: sqlite3.Connection) -> list[CgroupRow]:
    """Read every recorded cgroup, the v2 hierarchy's last (it wins where a v1 hierarchy names the same id)."""
    try:
        rows = conn.execute(
            "SELECT cgroup_id, path, container_id, runtime, pod_name, pod_namespace, slurm_job_id FROM cgroups "
            "ORDER BY hierarchy = 'v2'"
        ).fetchall()
    except sqlite3.OperationalError:
        return []
    return [
        CgroupRow(int(cg), str(path or ""), cid, runtime, pod, ns, job) for cg, path, cid, runtime, pod, ns, job in rows
    ]


def communicator_rows(conn: sqlite3.Connection) -> list[CommunicatorRow]:
    """Read every recorded NCCL communicator membership (``ncclCommInitRank``), oldest first."""
    try:
        rows = conn.execute(
            "SELECT pid, comm_handle, comm_hash, rank, nranks FROM nccl_comms ORDER BY ts_ns"
        ).fetchall()
    except sqlite3.OperationalError:
        return []
    return [CommunicatorRow(int(pid), int(h), int(cid), int(r), int(n)) for pid, h, cid, r, n in rows]


def newest_event_rowid(conn: sqlite3.Connection) -> int | None:
    """Return the rowid of the newest stored event (None when there is none)."""
    (newest,) = conn.execute("SELECT max(rowid) FROM event_log").fetchone()
    return None if newest is None else int(newest)


def event_rows_after(conn: sqlite3.Connection, rowid: int, limit: int) -> list[tuple[int, ...]]:
    """Read at most ``limit`` events stored after ``rowid``, oldest first: rowid, then ``LIVE_EVENT_COLUMNS``.

    By rowid: the read needs no index and touches only the rows it returns.
    """
    rows: list[tuple[int, ...]] = conn.execute(_LIVE_SELECT, (rowid, limit)).fetchall()
    return rows


__all__ = [
    "LIVE_EVENT_COLUMNS",
    "CgroupRow",
    "CommunicatorRow",
    "cgroup_rows",
    "communicator_rows",
    "event_rows_after",
    "newest_event_rowid",
    "process_ranks",
]
