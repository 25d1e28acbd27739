"""What every rule shares: the frame, the window, and per-call facts computed once."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Generic, TypeVar, cast, overload

import numpy as np

from gpuscope.analysis.attribution import EMPTY, Attribution, from_frame
from gpuscope.analysis.coverage import ANCHOR_OPS, Coverage, anchor_counts
from gpuscope.analysis.cpu_profile import CpuSamples
from gpuscope.analysis.frame import BUCKET_NS, GPU_CALLS, GPU_WORK, LAUNCH_OPS, Aggregates, EventFrame, Window
from gpuscope.analysis.imported_rates import ImportedRates
from gpuscope.analysis.intervals import KeyGroups, distinct, merge, outermost, overlap_by_key
from gpuscope.analysis.stats import estimate, hist_pct, pct
from gpuscope.model.ops import Op

SCHED = int(Op.sched_switch)
TIMER_PERIODS_NS = np.array([1, 2, 5, 10, 20, 50, 100, 200, 250, 500, 1000], dtype=np.float64) * 1e6
# A first call is "cold" when it is this many times its steady-state p50 and
# costs at least COLD_MIN_EXCESS_NS more.
COLD_RATIO = 10.0
COLD_MIN_EXCESS_NS = 100_000
AFFECTED_FRACTION = 0.1  # a call is affected by a cause that covers >= 10% of it

_T = TypeVar("_T")
_K = TypeVar("_K")


class shared(Generic[_T]):
    """A fact of the window computed once per Context, even when rules on two threads ask for it at once.

    ``functools.cached_property`` either locks per class (Python 3.10, 3.11:
    two analyses in one process wait for each other) or not at all (3.12+:
    both threads compute it, tens of MB twice). This locks per instance and
    name. Computing one fact may ask for another, never for itself, so the
    locks are taken in the order of those dependencies and cannot deadlock.
    Once stored, the value is read from the instance's ``__dict__`` without
    calling this (a non-data descriptor).
    """

    def __init__(self, func: Callable[[Context], _T]) -> None:
        self._func = func
        self._name = func.__name__
        self.__doc__ = func.__doc__

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> shared[_T]: ...

    @overload
    def __get__(self, obj: Context, owner: type | None = None) -> _T: ...

    def __get__(self, obj: Context | None, owner: type | None = None) -> _T | shared[_T]:
        if obj is None:
            return self
        found: _T = obj.once(obj.__dict__, self._name, lambda: self._func(obj))
        return found


_MISSING = object()


class Context:
    """Lazily computed views of one window's events (not a value object: it caches).

    ``aggregates``: the window's exact per-second counts, when the recording
    has them (None: rows are the only source, as in older or imported files).
    ``thinned``: (pid, op) groups whose rows were read selectively (every call slower than the duration
    given, and one row in ``THIN_SAMPLE`` of the rest): their counts and percentiles must come from
    ``aggregates``.
    ``frees_recorded`` is False and ``pids_without_frees`` names processes
    when the recorder never saw cudaFree (Ingero imports).
    ``attribution``: ranks, communicators and containers read from the
    recording's tables (rules read them with ``window_attribution``, which adds
    the communicators initialised in the window).
    ``imported_rates``: the exact per-bucket counts of processes recorded by
    the reference system (None: no imported process in the window); their
    rates come from these only.
    ``tracer_pids``: the recording agent's own processes. The CPU they take
    from traced threads is the measured cost of tracing, not a cause: it is
    left out of ``preempted_ns`` and ``preempting`` and counted apart in
    ``tracer_preempted_ns``.
    """

    def __init__(
        self,
        frame: EventFrame,
        window: Window,
        pids: tuple[int, ...] = (),
        *,
        aggregates: Aggregates | None = None,
        thinned: Mapping[tuple[int, int], int] = MappingProxyType({}),
        frees_recorded: bool = True,
        pids_without_frees: frozenset[int] = frozenset(),
        attribution: Attribution = EMPTY,
        tracer_pids: frozenset[int] = frozenset(),
        imported_rates: ImportedRates | None = None,
        coverage: Coverage | None = None,
        cpu_samples: CpuSamples | None = None,
    ) -> None:
        self.frame = frame
        # On-CPU samples of traced threads (None: the recording has none): where host time goes.
        self.cpu_samples = cpu_samples
        # When the overhead budget probed some ops in windows: their counts are estimated (op_summary).
        self.coverage = coverage
        self.window = window
        self.pid_filter = pids
        self.aggregates = aggregates
        self.thinned = thinned
        self.frees_recorded = frees_recorded
        self.pids_without_frees = pids_without_frees
        self.attribution = attribution
        self.tracer_pids = tracer_pids
        self.imported_rates = imported_rates
        # Written by the rules, per rule id: groups a cause touched too few times to compare, where no
        # finding stands. Per rule so that rules evaluated on two threads give the notes in rule order.
        self.too_small: dict[str, list[str]] = {}
        self._locks: dict[object, threading.Lock] = {}
        self._locks_lock = threading.Lock()
        self._pid_calls: dict[int, np.ndarray] = {}
        self._pid_calls_of: dict[tuple[int, frozenset[int]], np.ndarray] = {}
        self._outer_work: dict[int, np.ndarray] = {}
        self._readings: dict[tuple[str, int], object] = {}
        self._work_spans: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._thread_spans: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}

    def _lock_of(self, key: object) -> threading.Lock:
        """The lock that guards computing one cached fact (``once``)."""
        with self._locks_lock:
            lock = self._locks.get(key)
            if lock is None:
                lock = self._locks[key] = threading.Lock()
            return lock

    def op_summary(self, pid: int, op: int) -> tuple[int, int, int, int, int] | None:
        """(count, p50, p99, max, total ns) of every call of an op of a process, from aggregates; None without."""
        a = self.aggregates
        if a is None:
            return None
        m = a.mask(pid, frozenset({op}))
        n = int(a.count[m].sum())
        if n == 0:
            return None
        lo, hi = int(a.min_ns[m].min()), int(a.max_ns[m].max())
        h = a.hist(pid, op)
        total = int(a.sum_ns[m].sum())
        if self.coverage is not None and self.coverage.is_sampled(op):
            n, total, _ = estimate(a, self.coverage, m, self.call_spans, self.anchors)
        return n, hist_pct(h, 50, lo, hi), hist_pct(h, 99, lo, hi), hi, total

    @shared
    def anchors(self) -> dict[int, tuple[int, int]]:
        """Per process: its always-probed calls, and those inside the probe windows (``anchor_counts``)."""
        if self.coverage is None:
            return {}
        f, a = self.frame, self.aggregates
        totals: dict[int, int] | None = None
        if a is not None:
            m = a.mask(None, ANCHOR_OPS)
            totals = {}
            for pid, n in zip(a.pid[m].tolist(), a.count[m].tolist(), strict=True):
                totals[pid] = totals.get(pid, 0) + n
        return anchor_counts(f.pid, f.op, f.ts, self.coverage, totals)

    @shared
    def calls(self) -> np.ndarray:
        """Indices of CUDA runtime/driver calls in the frame (of the --pid processes)."""
        m = self.frame.mask_ops(GPU_CALLS)
        if self.pid_filter:
            m &= np.isin(self.frame.pid, np.array(self.pid_filter, dtype=np.int64))
        calls = np.flatnonzero(m)
        # Kept for the whole analysis, and an index into a frame of fewer than 2**31 rows: half the memory.
        return calls.astype(np.int32) if len(m) < 1 << 31 else calls

    @shared
    def call_threads(self) -> KeyGroups:
        """The calls grouped by thread (positions into ``calls``), for the per-thread overlaps of many rules.

        Each call's thread is not kept beside it: the grouping holds all a rule asks of it.
        """
        return KeyGroups.of(self.frame.tid[self.calls])

    @shared
    def call_start(self) -> np.ndarray:
        """Per call: its start (``frame.ts[calls]``)."""
        start: np.ndarray = self.frame.ts[self.calls]
        return start

    @shared
    def call_end(self) -> np.ndarray:
        """Per call: its end (``frame.ts[calls] + frame.dur[calls]``)."""
        end: np.ndarray = self.call_start + self.frame.dur[self.calls]
        return end

    @shared
    def call_pids(self) -> list[int]:
        """The processes that made calls, ascending (``_call_groups`` found them)."""
        return sorted({pid for pid, _op, _pos in self._call_groups})

    def once(self, cache: dict[_K, _T], key: _K, compute: Callable[[], _T]) -> _T:
        """``cache[key]``, computed by ``compute`` once, under a lock of the key's own: the per-key caches
        below and every ``shared`` fact (whose cache is the instance's ``__dict__``) go through here."""
        found = cache.get(key, _MISSING)
        if found is _MISSING:
            with self._lock_of((id(cache), key)):
                found = cache.get(key, _MISSING)
                if found is _MISSING:
                    found = cache[key] = compute()
        return found  # type: ignore[return-value]

    def pid_calls(self, pid: int) -> np.ndarray:
        """Positions into ``calls`` of one process's calls, ascending (time order); computed once per process."""
        return self.once(self._pid_calls, pid, lambda: self._find_pid_calls(pid))

    def _find_pid_calls(self, pid: int) -> np.ndarray:
        groups = [pos for gpid, _op, pos in self._call_groups if gpid == pid]
        n = sum(len(pos) for pos in groups)
        if n * 16 < len(self.calls):
            return _merged(groups)  # a small process among many calls: not a pass over every call
        if n == len(self.calls):
            return np.arange(n, dtype=np.int32 if n < 1 << 31 else np.int64)  # every call is this process's
        found = np.flatnonzero(self.frame.pid[self.calls] == pid)
        return found.astype(np.int32) if len(found) < 1 << 31 else found

    def pid_calls_of(self, pid: int, ops: frozenset[int]) -> np.ndarray:
        """Positions into ``calls`` of one process's calls of ``ops``, ascending (time order); kept."""
        return self.once(
            self._pid_calls_of,
            (pid, ops),
            lambda: _merged([pos for gpid, op, pos in self._call_groups if gpid == pid and op in ops]),
        )

    def outer_work_rows(self, pid: int) -> np.ndarray:
        """Frame rows of one process's GPU work by time, a driver call made inside a runtime call counted once
        (cudaLaunchKernel -> cuLaunchKernel: as the runtime call); kept."""

        def find() -> np.ndarray:
            f = self.frame
            rows: np.ndarray = self.calls[self.pid_calls_of(pid, GPU_WORK)]
            outer: np.ndarray = rows[outermost(f.tid[rows], f.ts[rows], f.ts[rows] + f.dur[rows])]
            return outer

        return self.once(self._outer_work, pid, find)

    def reading(self, name: str, pid: int, compute: Callable[[], _T]) -> _T:
        """A reading of one process that several rules share (``analysis.steps``, ``analysis.gil``), once."""
        return cast(_T, self.once(self._readings, (name, pid), compute))

    def calls_of_ops(self, ops: frozenset[int]) -> np.ndarray:
        """Positions into ``calls`` of every process's calls of ``ops``, ascending (time order)."""
        return _merged([pos for _pid, op, pos in self._call_groups if op in ops])

    def thread_call_spans(self, pid: int, tid: int) -> tuple[np.ndarray, np.ndarray]:
        """The union of one thread's calls (of process ``pid``) as disjoint [start, end] spans; kept."""
        return self.once(self._thread_spans, (pid, tid), lambda: self._find_thread_spans(pid, tid))

    def _find_thread_spans(self, pid: int, tid: int) -> tuple[np.ndarray, np.ndarray]:
        threads = self.call_threads
        g = int(np.searchsorted(threads.keys, tid))
        if g == len(threads.keys) or threads.keys[g] != tid:
            pos = np.zeros(0, dtype=np.int64)  # a thread that made no call
        else:
            pos = threads.positions(g)
            pos = pos[self.frame.pid[self.calls[pos]] == pid]  # the same tid elsewhere is another thread
        return merge(self.call_start[pos], self.call_end[pos])

    def work_spans(self, pid: int) -> tuple[np.ndarray, np.ndarray]:
        """The union of one process's GPU work calls (``GPU_WORK``) as disjoint [start, end) spans; kept."""

        def find() -> tuple[np.ndarray, np.ndarray]:
            pos = self.pid_calls_of(pid, GPU_WORK)
            return merge(self.call_start[pos], self.call_end[pos])

        return self.once(self._work_spans, pid, find)

    def peer_work_spans(self, pid: int) -> tuple[np.ndarray, np.ndarray]:
        """The union of every other process's GPU work calls: the time a GPU shared with them was busy."""
        peers = [self.work_spans(p) for p in self.call_pids if p != pid]
        if not peers:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        if len(peers) == 1:
            return peers[0]
        # The union of unions is the union: merging each process's spans again gives what merging every call would.
        return merge(np.concatenate([s for s, _ in peers]), np.concatenate([e for _, e in peers]))

    def affected(self, cause: np.ndarray) -> np.ndarray:
        """Per call: whether ``cause`` (ns per call, never negative) covers at least AFFECTED_FRACTION of it."""
        out = np.zeros(len(cause), dtype=bool)
        at = np.flatnonzero(cause)  # only these can be: with millions of calls, most are untouched
        out[at] = cause[at] >= AFFECTED_FRACTION * np.maximum(self.frame.dur[self.calls[at]], 1)
        return out

    @shared
    def sched(self) -> np.ndarray:
        return np.flatnonzero(self.frame.op == SCHED)

    @shared
    def window_attribution(self) -> Attribution:
        """What is known of the window's processes: what the context carries, then what the frame holds."""
        return self.attribution.merged(from_frame(self.frame))

    @shared
    def forks(self) -> dict[int, tuple[int, ...]]:
        """Per process: the processes it forked in the window (``process_fork`` rows; the handle is the child)."""
        f = self.frame
        rows = np.flatnonzero(f.op == int(Op.process_fork))
        out: dict[int, tuple[int, ...]] = {}
        for parent, child in zip(f.pid[rows].tolist(), f.handle[rows].tolist(), strict=True):
            if child and child != parent:
                out[parent] = (*out.get(parent, ()), child)
        return out

    def own_thread_overlap(self, s: np.ndarray) -> np.ndarray:
        """Per call: the time the intervals ``s`` (frame rows: off-CPU spans) of its own thread cover.

        Read-only: with no interval, one zero seen by every call (no memory per call).
        """
        f = self.frame
        if len(s) == 0:
            return np.broadcast_to(np.zeros(1, dtype=np.int64), (len(self.calls),))
        return overlap_by_key(self.call_threads, self.call_start, self.call_end, f.tid[s], f.ts[s], f.ts[s] + f.dur[s])

    @shared
    def _by_tracer(self) -> np.ndarray:
        """Per sched row: True when the task that took the CPU belongs to the tracer."""
        f, s = self.frame, self.sched
        if not self.tracer_pids:
            return np.zeros(len(s), dtype=bool)
        by: np.ndarray = np.isin(f.handle[s] >> 32, np.fromiter(self.tracer_pids, dtype=np.int64))
        by &= f.arg0[s] != 0
        return by

    @shared
    def preempting(self) -> np.ndarray:
        """sched_switch rows where another task took a traced thread's CPU (the tracer's own excepted)."""
        f, s = self.frame, self.sched
        rows: np.ndarray = s[(f.arg0[s] != 0) & ~self._by_tracer]
        return rows

    @shared
    def tracer_preempting(self) -> np.ndarray:
        """sched_switch rows where the tracer itself took a traced thread's CPU."""
        rows: np.ndarray = self.sched[self._by_tracer]
        return rows

    @shared
    def stateless_sched(self) -> np.ndarray:
        """sched_switch rows without task state (imported data): preemption cannot be told from blocking.

        gpuscope's own probe records prev_state; a thread switched out in TASK_RUNNING (0) is
        always flagged preempted, so "not preempted and state 0" only occurs without state.
        """
        f, s = self.frame, self.sched
        rows: np.ndarray = s[(f.arg0[s] == 0) & (f.arg1[s] == 0)]
        return rows

    @shared
    def stateless_kinds(self) -> dict[str, np.ndarray]:
        """The rows of ``stateless_sched`` told apart by inference, each in one class (in this order):

        ``io``: a block I/O of the same process completes inside the interval (or
        within 1 ms after): an I/O wait. ``timer``: the interval lasts a round
        period (1, 2, 5, 10, 20, 50, 100, 200, 250, 500 ms, 1 s, within 2 %): a
        timer sleep. ``idle``: the CPU was idle or in a kernel thread when the
        task resumed (cgroup 1 on the row, as the reference records it): it was
        waiting, not waiting for the CPU. ``unexplained``: none of these.
        """
        f, s = self.frame, self.stateless_sched
        end = f.ts[s] + f.dur[s]
        io = np.zeros(len(s), dtype=bool)
        bio = np.flatnonzero(f.op == int(Op.block_io))
        for pid in distinct(f.pid[s]).tolist() if len(bio) else []:
            mine = bio[f.pid[bio] == pid]
            done = np.sort(f.ts[mine] + f.dur[mine])
            m = f.pid[s] == pid
            io[m] = np.searchsorted(done, end[m] + 1_000_000, "right") > np.searchsorted(done, f.ts[s][m], "left")
        d = f.dur[s].astype(np.float64)
        near = np.abs(d[:, None] - TIMER_PERIODS_NS[None, :]) <= np.maximum(0.02 * TIMER_PERIODS_NS, 100_000)
        timer = near.any(axis=1) & ~io
        idle = (f.cgroup[s] == 1) & ~io & ~timer
        return {"io": s[io], "timer": s[timer], "idle": s[idle], "unexplained": s[~(io | timer | idle)]}

    @shared
    def preempted_ns(self) -> np.ndarray:
        """Per call: time its thread was runnable but off CPU (another task, not the tracer, had it)."""
        return self.own_thread_overlap(self.preempting)

    @shared
    def tracer_preempted_ns(self) -> np.ndarray:
        """Per call: time its thread was runnable but the tracer had its CPU (tracing overhead)."""
        return self.own_thread_overlap(self.tracer_preempting)

    @shared
    def voluntary_ns(self) -> np.ndarray:
        """Per call: time its thread was blocked by its own choice (sleep, wait, I/O)."""
        f, s = self.frame, self.sched
        # Not preempted, less the rows without task state (``stateless_sched``: arg0 and arg1 both 0).
        return self.own_thread_overlap(s[(f.arg0[s] == 0) & (f.arg1[s] != 0)])

    @shared
    def cold(self) -> np.ndarray:
        """Per call: True for a cold first call (first of its (pid, op), or of its kernel for launches)."""
        f, c = self.frame, self.calls
        n = len(c)
        out = np.zeros(n, dtype=bool)
        if n == 0:
            return out
        first = np.zeros(n, dtype=bool)
        # Per (pid, op), positions in time order. Durations are read per group, for the calls looked at:
        # all of them at once would be another copy of the calls.
        for gpid, gop, pos in self._call_groups:
            # Its first call, and the first of each kernel (handle) for launches.
            first[pos[np.unique(f.handle[c[pos]], return_index=True)[1]] if gop in LAUNCH_OPS else pos[0]] = True
            cand = pos[first[pos]]
            summary = self.op_summary(gpid, gop)
            if summary is not None and summary[0] >= 3:
                # Every call counts in the baseline, stored or not (the first few barely move a p50).
                base = max(summary[1], 1)
                if (gpid, gop) in self.thinned:
                    # Rows were read selectively: the first one read is a first call only in the op's first second.
                    cand = cand[f.ts[c[cand]] < self.aggregates.first_bucket(gpid, gop) + BUCKET_NS]  # type: ignore[union-attr]
            else:
                # Steady state: p50 of the calls that are not first calls.
                steady = f.dur[c[pos[~first[pos]]]]
                if len(steady) < 3:
                    continue
                base = max(pct(steady, 50), 1)
            d = f.dur[c[cand]]
            hit = (d >= COLD_RATIO * base) & (d - base >= COLD_MIN_EXCESS_NS)
            out[cand[hit]] = True
        return out

    def pid_span_ns(self, pid: int) -> int:
        """Wall time a process was active in the window: its first event to its last call's end."""
        lo_hi = self.call_spans.get(pid)
        if lo_hi is None:
            return 0
        lo = max(lo_hi[0], self.window.start_ns)
        hi = min(lo_hi[1], self.window.end_ns)
        return max(hi - lo, 1)

    @shared
    def call_spans(self) -> dict[int, tuple[int, int]]:
        """Per process: its first call's start and its last call's end."""
        out: dict[int, tuple[int, int]] = {}
        for pid, _op, pos in self._call_groups:
            lo, hi = int(self.call_start[pos[0]]), int(self.call_end[pos].max())  # positions are in time order
            was = out.get(pid, (lo, hi))
            out[pid] = (min(was[0], lo), max(was[1], hi))
        return out

    @shared
    def _call_groups(self) -> list[tuple[int, int, np.ndarray]]:
        """(pid, op, positions into ``calls`` in time order) of every op of every process."""
        f, c = self.frame, self.calls
        # One key per (process, op): processes numbered, then ops (below 256). With millions of calls every
        # temporary here is tens of MB: few are alive at once.
        pid = f.pid[c]
        pids = distinct(pid)
        key = np.searchsorted(pids, pid)
        del pid
        key *= 256
        key += f.op[c]
        groups = KeyGroups.of(key)
        del key
        return [(int(pids[k >> 8]), k & 0xFF, pos) for k, pos in zip(groups.keys.tolist(), groups.members, strict=True)]

    def groups(self, min_count: int = 10, warm_only: bool = True) -> list[tuple[int, int, np.ndarray]]:
        """(pid, op, positions into ``calls``) for every op of every process with enough calls."""
        every = self._warm_groups if warm_only else self._call_groups
        return [g for g in every if len(g[2]) >= min_count]

    @shared
    def _warm_groups(self) -> list[tuple[int, int, np.ndarray]]:
        """``_call_groups`` without cold first calls: one copy of the positions, whatever the minimum count."""
        keep = ~self.cold
        out = []
        for pid, op, pos in self._call_groups:
            k = keep[pos]
            # A group's cold calls are mostly its first alone: then the rest is a view, not a copy.
            first = 0 if len(k) == 0 or k[0] else 1
            out.append((pid, op, pos[first:] if bool(k[first:].all()) else pos[k]))
        return out


def _merged(groups: list[np.ndarray]) -> np.ndarray:
    """Groups of positions, each ascending, as one ascending array."""
    if len(groups) == 1:
        return groups[0]
    # A stable sort merges the sorted runs.
    found: np.ndarray = np.sort(np.concatenate(groups or [np.zeros(0, dtype=np.int32)]), kind="stable")
    return found
