"""Who a process is, for rules that name ranks, communicators and containers.

The attribution tables (``processes``, ``nccl_comms``, ``cgroups``) are not
part of the event frame. A caller that has the recording loads them with
``load_attribution`` and passes them to the analysis, which carries them in
its ``Context``. Rules read them through ``Context.window_attribution``, which adds
what the frame itself holds: the rank, size and unique-id hash of every
communicator whose ``ncclCommInitRank`` lies in the window.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from gpuscope.model.ops import Op
from gpuscope.store.attribution import cgroup_rows, communicator_rows, process_ranks

if TYPE_CHECKING:
    from gpuscope.analysis.frame import EventFrame

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


@dataclass(frozen=True, slots=True)
class Communicator:
    """One process's membership of an NCCL communicator."""

    comm_hash: int  # the same in every rank: a hash of the ncclUniqueId
    rank: int
    nranks: int


@dataclass(frozen=True, slots=True)
class Attribution:
    """What is known of a recording's processes beyond their events: ranks, containers, communicators."""

    ranks: Mapping[int, int] = field(default_factory=dict)  # pid -> process rank (RANK and equivalents)
    containers: Mapping[int, Container] = field(default_factory=dict)  # cgroup id (v2 or v1) -> container
    communicators: Mapping[tuple[int, int], Communicator] = field(default_factory=dict)  # (pid, comm handle)

    def merged(self, other: Attribution) -> Attribution:
        """Return this attribution with ``other``'s entries added where this one has none."""
        return Attribution(
            {**other.ranks, **self.ranks},
            {**other.containers, **self.containers},
            {**other.communicators, **self.communicators},
        )

    def container(self, cgroup_id: int | None) -> Container | None:
        """Return the container a cgroup id names (None for an unknown or absent id)."""
        return self.containers.get(int(cgroup_id)) if cgroup_id else None


EMPTY = Attribution()


def load_attribution(conn: sqlite3.Connection) -> Attribution:
    """Read ranks, communicators and containers from a recording (a recording without the tables has none)."""
    containers = {
        r.cgroup_id: Container(
            r.cgroup_id, r.path, r.container_id, r.runtime, r.pod_name, r.pod_namespace, r.slurm_job_id
        )
        for r in cgroup_rows(conn)
    }
    communicators = {
        (r.pid, r.comm_handle): Communicator(r.comm_hash, r.rank, r.nranks) for r in communicator_rows(conn)
    }
    return Attribution(process_ranks(conn), containers, communicators)


def from_frame(f: EventFrame) -> Attribution:
    """Communicators whose init call lies in the window: handle, hash (``stream``), rank, nranks."""
    i = np.flatnonzero(np.isin(f.op, np.array(_INIT_OPS, dtype=np.int64)))
    comms = {
        (int(f.pid[k]), int(f.handle[k])): Communicator(int(f.stream[k]), int(f.arg0[k]), int(f.arg1[k]))
        for k in i.tolist()
    }
    return Attribution(communicators=comms)
