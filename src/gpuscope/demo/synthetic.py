"""Synthetic recordings: generated events written through the same writer and aggregates as a trace.

``SyntheticRecording`` is the no-root stand-in for ``TraceSession``: it opens
the database with ``connect_writer``, creates the session row with
``create_session``, hands numpy batches of ``EVENT_DTYPE`` to the same
``EventWriter`` and ``Aggregator`` a real trace uses, storing every row (like
``gpuscope trace --record-all``), and writes processes, execs and the closed
session row through the same named store writes. Scenarios describe what happened with
``Process``/``Thread`` timelines; nothing here sleeps.
"""

from __future__ import annotations

import os
import platform
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpuscope._version import __version__
from gpuscope.bpf.wire import EVENT_DTYPE, Flag, Stat
from gpuscope.model.ops import Op
from gpuscope.model.policy import DEFAULT_CPU_SAMPLE_HZ as CPU_SAMPLE_HZ
from gpuscope.stacks.frames import Frame, Stack
from gpuscope.store.aggregates import Aggregator, insert_aggregates
from gpuscope.store.connect import connect_writer
from gpuscope.store.cpu_samples import insert_cpu_samples
from gpuscope.store.processes_write import ProcessRow, insert_exec, insert_process, insert_processes
from gpuscope.store.retention import build_indexes
from gpuscope.store.sessions_write import SessionCounts, SessionInfo, close_session, create_session, set_session_flag
from gpuscope.store.stacks_write import insert_stacks
from gpuscope.store.writer import EventWriter, events_end_ns

# What a thread's off-CPU interval records as its state when it blocked by itself (TASK_INTERRUPTIBLE).
TASK_INTERRUPTIBLE = 1
STANDIN_LIBRARY = "/opt/gpuscope-demo/lib/libcudart.so.12"  # the name synthetic sessions say they probed
_BATCH = 4096
_CGROUP = 0x5A17  # one cgroup for the demo's processes, like a shell session's
# What each of ``Thread.rows`` holds, in order.
_ROW_FIELDS = ("ts_ns", "duration_ns", "op", "flags", "ret", "bytes", "handle", "stream", "arg0", "arg1")


@dataclass
class Thread:
    """One thread's timeline: calls advance its clock, host events are placed on it."""

    process: Process
    tid: int
    now_ns: int
    rows: list[tuple[int, ...]] = field(default_factory=list)

    def call(
        self,
        op: Op,
        dur_ns: float,
        *,
        nbytes: int = 0,
        handle: int = 0,
        stream: int = 0,
        arg0: int = 0,
        arg1: int = 0,
        ret: int = 0,
    ) -> int:
        """Record a CUDA call starting now that takes ``dur_ns``; return its start."""
        d = max(int(dur_ns), 1)
        start = self.now_ns
        self.rows.append((start, d, int(op), 0, ret, nbytes, handle, stream, arg0, arg1))
        self.now_ns += d
        return start

    def host(
        self,
        op: Op,
        ts_ns: int,
        dur_ns: int = 0,
        *,
        flags: int = 0,
        nbytes: int = 0,
        handle: int = 0,
        stream: int = 0,
        arg0: int = 0,
        arg1: int = 0,
    ) -> None:
        """Record a host event at ``ts_ns`` (the clock does not move)."""
        self.rows.append((ts_ns, dur_ns, int(op), flags, 0, nbytes, handle, stream, arg0, arg1))

    def preempted(self, ts_ns: int, dur_ns: int, by: Process, by_tid: int | None = None) -> None:
        """The thread was runnable but ``by`` had its CPU from ``ts_ns`` for ``dur_ns``."""
        peer = (by.pid << 32) | (by_tid or by.pid)
        self.host(
            Op.sched_switch, ts_ns, dur_ns, flags=int(Flag.PREEMPTED), handle=peer, stream=by.cgroup_id, arg0=1, arg1=0
        )

    def blocked(self, ts_ns: int, dur_ns: int, woken_by: Process | None = None) -> None:
        """The thread slept by itself (a wait, a sleep) from ``ts_ns`` for ``dur_ns``, then was woken."""
        self.host(Op.sched_switch, ts_ns, dur_ns, handle=0, stream=0, arg0=0, arg1=TASK_INTERRUPTIBLE)
        waker = woken_by or self.process
        self.host(Op.sched_wakeup, ts_ns + dur_ns, handle=(waker.pid << 32) | waker.pid)

    def idle(self, dur_ns: float) -> None:
        """Host work between calls: the clock moves, nothing is recorded."""
        self.now_ns += max(int(dur_ns), 0)

    def compute(self, dur_ns: float, stacks: list[tuple[tuple[Frame, ...], float]]) -> None:
        """Host work on the CPU for ``dur_ns``, sampled as the on-CPU sampler would: one sample every 1/hz of
        it, each in one of ``stacks`` (frames innermost first) by its weight."""
        rec = self.process.recording
        period = 1_000_000_000 // CPU_SAMPLE_HZ
        weights = np.array([w for _, w in stacks], dtype=np.float64)
        cum = np.cumsum(weights / weights.sum())
        start = self.now_ns
        for k in range(int(dur_ns) // period):
            # Where a sample falls in the weights: a fixed sequence, so recordings are reproducible.
            at = ((k * 0.6180339887) + rec.sample_phase) % 1.0
            frames = stacks[int(np.searchsorted(cum, at, side="right").clip(max=len(stacks) - 1))][0]
            rec.samples.append(
                (self.process.pid, self.tid, start + k * period + period // 2, Stack(frames, 0, len(frames), None))
            )
        rec.sample_phase = (rec.sample_phase + 0.37) % 1.0
        self.idle(dur_ns)


@dataclass
class Process:
    pid: int
    comm: str
    cmdline: str
    cgroup_id: int
    recording: SyntheticRecording
    threads: list[Thread] = field(default_factory=list)

    def thread(self, tid: int | None = None, start_ns: int | None = None) -> Thread:
        t = Thread(self, tid or self.pid, self.recording.start_ns if start_ns is None else start_ns)
        self.threads.append(t)
        return t


class SyntheticRecording:
    """Write a generated recording into ``db_path`` as one complete session.

    Args:
        db_path: the database (created if missing; sessions are appended).
        argv: the command line stored with the session.
        scenario: the demo scenario's name, stored in the session flags.
    """

    def __init__(self, db_path: str | os.PathLike[str], argv: list[str], scenario: str) -> None:
        self.db_path = Path(db_path)
        self.conn = connect_writer(self.db_path)
        # After everything already in the database: scenarios recorded into one database must not overlap in time.
        self.start_ns = max(time.clock_gettime_ns(time.CLOCK_MONOTONIC), events_end_ns(self.conn) + 1_000_000_000)
        self.started_wall_ns = time.time_ns()
        self.session_id = create_session(
            self.conn,
            SessionInfo(
                uuid=str(uuid.uuid4()),
                node=socket.gethostname(),
                hostname=socket.gethostname(),
                kernel=platform.release(),
                gpuscope_version=__version__,
                libbpf_version="synthetic",
                started_wall_ns=self.started_wall_ns,
                started_mono_ns=self.start_ns,
                argv=argv,
                flags={
                    "storage": "all",
                    "synthetic": True,
                    "scenario": scenario,
                    "host": True,
                    "entry_only": False,
                    "filter_targets": True,
                    "stacks": "off",
                },
            ),
        )
        self.writer = EventWriter(self.conn, self.session_id)
        self.aggregator = Aggregator(self.session_id)
        self.processes: list[Process] = []
        self.others: list[Process] = []  # preemptors: not traced, so no rows of their own
        self.events = 0
        # On-CPU samples (Thread.compute): (pid, tid, ts, stack); the session says its rate once it has any.
        self.samples: list[tuple[int, int, int, Stack]] = []
        self.sample_phase = 0.0

    def process(
        self, pid: int, comm: str, cmdline: str, *, traced: bool = True, start_ns: int | None = None
    ) -> Process:
        """A process of the scenario; traced ones get a processes row, an exec event and a main thread."""
        p = Process(pid, comm, cmdline, _CGROUP, self)
        if not traced:
            self.others.append(p)
            return p
        self.processes.append(p)
        t = p.thread(start_ns=start_ns)
        t.host(Op.process_exec, t.now_ns, handle=pid)
        t.now_ns += 200_000  # dynamic loading before the first CUDA call
        return p

    def finish(self) -> int:
        """Write every event, the aggregates and the closed session row; return the event count."""
        end_ns = self.start_ns
        for p in self.processes:
            for t in p.threads:
                t.host(Op.process_exit, t.now_ns, arg0=0)
                end_ns = max(end_ns, t.now_ns)
        ev = self._events()
        for i in range(0, len(ev), _BATCH):
            batch = ev[i : i + _BATCH]
            self.aggregator.add(batch, np.ones(len(batch), dtype=bool))
            self.writer.put(batch)
        self.events = len(ev)
        rows = self.aggregator.take(None)
        if rows:
            self.writer.write(insert_aggregates, rows)
        # Untraced preemptors, named like the live demo names the hogs it starts.
        others = [
            ProcessRow(
                p.pid, self.started_wall_ns, comm=p.comm, cmdline=p.cmdline, exe=f"/opt/gpuscope-demo/bin/{p.comm}"
            )
            for p in self.others
        ]
        if others:
            self.writer.write(insert_processes, self.session_id, others)
        for p in self.processes:
            row = ProcessRow(
                p.pid,
                self.started_wall_ns,
                comm=p.comm,
                cmdline=p.cmdline,
                exe=f"/opt/gpuscope-demo/bin/{p.comm}",
                cgroup_id=p.cgroup_id,
                cgroup_path="/user.slice/gpuscope-demo.scope",
            )
            self.writer.write(insert_process, self.session_id, row, replace=True)
            self.writer.write(insert_exec, self.session_id, ts_ns=self.start_ns, pid=p.pid, tid=p.pid, argv=p.cmdline)
        counters = {s.name.lower(): 0 for s in Stat}
        counters["submitted"] = self.events
        counters["dropped"] = 0
        probes = len({int(o) for o in ev["op"] if int(o) < 64})
        counts = SessionCounts(
            events_recorded=self.events,
            events_dropped=0,
            drops=counters,
            targets=tuple(p.pid for p in self.processes),
            libraries=({"path": STANDIN_LIBRARY, "kind": "cudart", "version": "12 (synthetic)", "probes": probes},),
        )
        self.writer.write(
            close_session,
            self.session_id,
            counts,
            stopped_wall_ns=self.started_wall_ns + (end_ns - self.start_ns),
            stopped_mono_ns=end_ns,
        )
        if self.samples:
            self._write_samples()
        self.writer.call_fn(build_indexes)
        self.writer.close()
        self.conn.close()
        return self.events

    def _write_samples(self) -> None:
        stacks = {st.hash: st for _, _, _, st in self.samples}
        self.writer.write(
            insert_stacks,
            [(h, st.json, st.call_site, st.native_depth, st.python_depth, st.marker) for h, st in stacks.items()],
        )
        rows = [(self.session_id, pid, tid, ts, st.hash) for pid, tid, ts, st in self.samples]
        self.writer.write(insert_cpu_samples, rows)
        self.writer.write(set_session_flag, self.session_id, "cpu_sample_hz", CPU_SAMPLE_HZ)
        self.writer.write(set_session_flag, self.session_id, "stacks", "native+python")

    def _events(self) -> np.ndarray:
        parts = []
        for p in self.processes:
            for t in p.threads:
                if not t.rows:
                    continue
                cols = np.array(t.rows, dtype=np.int64)
                ev = np.zeros(len(cols), dtype=EVENT_DTYPE)
                for j, name in enumerate(_ROW_FIELDS):
                    ev[name] = cols[:, j].astype(EVENT_DTYPE[name])
                ev["pid"], ev["tid"] = p.pid, t.tid
                ev["cgroup_id"] = p.cgroup_id
                ev["comm"] = p.comm.encode()[:15]
                parts.append(ev)
        if not parts:
            return np.zeros(0, dtype=EVENT_DTYPE)
        ev = np.concatenate(parts)
        return ev[np.argsort(ev["ts_ns"], kind="stable")]
