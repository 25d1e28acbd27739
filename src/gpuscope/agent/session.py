"""One recording: tracer -> decoded batches -> live statistics and the store.

Data flows one way. ``TraceSession.run`` polls the ring every few
milliseconds (records are submitted without wakeups), hands each batch to the
writer thread and to the live statistics, and once a second refreshes the
counters, the session row and library discovery for new target processes.
"""

from __future__ import annotations

import os
import platform
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpuscope._version import __version__
from gpuscope.agent.discovery import CudaLibrary, Discovery
from gpuscope.agent.identity import (
    CgroupInfo,
    CgroupResolver,
    cgroups_of,
    parse_environ,
    rank_info,
    read_environ,
)
from gpuscope.agent.procinfo import read_process
from gpuscope.agent.storage_policy import StoragePolicy
from gpuscope.agent.tracer import AttachedLibrary, TraceOptions, Tracer
from gpuscope.bpf.libbpf import libbpf
from gpuscope.bpf.wire import EVENT_DTYPE, AuxKind
from gpuscope.model.latency import LatencyHistogram
from gpuscope.model.ops import Op
from gpuscope.stacks.collector import StackCollector
from gpuscope.store.aggregates import BUCKET_NS, Aggregator, insert_aggregates
from gpuscope.store.connect import connect_writer
from gpuscope.store.processes_write import (
    NcclComm,
    ProcessRow,
    insert_cgroup,
    insert_exec,
    insert_nccl_comms,
    insert_process,
    set_process_cmdline,
    set_process_ranks,
)
from gpuscope.store.retention import DEFAULT_MAX_DB, build_indexes, enforce_cap
from gpuscope.store.sessions_write import (
    SessionCounts,
    SessionInfo,
    close_session,
    create_session,
    update_session_counts,
)
from gpuscope.store.writer import EventWriter

POLL_INTERVAL_S = 0.01
TICK_INTERVAL_S = 1.0


@dataclass
class LiveStats:
    """Exact counts and streaming latency histograms per op, for the whole run.

    Mutated by the collector loop only; other threads (the live view's
    snapshot builder) read it through ``copy()``, which takes ``lock``.
    ``preemptors`` counts, per process (tgid) that took the CPU, how often a
    traced thread was preempted; ``preempted_ns`` is their total off-CPU time.
    """

    per_op: dict[int, LatencyHistogram] = field(default_factory=dict)
    events: int = 0
    preempted: int = 0
    pids: set[int] = field(default_factory=set)
    preempted_ns: int = 0
    preemptors: dict[int, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def update(self, ev: np.ndarray) -> list[int]:
        """Fold a batch in; return pids seen for the first time."""
        with self.lock:
            return self._update(ev)

    def _update(self, ev: np.ndarray) -> list[int]:
        self.events += len(ev)
        ops = ev["op"]
        for op in np.unique(ops).tolist():
            sel = ops == op
            hist = self.per_op.get(op)
            if hist is None:
                hist = self.per_op[op] = LatencyHistogram.empty()
            hist.add(ev["duration_ns"][sel])
            if op == Op.sched_switch:
                preempted = ev[sel][ev["arg0"][sel] != 0]
                self.preempted += len(preempted)
                self.preempted_ns += int(preempted["duration_ns"].sum())
                tgids, counts = np.unique(preempted["handle"] >> np.uint64(32), return_counts=True)
                for tgid, n in zip(tgids.tolist(), counts.tolist(), strict=True):
                    self.preemptors[tgid] = self.preemptors.get(tgid, 0) + n
        new = [p for p in np.unique(ev["pid"]).tolist() if p not in self.pids]
        self.pids.update(new)
        return new

    def copy(self) -> LiveStats:
        """A consistent private copy, safe to take from any thread (cost: one histogram copy per op)."""
        with self.lock:
            return LiveStats(
                {op: h.copy() for op, h in self.per_op.items()},
                self.events,
                self.preempted,
                set(self.pids),
                self.preempted_ns,
                dict(self.preemptors),
            )


@dataclass(frozen=True, slots=True)
class Tick:
    elapsed_s: float
    events: int
    events_per_s: float
    dropped: int
    pending_batches: int


class TraceSession:
    """Record a trace into a database until ``stop`` says so."""

    def __init__(
        self,
        opts: TraceOptions,
        db_path: str | os.PathLike[str],
        *,
        node: str | None = None,
        argv: list[str] | None = None,
        libraries: list[str] | None = None,
        discovery_env: dict[str, str] | None = None,
        command: list[str] | None = None,
        scan_system: bool = True,
        record_all: bool = False,
        max_db_bytes: int = DEFAULT_MAX_DB,
        keep_first_s: float = 10.0,
    ) -> None:
        self.db_path = Path(db_path).expanduser()
        self.node = node or socket.gethostname()
        self.opts = opts
        self.discovery = Discovery()
        self._explicit_libs = bool(libraries)
        for path in libraries or []:
            self.discovery.add(path, "--lib")
        if not libraries:
            if command:
                self.discovery.scan_command(command, discovery_env or dict(os.environ))
            elif scan_system:
                self.discovery.scan_system(discovery_env)
        self.stats = LiveStats()
        self.conn = connect_writer(self.db_path)
        self.tracer = Tracer(opts)
        self.started_mono_ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        self.started_wall_ns = time.time_ns()
        major, minor = libbpf().version()
        self.session_id = create_session(
            self.conn,
            SessionInfo(
                uuid=str(uuid.uuid4()),
                node=self.node,
                hostname=socket.gethostname(),
                kernel=platform.release(),
                gpuscope_version=__version__,
                libbpf_version=f"{major}.{minor}",
                started_wall_ns=self.started_wall_ns,
                started_mono_ns=self.started_mono_ns,
                argv=argv or [],
                flags={
                    "entry_only": opts.entry_only,
                    "filter_targets": opts.filter_targets,
                    "host": opts.host,
                    "uprobe_multi": self.tracer.multi,
                    "ring_bytes": opts.ring_bytes,
                    "storage": "all" if record_all else "selective",
                    "max_db_bytes": max_db_bytes,
                    "stacks": ["off", "native", "native+python"][opts.stacks],
                },
                agent_pid=os.getpid(),
            ),
        )
        self.writer = EventWriter(self.conn, self.session_id)
        self.stacks = StackCollector(self.session_id, self.tracer, python=opts.stacks >= 2) if opts.stacks else None
        self.max_db_bytes = max_db_bytes
        self.policy = StoragePolicy(record_all=record_all, start_ns=self.started_mono_ns, warmup_s=keep_first_s)
        self.aggregator = Aggregator(self.session_id)
        self.targets: list[int] = []
        self._cgroups_seen: set[tuple[int, str]] = set()
        self._environ: dict[int, dict[str, str]] = {}
        self._resolver = CgroupResolver()
        self._peers_seen: set[int] = set()
        self._page_interval_start = self.started_mono_ns
        self._last_tick = time.monotonic()
        self._last_events = 0
        self._t0 = time.monotonic()
        for lib in self.discovery.libraries:
            self.tracer.attach_library(lib)

    # -- setup ---------------------------------------------------------------

    def add_target(self, pid: int, *, before_exec: bool = False) -> None:
        """Trace a process (and its descendants).

        ``before_exec``: the process is a launcher about to exec the real
        command; it is described again at its exec, and its current program
        (a Python trampoline) must not be set up for Python stack walks.
        """
        self.tracer.add_target(pid)
        self.targets.append(pid)
        self._note_process(pid, traced=not before_exec)
        if not self._explicit_libs:
            for lib in self.discovery.scan_process(pid):
                self.tracer.attach_library(lib)

    @property
    def attached(self) -> list[AttachedLibrary]:
        return list(self.tracer.attached.values())

    def attach(self, lib: CudaLibrary) -> None:
        self.tracer.attach_library(lib)

    # -- the loop ------------------------------------------------------------

    def poll(self) -> int:
        """Drain what the ring holds now; return the number of events read."""
        total = 0
        while True:
            ev = self.tracer.read()
            if not len(ev):
                break
            total += len(ev)
            new_pids = self.stats.update(ev)
            self._store(ev)
            for pid in new_pids:
                self._note_process(pid)
            self._note_communicators(ev)
            self._note_cgroups(ev)
            self._note_preemptors(ev)
            # After exec, the process is another program: refresh what we know.
            for pid in np.unique(ev["pid"][ev["op"] == Op.process_exec]).tolist():
                self._note_process(pid, refresh=True)
        for rec in self.tracer.read_aux():
            if rec.kind == AuxKind.EXEC_ENV:
                self._exec_environ(rec.pid, rec.payload)
            elif rec.kind == AuxKind.EXEC_ARGV:
                argv = rec.payload.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
                if self.stacks is not None:
                    self.stacks.note_exec(rec.pid, rec.payload.split(b"\0", 1)[0].decode("utf-8", "replace"))
                self.writer.write(insert_exec, self.session_id, ts_ns=rec.ts_ns, pid=rec.pid, tid=rec.tid, argv=argv)
                # exec replaced the program: its argv is the command line now
                # (and a short-lived process may be gone before /proc is read).
                self.writer.write(set_process_cmdline, self.session_id, rec.pid, argv, time.time_ns())
        if self.stacks is not None:
            for att in self.tracer.attached.values():
                self.stacks.note_library(att.library.path)
            self.stacks.drain(self.tracer.read_stacks(), self.writer)
        return total

    def run(self, should_stop: Callable[[], bool], on_tick: Callable[[Tick], None] | None = None) -> None:
        """Poll until ``should_stop()`` is true, calling ``on_tick`` once a second."""
        while not should_stop():
            if self.poll() == 0:
                time.sleep(POLL_INTERVAL_S)
            now = time.monotonic()
            if now - self._last_tick >= TICK_INTERVAL_S:
                tick = self._tick(now)
                if on_tick:
                    on_tick(tick)

    def _tick(self, now: float) -> Tick:
        counters = self.tracer.counters()
        rate = (self.stats.events - self._last_events) / max(now - self._last_tick, 1e-9)
        self._last_tick, self._last_events = now, self.stats.events
        self._save_counters(counters)
        self._flush_page_allocs()
        self._flush_aggregates(time.clock_gettime_ns(time.CLOCK_MONOTONIC) - 2 * BUCKET_NS)
        self._enforce_cap()
        if not self._explicit_libs:
            for pid in list(self.stats.pids)[:256]:
                for lib in self.discovery.scan_process(pid):
                    self.tracer.attach_library(lib)
        return Tick(now - self._t0, self.stats.events, rate, counters["dropped"], self.writer.pending())

    def _save_counters(
        self, counters: dict[str, int], final: bool = False, libraries: list[AttachedLibrary] | None = None
    ) -> None:
        counts = SessionCounts(
            events_recorded=self.stats.events,
            events_dropped=counters["dropped"],
            drops=dict(counters),
            targets=tuple(self.targets),
            libraries=tuple(
                {"path": a.library.path, "kind": a.library.kind, "version": a.library.version, "probes": a.probes}
                for a in (libraries if libraries is not None else self.attached)
            ),
        )
        if final:
            self.writer.write(
                close_session,
                self.session_id,
                counts,
                stopped_wall_ns=time.time_ns(),
                stopped_mono_ns=time.clock_gettime_ns(time.CLOCK_MONOTONIC),
            )
        else:
            self.writer.write(update_session_counts, self.session_id, counts)

    def _note_process(self, pid: int, refresh: bool = False, traced: bool = True) -> None:
        """Record who a process is (command, cgroups, container, rank) while /proc has it."""
        if self.stacks is not None and traced:
            self.stacks.note_process(pid, refresh)
        info = read_process(pid)
        if info is None:
            return  # gone already: the exec records (argv, environment) fill the row
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

    def _exec_environ(self, pid: int, payload: bytes) -> None:
        """Rank and job identity from the environment the program was exec'd with."""
        env = parse_environ(payload)
        self._environ[pid] = env
        ranks = rank_info(env)
        if ranks.launcher is None and ranks.slurm_job_id is None:
            return
        # An upsert: the process may be gone before /proc was read, so the
        # row may not exist yet.
        self.writer.write(set_process_ranks, self.session_id, pid, ranks, time.time_ns())

    def _note_preemptors(self, ev: np.ndarray) -> None:
        """Name the processes that take the CPU from traced threads (they are not targets)."""
        sel = (ev["op"] == Op.sched_switch) & (ev["arg0"] != 0)
        if not sel.any():
            return
        for pid in np.unique(ev["handle"][sel] >> np.uint64(32)).tolist():
            if pid and pid not in self._peers_seen and pid not in self.stats.pids:
                self._peers_seen.add(pid)
                self._note_process(pid, traced=False)

    def _note_cgroups(self, ev: np.ndarray) -> None:
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

    def _note_communicators(self, ev: np.ndarray) -> None:
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

    def _flush_page_allocs(self) -> None:
        """Turn the kernel's exact per-process page counters into mm_page_alloc rows."""
        now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        counts = self.tracer.drain_page_allocs()
        start, self._page_interval_start = self._page_interval_start, now
        if not counts:
            return
        ev = np.zeros(len(counts), dtype=EVENT_DTYPE)
        for i, (pid, (n, nbytes)) in enumerate(sorted(counts.items())):
            ev[i]["pid"] = ev[i]["tid"] = pid
            ev[i]["bytes"] = nbytes
            ev[i]["arg0"] = n
        ev["ts_ns"] = start
        ev["duration_ns"] = now - start
        ev["op"] = int(Op.mm_page_alloc)
        ev["comm"] = [self._comm_of(int(p)).encode()[:15] for p in ev["pid"]]
        self.stats.update(ev)
        self._store(ev, keep_all=True)

    def _store(self, ev: np.ndarray, keep_all: bool = False) -> None:
        """Count every event in the aggregates; store the rows the policy keeps."""
        keep = np.ones(len(ev), dtype=bool) if keep_all else self.policy.keep(ev, self.stats.per_op)
        self.aggregator.add(ev, keep)
        self.writer.put(ev if keep.all() else ev[keep])

    def _enforce_cap(self) -> None:
        """Queue the --max-db check on the writer thread (the only one that writes)."""
        if self.max_db_bytes > 0:
            self.writer.call_fn(enforce_cap, self.db_path, self.max_db_bytes)

    def _flush_aggregates(self, before_ns: int | None) -> None:
        rows = self.aggregator.take(before_ns)
        if rows:
            self.writer.write(insert_aggregates, rows)

    def _comm_of(self, pid: int) -> str:
        if pid == 0:
            return "(other)"
        info = read_process(pid)
        return info.comm if info else ""

    # -- teardown ------------------------------------------------------------

    def finish(self) -> dict[str, int]:
        """Detach, drain the ring to the end, flush the writer, close the session row."""
        tracer = self.tracer
        # Detach first so nothing new arrives, then empty the ring.
        libraries = self.attached
        tracer.detach()
        self.poll()
        self._flush_page_allocs()
        self._flush_aggregates(None)
        # The index first: the cap must hold for the file as it is left.
        self.writer.call_fn(build_indexes)
        self._enforce_cap()
        counters = tracer.counters()
        self._save_counters(counters, final=True, libraries=libraries)
        tracer.close()
        self.writer.close()
        self.conn.close()
        return counters
