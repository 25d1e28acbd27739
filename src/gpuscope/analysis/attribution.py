"""Who a process is, for rules that name ranks, communicators and containers.

The attribution tables (``processes``, ``nccl_comms``, ``cgroups``) are not
part of the event frame. A caller that has the database loads them with
``load_attribution`` and makes them visible to the rules for the duration of
an analysis with ``using_attribution`` (or sets ``ctx.attribution``). Rules
read them through ``attribution_of(ctx)``, which always adds what the frame
itself holds: the rank, size and unique-id hash of every communicator whose
``ncclCommInitRank`` lies in the window.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import numpy as np

from gpuscope.analysis.context import Context
from gpuscope.model.ops import Op
from gpuscope.recording import open_recording

_INIT_OPS = (int(Op.ncclCommInitRank), int(Op.ncclCommInitRankConfig))


@dataclass(frozen=True, slots=True)
class Container:
    """What a cgroup id identifies: a container, a pod, a job, or only a path."""

    cgroup_id: int
    path: str
    container_id: str | None = None
    runtime: str | None = None
    pod_name: str | None = None
    pod_namespace: str | None = None
    slurm_job_id: str | None = None

    def label(self) -> str:
        """A short human name: pod, then container, then job, then the cgroup path."""
        if self.pod_name:
            pod = f"pod {self.pod_namespace}/{self.pod_name}" if self.pod_namespace else f"pod {self.pod_name}"
            return pod + (f" container {self.container_id[:12]}" if self.container_id else "")
        if self.container_id:
            return f"{self.runtime or 'container'} container {self.container_id[:12]}"
        if self.slurm_job_id:
            return f"slurm job {self.slurm_job_id}"
        return f"cgroup {self.path or self.cgroup_id}"

    @property
    def is_container(self) -> bool:
        return bool(self.container_id or self.pod_name or self.slurm_job_id)


@dataclass(frozen=True, slots=True)
class Communicator:
    """One process's membership of an NCCL communicator."""

    comm_hash: int  # the same in every rank: a hash of the ncclUniqueId
    rank: int
    nranks: int


@dataclass(frozen=True, slots=True)
class Attribution:
    ranks: Mapping[int, int] = field(default_factory=dict)  # pid -> process rank (RANK and equivalents)
    containers: Mapping[int, Container] = field(default_factory=dict)  # cgroup id (v2 or v1) -> container
    communicators: Mapping[tuple[int, int], Communicator] = field(default_factory=dict)  # (pid, comm handle)

    def merged(self, other: Attribution) -> Attribution:
        """This attribution with ``other``'s entries added where this one has none."""
        return Attribution(
            {**other.ranks, **self.ranks},
            {**other.containers, **self.containers},
            {**other.communicators, **self.communicators},
        )

    def container(self, cgroup_id: int | None) -> Container | None:
        return self.containers.get(int(cgroup_id)) if cgroup_id else None


EMPTY = Attribution()
_CURRENT: ContextVar[Attribution | None] = ContextVar("gpuscope_attribution", default=None)


def load_attribution(conn: sqlite3.Connection) -> Attribution:
    """Read ranks, communicators and containers from a database (tables a database lacks are skipped)."""
    ranks: dict[int, int] = {}
    containers: dict[int, Container] = {}
    comms: dict[tuple[int, int], Communicator] = {}
    try:
        for pid, rank in conn.execute("SELECT pid, rank FROM processes WHERE rank IS NOT NULL ORDER BY session_id"):
            ranks[int(pid)] = int(rank)
    except sqlite3.OperationalError:
        pass  # a database from before migration 3
    try:
        rows = conn.execute(
            "SELECT cgroup_id, path, container_id, runtime, pod_name, pod_namespace, slurm_job_id FROM cgroups "
            "ORDER BY hierarchy DESC"  # v2 last: it wins where both name an id
        ).fetchall()
        for cg, path, cid, runtime, pod, ns, job in rows:
            containers[int(cg)] = Container(int(cg), str(path or ""), cid, runtime, pod, ns, job)
        for pid, handle, h, rank, nranks in conn.execute(
            "SELECT pid, comm_handle, comm_hash, rank, nranks FROM nccl_comms ORDER BY ts_ns"
        ):
            comms[(int(pid), int(handle))] = Communicator(int(h), int(rank), int(nranks))
    except sqlite3.OperationalError:
        pass
    return Attribution(ranks, containers, comms)


def load_attribution_db(path: str | os.PathLike[str]) -> Attribution:
    """``load_attribution`` through a read-only connection; EMPTY when the file cannot be read."""
    try:
        conn = open_recording(path)
    except Exception:
        return EMPTY
    try:
        return load_attribution(conn)
    except sqlite3.DatabaseError:
        return EMPTY
    finally:
        conn.close()


@contextmanager
def using_attribution(attribution: Attribution) -> Iterator[None]:
    """Make ``attribution`` visible to the rules evaluated inside the block (this thread/task only)."""
    token = _CURRENT.set(attribution)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def from_frame(ctx: Context) -> Attribution:
    """Communicators whose init call lies in the window: handle, hash (``stream``), rank, nranks."""
    f = ctx.frame
    i = np.flatnonzero(np.isin(f.op, np.array(_INIT_OPS, dtype=np.int64)))
    comms = {
        (int(f.pid[k]), int(f.handle[k])): Communicator(int(f.stream[k]), int(f.arg0[k]), int(f.arg1[k]))
        for k in i.tolist()
    }
    return Attribution(communicators=comms)


def attribution_of(ctx: Context) -> Attribution:
    """What is known about the window's processes: set on the context, in scope, and in the frame."""
    attached = getattr(ctx, "attribution", None)
    base = attached if isinstance(attached, Attribution) else (_CURRENT.get() or EMPTY)
    return base.merged(from_frame(ctx))
