"""Process identity rows: processes, execs, cgroups and NCCL communicators."""

from __future__ import annotations

import sqlite3

from gpuscope.agent.identity import CgroupInfo, RankInfo
from gpuscope.store.processes_write import (
    NcclComm,
    ProcessRow,
    insert_cgroup,
    insert_exec,
    insert_nccl_comms,
    insert_process,
    insert_processes,
    set_process_cmdline,
    set_process_ranks,
)

RANKS = RankInfo(launcher="torchrun", rank=3, local_rank=1, world_size=8, slurm_job_id="77", slurm_step_id="0")
RANK_COLUMNS = {
    "rank": 3,
    "local_rank": 1,
    "world_size": 8,
    "launcher": "torchrun",
    "slurm_job_id": "77",
    "slurm_step_id": "0",
}
# A process row with nothing known but its first sighting.
UNKNOWN = dict.fromkeys(("comm", "cmdline", "exe", "cgroup_id", "cgroup_path", "cgroup_v1_id", *RANK_COLUMNS))


def _process(conn: sqlite3.Connection, session_id: int, pid: int) -> dict[str, object] | None:
    """The stored row of ``pid``, without its key."""
    conn.row_factory = sqlite3.Row
    row = conn.execute("SELECT * FROM processes WHERE session_id = ? AND pid = ?", (session_id, pid)).fetchone()
    if row is None:
        return None
    stored = dict(row)
    del stored["session_id"], stored["pid"]
    return stored


def test_an_inserted_process_reads_back_with_its_cgroups_and_ranks(conn: sqlite3.Connection, session_id: int) -> None:
    row = ProcessRow(
        41,
        1_000,
        comm="python",
        cmdline="python train.py",
        exe="/usr/bin/python3",
        cgroup_id=9,
        cgroup_path="/job.slice",
        cgroup_v1_id=11,
        ranks=RANKS,
    )

    insert_process(conn, session_id, row)

    assert _process(conn, session_id, 41) == {
        "comm": "python",
        "cmdline": "python train.py",
        "exe": "/usr/bin/python3",
        "cgroup_id": 9,
        "cgroup_path": "/job.slice",
        "first_seen_ns": 1_000,
        "cgroup_v1_id": 11,
        **RANK_COLUMNS,
    }


def test_what_is_not_known_of_a_process_is_stored_as_null(conn: sqlite3.Connection, session_id: int) -> None:
    insert_process(conn, session_id, ProcessRow(41, 1_000, comm="hog"))

    assert _process(conn, session_id, 41) == {**UNKNOWN, "comm": "hog", "first_seen_ns": 1_000}


def test_a_known_process_keeps_its_row_unless_replaced(conn: sqlite3.Connection, session_id: int) -> None:
    insert_process(conn, session_id, ProcessRow(41, 1_000, comm="bash"))

    insert_process(conn, session_id, ProcessRow(41, 2_000, comm="python"))
    kept = _process(conn, session_id, 41)
    insert_process(conn, session_id, ProcessRow(41, 3_000, comm="python"), replace=True)
    replaced = _process(conn, session_id, 41)

    assert kept == {**UNKNOWN, "comm": "bash", "first_seen_ns": 1_000}
    assert replaced == {**UNKNOWN, "comm": "python", "first_seen_ns": 3_000}


def test_several_processes_are_inserted_at_once(conn: sqlite3.Connection, session_id: int) -> None:
    insert_processes(conn, session_id, [ProcessRow(pid, 1_000, comm=f"hog{pid}") for pid in (51, 52, 53)])

    rows = conn.execute("SELECT pid, comm FROM processes WHERE session_id = ? ORDER BY pid", (session_id,)).fetchall()
    assert rows == [(51, "hog51"), (52, "hog52"), (53, "hog53")]


def test_a_cmdline_creates_the_row_of_a_process_not_seen_yet(conn: sqlite3.Connection, session_id: int) -> None:
    set_process_cmdline(conn, session_id, 41, "python train.py", 1_000)

    assert _process(conn, session_id, 41) == {**UNKNOWN, "cmdline": "python train.py", "first_seen_ns": 1_000}


def test_a_cmdline_changes_only_the_cmdline_of_a_known_process(conn: sqlite3.Connection, session_id: int) -> None:
    insert_process(conn, session_id, ProcessRow(41, 1_000, comm="bash", cmdline="bash run.sh", ranks=RANKS))

    set_process_cmdline(conn, session_id, 41, "python train.py", 2_000)

    assert _process(conn, session_id, 41) == {
        **UNKNOWN,
        "comm": "bash",
        "cmdline": "python train.py",
        "first_seen_ns": 1_000,
        **RANK_COLUMNS,
    }


def test_ranks_change_only_the_rank_columns_of_a_known_process(conn: sqlite3.Connection, session_id: int) -> None:
    insert_process(conn, session_id, ProcessRow(41, 1_000, comm="python", cmdline="python train.py"))

    set_process_ranks(conn, session_id, 41, RANKS, 2_000)

    assert _process(conn, session_id, 41) == {
        **UNKNOWN,
        "comm": "python",
        "cmdline": "python train.py",
        "first_seen_ns": 1_000,
        **RANK_COLUMNS,
    }


def test_ranks_create_the_row_of_a_process_already_gone(conn: sqlite3.Connection, session_id: int) -> None:
    set_process_ranks(conn, session_id, 41, RANKS, 2_000)

    assert _process(conn, session_id, 41) == {**UNKNOWN, "first_seen_ns": 2_000, **RANK_COLUMNS}


def test_an_exec_reads_back_with_its_thread_and_arguments(conn: sqlite3.Connection, session_id: int) -> None:
    insert_exec(conn, session_id, ts_ns=5_000, pid=41, tid=42, argv="python train.py")

    assert conn.execute("SELECT session_id, ts_ns, pid, tid, argv FROM execs").fetchall() == [
        (session_id, 5_000, 41, 42, "python train.py")
    ]


def test_a_cgroup_is_stored_once_per_id_and_hierarchy(conn: sqlite3.Connection) -> None:
    pod = CgroupInfo(9, "v2", "/kubepods/pod-1/ctr", "ctr", "containerd", "pod-1", "trainer", "ml", None, None, None)

    insert_cgroup(conn, pod, 1_000)
    insert_cgroup(conn, CgroupInfo(9, "v2", "/elsewhere", *[None] * 8), 2_000)
    insert_cgroup(conn, CgroupInfo(9, "v1:memory", "/v1", *[None] * 8), 3_000)

    rows = conn.execute("SELECT * FROM cgroups ORDER BY hierarchy DESC").fetchall()
    assert rows == [
        (9, "v2", "/kubepods/pod-1/ctr", "ctr", "containerd", "pod-1", "trainer", "ml", None, None, None, 1_000),
        (9, "v1:memory", "/v1", *[None] * 8, 3_000),
    ]


def test_a_communicator_is_stored_once_per_process_handle_and_time(conn: sqlite3.Connection, session_id: int) -> None:
    comm = NcclComm(pid=41, comm_handle=0x7F00, comm_hash=-5, rank=3, nranks=8, ts_ns=5_000)

    insert_nccl_comms(conn, session_id, [comm, comm._replace(rank=4)])
    insert_nccl_comms(conn, session_id, [comm._replace(ts_ns=6_000)])

    rows = conn.execute("SELECT * FROM nccl_comms ORDER BY ts_ns").fetchall()
    assert rows == [(session_id, 41, 0x7F00, -5, 3, 8, 5_000), (session_id, 41, 0x7F00, -5, 3, 8, 6_000)]
