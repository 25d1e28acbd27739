"""One recording: tracer -> decoded batches -> live statistics and the store.

Data flows one way. ``TraceSession.run`` polls the ring every few
milliseconds (records are submitted without wakeups), hands each batch to the
writer thread and to the live statistics, and once a second refreshes the
counters, the session row and library discovery for new target processes.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpuscope import __version__
from gpuscope.agent.discovery import CudaLibrary, Discovery
from gpuscope.agent.procinfo import read_process
from gpuscope.agent.tracer import AttachedLibrary, TraceOptions, Tracer
from gpuscope.analysis.latency import LatencyHistogram
from gpuscope.bpf.libbpf import libbpf
from gpuscope.model.ops import Op
from gpuscope.store.connect import connect_writer
from gpuscope.store.writer import EventWriter, SessionInfo, create_session

POLL_INTERVAL_S = 0.01
TICK_INTERVAL_S = 1.0


@dataclass
class LiveStats:
    """Exact counts and streaming latency histograms per op, for the whole run."""

    per_op: dict[int, LatencyHistogram] = field(default_factory=dict)
    events: int = 0
    preempted: int = 0
    pids: set[int] = field(default_factory=set)

    def update(self, ev: np.ndarray) -> list[int]:
        """Fold a batch in; return pids seen for the first time."""
        self.events += len(ev)
        ops = ev["op"]
        for op in np.unique(ops).tolist():
            sel = ops == op
            hist = self.per_op.get(op)
            if hist is None:
                hist = self.per_op[op] = LatencyHistogram.empty()
            hist.add(ev["duration_ns"][sel])
            if op == Op.sched_switch:
                self.preempted += int(np.count_nonzero(ev["arg0"][sel]))
        new = [p for p in np.unique(ev["pid"]).tolist() if p not in self.pids]
        self.pids.update(new)
        return new


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
                },
            ),
        )
        self.writer = EventWriter(self.conn, self.session_id)
        self.targets: list[int] = []
        self._last_tick = time.monotonic()
        self._last_events = 0
        self._t0 = time.monotonic()
        for lib in self.discovery.libraries:
            self.tracer.attach_library(lib)

    # -- setup ---------------------------------------------------------------

    def add_target(self, pid: int) -> None:
        self.tracer.add_target(pid)
        self.targets.append(pid)
        self._note_process(pid)
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
                return total
            total += len(ev)
            self.writer.put(ev)
            for pid in self.stats.update(ev):
                self._note_process(pid)

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
        if not self._explicit_libs:
            for pid in list(self.stats.pids)[:256]:
                for lib in self.discovery.scan_process(pid):
                    self.tracer.attach_library(lib)
        return Tick(now - self._t0, self.stats.events, rate, counters["dropped"], self.writer.pending())

    def _save_counters(
        self, counters: dict[str, int], final: bool = False, libraries: list[AttachedLibrary] | None = None
    ) -> None:
        sql = "UPDATE sessions SET events_recorded = ?, events_dropped = ?, drops = ?, targets = ?, libraries = ?"
        params: list[object] = [
            self.stats.events,
            counters["dropped"],
            json.dumps(counters, sort_keys=True),
            json.dumps(self.targets),
            json.dumps([{"path": a.library.path, "kind": a.library.kind, "version": a.library.version,
                         "probes": a.probes} for a in (libraries if libraries is not None else self.attached)]),
        ]  # fmt: skip
        if final:
            sql += ", stopped_wall_ns = ?, stopped_mono_ns = ?"
            params += [time.time_ns(), time.clock_gettime_ns(time.CLOCK_MONOTONIC)]
        self.writer.call(sql + " WHERE id = ?", (*params, self.session_id))

    def _note_process(self, pid: int) -> None:
        info = read_process(pid)
        if info is None:
            return
        self.writer.call(
            "INSERT OR IGNORE INTO processes(session_id, pid, comm, cmdline, exe, cgroup_path, first_seen_ns) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (self.session_id, pid, info.comm, info.cmdline, info.exe, info.cgroup_path, time.time_ns()),
        )

    # -- teardown ------------------------------------------------------------

    def finish(self) -> dict[str, int]:
        """Detach, drain the ring to the end, flush the writer, close the session row."""
        tracer = self.tracer
        # Detach first so nothing new arrives, then empty the ring.
        libraries = self.attached
        tracer.detach()
        self.poll()
        counters = tracer.counters()
        self._save_counters(counters, final=True, libraries=libraries)
        tracer.close()
        self.writer.close()
        self.conn.close()
        return counters
