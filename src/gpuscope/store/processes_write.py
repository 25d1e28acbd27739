"""Write what is known about the traced processes: who they are, their execs, cgroups and NCCL communicators.

Identity rows are small and few (one per process, cgroup or communicator),
so they are typed values here; the SQL that stores them lives nowhere else.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

_PROCESS_COLUMNS = (
    "session_id, pid, comm, cmdline, exe, cgroup_id, cgroup_path, first_seen_ns, cgroup_v1_id, rank, local_rank, "
    "world_size, launcher, slurm_job_id, slurm_step_id"
)
_PROCESS_VALUES = "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_INSERT_PROCESS = f"INSERT OR IGNORE INTO processes({_PROCESS_COLUMNS}) {_PROCESS_VALUES}"
_REPLACE_PROCESS = f"INSERT OR REPLACE INTO processes({_PROCESS_COLUMNS}) {_PROCESS_VALUES}"
_SET_CMDLINE = (
    "INSERT INTO processes(session_id, pid, cmdline, first_seen_ns) VALUES (?, ?, ?, ?) "
    "ON CONFLICT(session_id, pid) DO UPDATE SET cmdline = excluded.cmdline"
)
_SET_RANKS = (
    "INSERT INTO processes(session_id, pid, first_seen_ns, rank, local_rank, world_size, launcher, "
    "slurm_job_id, slurm_step_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(session_id, pid) DO UPDATE "
    "SET rank = excluded.rank, local_rank = excluded.local_rank, world_size = excluded.world_size, "
    "launcher = excluded.launcher, slurm_job_id = excluded.slurm_job_id, slurm_step_id = excluded.slurm_step_id"
)
_INSERT_EXEC = "INSERT INTO execs(session_id, ts_ns, pid, tid, argv) VALUES (?, ?, ?, ?, ?)"
_INSERT_CGROUP = (
    "INSERT OR IGNORE INTO cgroups(cgroup_id, hierarchy, path, container_id, runtime, pod_uid, pod_name, "
    "pod_namespace, slurm_job_id, slurm_step_id, ecs_task_id, first_seen_ns) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_NCCL_COMM = (
    "INSERT OR IGNORE INTO nccl_comms(session_id, pid, comm_handle, comm_hash, rank, nranks, ts_ns) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)


class Ranks(Protocol):
    """A process's place in a distributed job, from its environment (``agent.identity.RankInfo`` is one)."""

    @property
    def launcher(self) -> str | None: ...
    @property
    def rank(self) -> int | None: ...
    @property
    def local_rank(self) -> int | None: ...
    @property
    def world_size(self) -> int | None: ...
    @property
    def slurm_job_id(self) -> str | None: ...
    @property
    def slurm_step_id(self) -> str | None: ...


class Cgroup(Protocol):
    """A cgroup and the container, pod or job it stands for (``agent.identity.CgroupInfo`` is one)."""

    @property
    def cgroup_id(self) -> int: ...
    @property
    def hierarchy(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def container_id(self) -> str | None: ...
    @property
    def runtime(self) -> str | None: ...
    @property
    def pod_uid(self) -> str | None: ...
    @property
    def pod_name(self) -> str | None: ...
    @property
    def pod_namespace(self) -> str | None: ...
    @property
    def slurm_job_id(self) -> str | None: ...
    @property
    def slurm_step_id(self) -> str | None: ...
    @property
    def ecs_task_id(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class ProcessRow:
    """One ``processes`` row; what is not known stays None (NULL).

    ``cgroup_id`` is the v2 cgroup, ``cgroup_v1_id`` the v1 memory cgroup.
    """

    pid: int
    first_seen_ns: int
    comm: str | None = None
    cmdline: str | None = None
    exe: str | None = None
    cgroup_id: int | None = None
    cgroup_path: str | None = None
    cgroup_v1_id: int | None = None
    ranks: Ranks | None = None

    def _params(self, session_id: int) -> tuple[object, ...]:
        r = self.ranks
        return (
            session_id,
            self.pid,
            self.comm,
            self.cmdline,
            self.exe,
            self.cgroup_id,
            self.cgroup_path,
            self.first_seen_ns,
            self.cgroup_v1_id,
            *(
                (r.rank, r.local_rank, r.world_size, r.launcher, r.slurm_job_id, r.slurm_step_id)
                if r is not None
                else (None,) * 6
            ),
        )


class NcclComm(NamedTuple):
    """A communicator a process joined: its handle, the hash NCCL logs it by, its rank and size."""

    pid: int
    comm_handle: int
    comm_hash: int
    rank: int
    nranks: int
    ts_ns: int


def insert_process(conn: sqlite3.Connection, session_id: int, process: ProcessRow, *, replace: bool = False) -> None:
    """Store a process of the session; an existing row is kept, or replaced when ``replace``."""
    conn.execute(_REPLACE_PROCESS if replace else _INSERT_PROCESS, process._params(session_id))


def insert_processes(
    conn: sqlite3.Connection, session_id: int, processes: Iterable[ProcessRow], *, replace: bool = False
) -> None:
    """Store several processes of the session, like ``insert_process``."""
    conn.executemany(_REPLACE_PROCESS if replace else _INSERT_PROCESS, [p._params(session_id) for p in processes])


def set_process_cmdline(conn: sqlite3.Connection, session_id: int, pid: int, cmdline: str, first_seen_ns: int) -> None:
    """Set a process's command line, creating its row (first seen at ``first_seen_ns``) if there is none."""
    conn.execute(_SET_CMDLINE, (session_id, pid, cmdline, first_seen_ns))


def set_process_ranks(conn: sqlite3.Connection, session_id: int, pid: int, ranks: Ranks, first_seen_ns: int) -> None:
    """Set a process's rank and job identity, creating its row (first seen at ``first_seen_ns``) if there is none."""
    conn.execute(
        _SET_RANKS,
        (
            session_id,
            pid,
            first_seen_ns,
            ranks.rank,
            ranks.local_rank,
            ranks.world_size,
            ranks.launcher,
            ranks.slurm_job_id,
            ranks.slurm_step_id,
        ),
    )


def insert_exec(conn: sqlite3.Connection, session_id: int, *, ts_ns: int, pid: int, tid: int, argv: str) -> None:
    """Store that thread ``tid`` of ``pid`` exec'd ``argv`` (its arguments joined by spaces) at ``ts_ns``."""
    conn.execute(_INSERT_EXEC, (session_id, ts_ns, pid, tid, argv))


def insert_cgroup(conn: sqlite3.Connection, cgroup: Cgroup, first_seen_ns: int) -> None:
    """Store a cgroup unless its (id, hierarchy) is stored already."""
    c = cgroup
    conn.execute(
        _INSERT_CGROUP,
        (
            c.cgroup_id,
            c.hierarchy,
            c.path,
            c.container_id,
            c.runtime,
            c.pod_uid,
            c.pod_name,
            c.pod_namespace,
            c.slurm_job_id,
            c.slurm_step_id,
            c.ecs_task_id,
            first_seen_ns,
        ),
    )


def insert_nccl_comms(conn: sqlite3.Connection, session_id: int, comms: Iterable[NcclComm]) -> None:
    """Store the communicators processes of the session joined; one seen before is kept."""
    conn.executemany(_INSERT_NCCL_COMM, [(session_id, *c) for c in comms])
