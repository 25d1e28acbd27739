"""One recording: tracer -> decoded batches -> live statistics and the store.

Data flows one way. ``TraceSession.run`` polls the ring every few
milliseconds (records are submitted without wakeups), hands each batch to the
writer thread and to the live statistics, and once a second refreshes the
counters, the session row and library discovery for new target processes.
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
import time
from collections.abc import Callable, Mapping

import numpy as np

from gpuscope.agent.background import Background
from gpuscope.agent.discovery import CudaLibrary
from gpuscope.agent.late_loads import LateLoads
from gpuscope.agent.live_stats import LiveStats, Tick
from gpuscope.agent.nccl_progress import NcclProgress
from gpuscope.agent.options import GIL_SWITCH_S
from gpuscope.agent.page_allocs import page_alloc_events
from gpuscope.agent.process_notes import ProcessNotes
from gpuscope.agent.sampling import ProbeSampler
from gpuscope.agent.self_cost import SelfCostRecorder
from gpuscope.agent.session_counts import DropDeltas, session_counts
from gpuscope.agent.session_plan import SessionPlan
from gpuscope.agent.session_setup import db_cap_bytes, find_libraries, recorded_flags, session_info
from gpuscope.agent.storage_policy import StoragePolicy
from gpuscope.agent.tracer import AttachedLibrary, Tracer
from gpuscope.bpf.wire import AuxKind
from gpuscope.model.ops import FIRST_HOST_OP_ID, Op
from gpuscope.model.policy import DEFAULT_BUDGET
from gpuscope.platform.system import SystemSampler
from gpuscope.stacks.collector import StackCollector
from gpuscope.store.aggregates import BUCKET_NS, Aggregator, insert_aggregates, insert_drops, insert_system_sample
from gpuscope.store.connect import connect_writer
from gpuscope.store.processes_write import insert_exec, set_process_cmdline
from gpuscope.store.retention import Reserve, SizeCap, index_within_cap
from gpuscope.store.sessions_write import close_session, create_session, mark_committed, update_session_counts
from gpuscope.store.writer import Durability, EventWriter, ReadMark

_LIFECYCLE_OPS = np.array([int(Op.process_fork), int(Op.process_exec)], dtype=np.uint16)
POLL_INTERVAL_S = 0.01
TICK_INTERVAL_S = 1.0
# Aggregates and counters are written this often (events commit as often on
# the writer thread): a killed agent loses about this much of what it saw.
FLUSH_INTERVAL_S = 0.2
# One poll drains for at most this long, so a ring that never empties under
# overload still leaves room for the once-a-second work (ticks, drops, discovery).
POLL_BUDGET_S = 0.1
# Events taken from the ring at a time: half of the reader's default, so that
# under overload a tick is at most about half a second late (a batch takes
# about 4 us an event to process); smaller batches cost throughput (measured
# on 2 CPUs: 1 << 15 dropped 70-74 % of a 2M-call burst, 1 << 17 59-64 %,
# 1 << 18 57-61 %).
READ_BATCH = 1 << 17
# A read that brings fewer events than this ends the poll, and the loop waits
# one interval before the next: each batch costs ~3 ms of numpy calls whatever
# its size, so draining 200k calls a second as they come (~700 a batch) kept
# the reader thread busy all the time beside the workload; waiting lets the
# batches grow to thousands (the ring holds over a second of such a rate).
SETTLED_BATCH = 1 << 12


class TraceSession:
    """Record a trace into a database until ``stop`` says so."""

    def __init__(self, plan: SessionPlan, *, tracer: Background[Tracer] | None = None) -> None:
        """Open the recording ``plan`` describes and start recording; a command is launched only afterwards.

        ``tracer``: the probes, already loading with ``plan.opts`` (default: loaded here, beside discovery).
        """
        self.plan = plan
        self.db_path, self.node, self.opts = plan.db_path, plan.node, plan.opts
        # The verifier takes a few hundred ms: the probes load on a thread
        # (or already do, started by the caller with the plan's options)
        # while discovery and the recording get ready.
        loading = tracer or Background(lambda: Tracer(plan.opts), name="gpuscope-load")
        try:
            self._get_ready()
        except BaseException:
            with contextlib.suppress(Exception):
                loading.result().close()
            raise
        self.tracer = loading.result()
        self._open_session()
        self._start_recording()

    # -- setup ---------------------------------------------------------------

    def _get_ready(self) -> None:
        """While the probes load: find the libraries, open the store."""
        self.discovery = find_libraries(self.plan)
        # The job's own events apart from the machine's when the trace follows chosen processes.
        self.stats = LiveStats(targets=set() if self.plan.opts.filter_targets else None)
        # Each NCCL rank's progress, for the hang the live view must show while the job runs.
        self.nccl = NcclProgress()
        self._system = SystemSampler()
        self.conn = connect_writer(self.db_path)

    def _open_session(self) -> None:
        """Once the probes are loaded: the session row, and the writer thread that fills it under the size cap."""
        self.started_mono_ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        self.started_wall_ns = time.time_ns()
        self.flags = recorded_flags(self.plan, self.tracer)
        info = session_info(self.plan, self.flags, wall_ns=self.started_wall_ns, mono_ns=self.started_mono_ns)
        self.session_id = create_session(self.conn, info)
        # A short GIL switch interval while recording (see GIL_SWITCH_S).
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(GIL_SWITCH_S)
        cap = db_cap_bytes(self.plan)
        # Room to close the session if the file system fills (see Reserve): inside --max-db, which counts
        # everything gpuscope puts beside the recording (a 1 MiB reserve beside a 1 MiB cap was not counted).
        self.reserve = Reserve(self.db_path, Reserve.size_for(cap))
        self.reserve.create()
        self.max_db_bytes = max(cap - self.reserve.nbytes, 1) if cap > 0 else 0
        self.cap = SizeCap(self.db_path, self.max_db_bytes)
        self.cap.configure(self.conn)
        self.writer = EventWriter(
            self.conn,
            self.session_id,
            durability=Durability(rows_per_commit=self.cap.rows_per_commit(Durability().rows_per_commit)),
            on_commit=self._on_commit,
            after_commit=self._after_commit,
            on_failure=self.reserve.release,
            blocks=self.cap.blocks,
        )
        opts = self.opts
        self.stacks = StackCollector(self.session_id, self.tracer, python=opts.stacks >= 2) if opts.stacks else None
        self.notes = ProcessNotes(self.session_id, self.writer, self.stacks, lambda pid: pid in self.stats.pids)

    def _start_recording(self) -> None:
        """Attach the libraries found, and start the threads that follow late loads and the overhead budget."""
        plan = self.plan
        self.policy = StoragePolicy(
            record_all=plan.record_all, start_ns=self.started_mono_ns, warmup_s=plan.keep_first_s
        )
        self.aggregator = Aggregator(self.session_id)
        self.targets: list[int] = []
        self._page_interval_start = self.started_mono_ns
        self._last_tick = time.monotonic()
        self._last_flush = time.monotonic()
        self._last_events = 0
        self._drops = DropDeltas()
        self.committed_wall_ns: int | None = None
        self._final: dict[str, int] | None = None
        self._t0 = time.monotonic()
        self._new_processes = False
        # A command whose processes the kernel holds at their first load of a
        # library gets each library attached then, not before: probes on every
        # copy on the machine would make other jobs using those copies pay the
        # uprobe trap on each call while this trace runs, and closing them
        # costs a round of RCU grace periods (~100 ms) at the end of each trace.
        self.deferred = plan.defers_attach and self.flags["late_loads"] == "hold"
        if not self.deferred:
            for lib in self.discovery.libraries:
                self.tracer.attach_library(lib)
        # Libraries mapped from now on are attached before their first call.
        self.late_loads = LateLoads(self.tracer, self.discovery)
        self.late_loads.start()
        # The overhead budget's windows, and the measured self-cost (also without a budget).
        self.cost = SelfCostRecorder(self.session_id, self.writer, self.tracer, self.stacks)
        self.sampler = ProbeSampler(
            self.tracer,
            (plan.budget or DEFAULT_BUDGET) if self.tracer.samples else None,
            plan.keep_first_s,
            self.cost.on_window,
            open_since_ns=self.started_mono_ns,
        )
        self.cost.sampler = self.sampler
        self.sampler.start()

    @property
    def elapsed_s(self) -> float:
        """Seconds since recording started."""
        return time.monotonic() - self._t0

    def add_target(self, pid: int, *, before_exec: bool = False) -> None:
        """Trace a process (and its descendants).

        ``before_exec``: the process is a launcher about to exec the real
        command; it is described again at its exec, and its current program
        (a Python trampoline) must not be set up for Python stack walks.
        """
        self.tracer.add_target(pid)
        self.stats.add_target(pid)
        self.targets.append(pid)
        self.notes.process(pid, traced=not before_exec)
        if not self.plan.libraries:
            for lib in self.discovery.scan_process(pid):
                self.tracer.attach_library(lib)

    def note_executable(self, path: str, env: Mapping[str, str] | None = None) -> None:
        """A program about to run in a target (``env``: its environment): its Python walked from its first call."""
        if self.stacks is not None:
            self.stacks.note_executable(path, env)

    @property
    def attached(self) -> list[AttachedLibrary]:
        return list(self.tracer.attached.values())

    @property
    def waiting(self) -> list[CudaLibrary]:
        """Libraries found at start that are attached when a traced process first maps one."""
        if not self.deferred:
            return []
        attached = {att.library.inode for att in self.attached}
        return [lib for lib in self.discovery.libraries if lib.inode not in attached]

    def attach(self, lib: CudaLibrary) -> None:
        self.tracer.attach_library(lib)

    # -- the loop ------------------------------------------------------------

    def poll(self, budget_s: float | None = None, settled: int = 0) -> int:
        """Drain what the ring holds now (for at most ``budget_s``); return the number of events read.

        A read of fewer than ``settled`` events ends the drain early: the ring
        is close to empty, and the caller waits for more.
        """
        total = 0
        deadline = None if budget_s is None else time.monotonic() + budget_s
        while deadline is None or time.monotonic() < deadline:
            read_wall, read_mono = time.time_ns(), time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            ev = self.tracer.read(READ_BATCH)
            if not len(ev):
                break
            total += len(ev)
            new_pids = self.stats.update(ev)
            self.nccl.update(ev)
            self.sampler.observe(ev)
            for pid in new_pids:
                self.notes.process(pid)
            if new_pids:
                # Processes that call CUDA or were forked or exec'd as targets, not every pid a host event names.
                own = ev["pid"][(ev["op"] < FIRST_HOST_OP_ID) | np.isin(ev["op"], _LIFECYCLE_OPS)]
                for pid in set(new_pids) & set(np.unique(own).tolist()):
                    self.sampler.note_process(pid)
            # A new process is read again at once: its maps name its frames, and it may soon be gone.
            self._new_processes |= bool(new_pids) or bool((ev["op"] == Op.process_exec).any())
            self.notes.communicators(ev)
            self.notes.cgroups(ev)
            self.notes.preemptors(ev)
            # After exec, the process is another program: refresh what we know.
            for pid in np.unique(ev["pid"][ev["op"] == Op.process_exec]).tolist():
                self.notes.process(pid, refresh=True)
            # The full stacks of these calls were taken at their entries, so
            # they are on the stack ring before their events (at their returns);
            # read once the processes above are known, to name their frames.
            self._drain_stacks()
            self._store(ev, mark=self._read_mark(ev, read_wall, read_mono))
            if len(ev) < settled:
                break
        self._read_aux()
        if self.stacks is not None:
            self._drain_stacks()
            self.stacks.link(self.writer)
        return total

    def _read_aux(self) -> None:
        """Exec records: argv, environment, and the new program for stacks."""
        for rec in self.tracer.read_aux():
            if rec.kind == AuxKind.EXEC_ENV:
                self.notes.exec_environ(rec.pid, rec.payload)
            elif rec.kind == AuxKind.EXEC_ARGV:
                argv = rec.payload.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
                if self.stacks is not None:
                    self.stacks.note_exec(rec.pid, rec.payload.split(b"\0", 1)[0].decode("utf-8", "replace"))
                self.writer.write(insert_exec, self.session_id, ts_ns=rec.ts_ns, pid=rec.pid, tid=rec.tid, argv=argv)
                # exec replaced the program: its argv is the command line now
                # (and a short-lived process may be gone before /proc is read).
                self.writer.write(set_process_cmdline, self.session_id, rec.pid, argv, time.time_ns())

    def _drain_stacks(self) -> int:
        """Resolve what the stack ring holds (a bounded batch); return the records read."""
        if self.stacks is None:
            return 0
        # A program's exec record is on the aux ring before its first stack is
        # on the stack ring: read the stacks, then the exec records, so every
        # program these stacks ran is known when they are named. Read the other
        # way round, a program exec'd between the two reads was not, and once it
        # has exited nothing names its frames.
        bodies = self.tracer.read_stacks()
        self._read_aux()
        for att in self.attached:
            self.stacks.note_library(att.library.path)
        return self.stacks.drain(bodies, self.writer)

    @property
    def failure(self) -> str | None:
        """Why recording stopped early ("disk full", "error: ..."), or None."""
        return self.writer.failure

    def run(self, should_stop: Callable[[], bool], on_tick: Callable[[Tick], None] | None = None) -> None:
        """Poll until ``should_stop()`` is true or the store fails, calling ``on_tick`` once a second."""
        while not should_stop() and self.writer.failure is None:
            self._new_processes = False
            if self.poll(POLL_BUDGET_S, settled=SETTLED_BATCH) < SETTLED_BATCH and not self._new_processes:
                time.sleep(POLL_INTERVAL_S)
            now = time.monotonic()
            if now - self._last_flush >= FLUSH_INTERVAL_S:
                self._last_flush = now
                self._flush_aggregates(None)
            if now - self._last_tick >= TICK_INTERVAL_S:
                tick = self._tick(now)
                if on_tick:
                    on_tick(tick)

    def _tick(self, now: float) -> Tick:
        counters = self.tracer.counters()
        self._sample_system()
        self.cost.save()
        rate = (self.stats.events - self._last_events) / max(now - self._last_tick, 1e-9)
        self._last_tick, self._last_events = now, self.stats.events
        self._save_counters(counters)
        self._log_drops(counters)
        self._flush_page_allocs()
        if self.flags["late_loads"] == "rescan":
            # The kernel cannot report late loads here: look for them in the maps.
            for pid in list(self.stats.pids)[:256]:
                for lib in self.discovery.scan_process(pid):
                    self.tracer.attach_library(lib)
        return Tick(now - self._t0, self.stats.events, rate, counters["dropped"], self.writer.pending())

    def _sample_system(self) -> None:
        """Keep the host's CPU, memory, load and swap of this second (three small /proc reads)."""
        sample = self._system.sample()
        self.writer.write(
            insert_system_sample,
            self.session_id,
            time.time_ns(),
            sample.cpu_pct,
            sample.mem_pct,
            sample.mem_available_bytes,
            sample.swap_used_bytes,
            sample.load1,
            sample.cpus,
        )

    def _on_commit(self, conn: sqlite3.Connection, mark: ReadMark) -> None:
        """Writer thread, inside each transaction: it holds everything read up to ``mark``."""
        mark_committed(conn, self.session_id, mark.wall_ns, mark.mono_ns, mark.events_seen)
        self.committed_wall_ns = mark.wall_ns

    def _after_commit(self, conn: sqlite3.Connection) -> None:
        """Writer thread, after each commit: hold --max-db, shedding rows while a reader pins the WAL."""
        self.writer.shed = self.cap.check(conn)

    def _log_drops(self, counters: dict[str, int]) -> None:
        """Store the drops of the last second by source, so analysis knows which windows are partial."""
        delta = self._drops.take(counters)
        if delta:
            bucket = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // BUCKET_NS * BUCKET_NS
            self.writer.write(insert_drops, self.session_id, bucket, delta)

    def _save_counters(
        self,
        counters: dict[str, int],
        final: bool = False,
        libraries: list[AttachedLibrary] | None = None,
        end_reason: str = "stopped",
    ) -> None:
        counts = session_counts(
            counters,
            self.writer,
            self.stacks,
            events=self.stats.events,
            targets=self.targets,
            libraries=libraries if libraries is not None else self.attached,
        )
        if final:
            self.writer.write(
                close_session,
                self.session_id,
                counts,
                stopped_wall_ns=time.time_ns(),
                stopped_mono_ns=time.clock_gettime_ns(time.CLOCK_MONOTONIC),
                end_reason=end_reason,
                # After a failure the rows stored stop at the last commit: the session is complete up to then.
                complete=self.writer.failure is None,
            )
        else:
            self.writer.write(update_session_counts, self.session_id, counts)

    def _flush_page_allocs(self) -> None:
        """Turn the kernel's exact per-process page counters into mm_page_alloc rows."""
        now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        counts = self.tracer.drain_page_allocs()
        start, self._page_interval_start = self._page_interval_start, now
        if counts:
            ev = page_alloc_events(counts, start, now)
            self.stats.update(ev)
            self._store(ev, keep_all=True)

    def _read_mark(self, ev: np.ndarray, read_wall: int, read_mono: int) -> ReadMark:
        """How far the reading is complete once ``ev`` (read at ``read_*``) is stored.

        Up to the read when it emptied the ring. Under a backlog, only up to the end of the newest event read:
        records submitted after it were still in the ring (a SIGKILL then loses them), and a mark at the read
        time claimed 0.8-2.3 s of them as stored.
        """
        if not self.tracer.backlog:
            return ReadMark(read_wall, read_mono, self.stats.events)
        end = int((ev["ts_ns"] + ev["duration_ns"]).max())
        return ReadMark(read_wall - (read_mono - end), end, self.stats.events)

    def _store(self, ev: np.ndarray, keep_all: bool = False, mark: ReadMark | None = None) -> None:
        """Count every event in the aggregates; store the rows the policy keeps (``mark``: see ``_read_mark``)."""
        keep = np.ones(len(ev), dtype=bool) if keep_all else self.policy.keep(ev, self.stats.per_op)
        self.aggregator.add(ev, keep)
        stored = ev if keep.all() else ev[keep]
        self.writer.put(stored, self.stacks.stack_hashes(stored) if self.stacks is not None else None, mark)

    def _flush_aggregates(self, before_ns: int | None) -> None:
        rows = self.aggregator.take(before_ns)
        if rows:
            self.writer.write(insert_aggregates, rows)

    # -- teardown ------------------------------------------------------------

    def finish(self) -> dict[str, int]:
        """Detach, drain the ring to the end, flush the writer, close the session row (once; later calls repeat)."""
        if self._final is not None:
            return self._final
        tracer = self.tracer
        self.late_loads.stop()
        self.sampler.stop()
        self.cost.save()
        libraries = self.attached
        # Detach on a thread and drain meanwhile: closing the probes waits out
        # RCU grace periods, a backlog in the ring needs the CPU. Once
        # detached, nothing new arrives: the last poll empties the ring.
        detaching = Background(tracer.detach, name="gpuscope-detach")
        while not detaching.done():
            if self.poll(POLL_BUDGET_S) == 0:
                detaching.wait(POLL_INTERVAL_S)
        detaching.result()
        self.poll()
        if self.stacks is not None:
            # Every full stack still on the ring, then the calls that wait for one.
            while self._drain_stacks():
                pass
            self.stacks.link(self.writer, final=True)
        self.sampler.flush()
        self._flush_page_allocs()
        self._flush_aggregates(None)
        self._log_drops(tracer.counters())
        if self.writer.failure is None:
            self.writer.call_fn(index_within_cap, self.db_path, self.max_db_bytes)
        counters = tracer.counters()
        self._save_counters(counters, final=True, libraries=libraries, end_reason=self.writer.failure or "stopped")
        tracer.close()
        self._final = counters
        try:
            self.writer.close()
        finally:
            self.conn.close()
            self.reserve.release()
            sys.setswitchinterval(self._switch_interval)
        return counters
