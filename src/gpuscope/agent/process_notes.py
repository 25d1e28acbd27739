"""Who the traced processes are, written while /proc still has them: command, cgroups and containers, ranks
and job ids, NCCL communicators, and the processes that take their CPU.

Runs on the collector thread, for the session (gpuscope.agent.session); rows go to the writer thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from gpuscope.agent.identity import (
    CgroupInfo,
    CgroupResolver,
    cgroups_of,
    parse_environ,
    rank_info,
    read_environ,
)
from gpuscope.agent.procinfo import read_process
from gpuscope.model.ops import Op
from gpuscope.stacks.collector import StackCollector
from gpuscope.store.processes_write import (
    NcclComm,
    ProcessRow,
    insert_cgroup,
    insert_nccl_comms,
    insert_process,
    set_process_ranks,
)
from gpuscope.store.writer import EventWriter


class ProcessNotes:
    """What is known of each process the trace sees, recorded once (and again after an exec).

    ``traced(pid)``: whether a pid is one of the trace's own processes (its preemptors are named too, but
    their stacks are not indexed).
    """

    def __init__(
        self, session_id: int, writer: EventWriter, stacks: StackCollector | None, traced: Callable[[int], bool]
    ) -> None:
        self.session_id = session_id
        self.writer = writer
        self.stacks = stacks
        self._traced = traced
        self._cgroups_seen: set[tuple[int, str]] = set()
        self._environ: dict[int, dict[str, str]] = {}
        self._resolver = CgroupResolver()
        self._peers_seen: set[int] = set()

    def process(self, pid: int, refresh: bool = False, traced: bool = True) -> None:
        """Record who a process is (command, cgroups, container, rank) while /proc has it."""
        if self.stacks is not None and traced:
            self.stacks.note_process(pid, refresh)
        elif self.stacks is not None:
            self.stacks.hold_python(pid)
        info = read_process(pid)
        if info is None or (info.exited and refresh):
            # Gone already: the exec records (argv, environment) fill the row; an exited process's blanks
            # (no program, no command line) must not replace what an earlier look saw.
            return
        env = read_environ(pid)
        if not env:
            # Exited already (its environ is gone): keep what an earlier look saw;
            # exec passes the environment on in practice.
            env = self._environ.get(pid, {})
        self._environ[pid] = env
        ranks = rank_info(env)
        cgroups = cgroups_of(pid, env)
        v2 = next((c.cgroup_id for c in cgroups if c.hierarchy == "v2"), None)
        v1 = next((c.cgroup_id for c in cgroups if c.hierarchy == "v1:memory"), None)
        row = ProcessRow(
            pid,
            time.time_ns(),
            comm=info.comm,
            cmdline=info.cmdline,
            exe=info.exe,
            cgroup_id=v2,
            cgroup_path=info.cgroup_path,
            cgroup_v1_id=v1,
            ranks=ranks,
        )
        self.writer.write(insert_process, self.session_id, row, replace=refresh)
        for c in cgroups:
            self._insert_cgroup(c)

    def exec_environ(self, pid: int, payload: bytes) -> None:
        """Rank and job identity from the environment the program was exec'd with."""
        env = parse_environ(payload)
        self._environ[pid] = env
        ranks = rank_info(env)
        if ranks.launcher is None and ranks.slurm_job_id is None:
            return
        # An upsert: the process may be gone before /proc was read, so the
        # row may not exist yet.
        self.writer.write(set_process_ranks, self.session_id, pid, ranks, time.time_ns())

    def preemptors(self, ev: np.ndarray) -> None:
        """Name the processes that take the CPU from traced threads (they are not targets)."""
        sel = (ev["op"] == Op.sched_switch) & (ev["arg0"] != 0)
        if not sel.any():
            return
        for pid in np.unique(ev["handle"][sel] >> np.uint64(32)).tolist():
            if pid and pid not in self._peers_seen and not self._traced(pid):
                self._peers_seen.add(pid)
                self.process(pid, traced=False)

    def cgroups(self, ev: np.ndarray) -> None:
        """Resolve cgroup ids seen on events (a process may move and exit between /proc reads)."""
        # sched_switch rows name the cgroup of the task that took the CPU (stream):
        # the neighbour's container must be resolvable too.
        switches = ev["stream"][ev["op"] == Op.sched_switch]
        for hierarchy, ids in (
            ("v2", np.concatenate([ev["cgroup_id"], switches])),
            ("v1:memory", ev["cgroup_v1_id"]),
        ):
            for cid in np.unique(ids).tolist():
                if cid <= 1 or (cid, hierarchy) in self._cgroups_seen:
                    continue
                info = self._resolver.resolve(hierarchy, cid)
                if info is not None:
                    self._insert_cgroup(info)

    def _insert_cgroup(self, c: CgroupInfo) -> None:
        if (c.cgroup_id, c.hierarchy) in self._cgroups_seen:
            return
        self._cgroups_seen.add((c.cgroup_id, c.hierarchy))
        self.writer.write(insert_cgroup, c, time.time_ns())

    def communicators(self, ev: np.ndarray) -> None:
        """Remember each NCCL communicator's rank and size, joined to its calls in SQL."""
        sel = ((ev["op"] == Op.ncclCommInitRank) | (ev["op"] == Op.ncclCommInitRankConfig)) & (ev["ret"] == 0)
        if not sel.any():
            return
        comms = [
            NcclComm(
                pid=int(r["pid"]),
                comm_handle=int(np.int64(r["handle"].view(np.int64))),
                comm_hash=int(r["stream"].view(np.int64)),
                rank=int(r["arg0"]),
                nranks=int(r["arg1"]),
                ts_ns=int(r["ts_ns"]),
            )
            for r in ev[sel]
        ]
        self.writer.write(insert_nccl_comms, self.session_id, comms)
