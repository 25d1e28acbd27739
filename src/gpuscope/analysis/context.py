"""What every rule shares: the frame, the window, and per-call facts computed once."""

from __future__ import annotations

from functools import cached_property

import numpy as np

from gpuscope.analysis.attribution import EMPTY, Attribution
from gpuscope.analysis.frame import BUCKET_NS, GPU_CALLS, LAUNCH_OPS, Aggregates, EventFrame, Window
from gpuscope.analysis.imported_rates import ImportedRates
from gpuscope.analysis.intervals import overlap_by_key
from gpuscope.analysis.stats import hist_pct, pct
from gpuscope.model.ops import Op

SCHED = int(Op.sched_switch)
TIMER_PERIODS_NS = np.array([1, 2, 5, 10, 20, 50, 100, 200, 250, 500, 1000], dtype=np.float64) * 1e6
# A first call is "cold" when it is this many times its steady-state p50 and
# costs at least COLD_MIN_EXCESS_NS more.
COLD_RATIO = 10.0
COLD_MIN_EXCESS_NS = 100_000


class Context:
    """Lazily computed views of one window's events (not a value object: it caches).

    ``aggregates``: the window's exact per-second counts, when the recording
    has them (None: rows are the only source, as in older or imported files).
    ``thinned``: (pid, op) groups whose rows were read selectively (slow calls
    and a sample): their counts and percentiles must come from ``aggregates``.
    ``frees_recorded`` is False and ``pids_without_frees`` names processes
    when the recorder never saw cudaFree (Ingero imports).
    ``attribution``: ranks, communicators and containers read from the
    recording's tables (rules read them with ``attribution_of``, which adds
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
        thinned: frozenset[tuple[int, int]] = frozenset(),
        frees_recorded: bool = True,
        pids_without_frees: frozenset[int] = frozenset(),
        attribution: Attribution = EMPTY,
        tracer_pids: frozenset[int] = frozenset(),
        imported_rates: ImportedRates | None = None,
    ) -> None:
        self.frame = frame
        self.window = window
        self.pid_filter = pids
        self.aggregates = aggregates
        self.thinned = thinned
        self.frees_recorded = frees_recorded
        self.pids_without_frees = pids_without_frees
        self.attribution = attribution
        self.tracer_pids = tracer_pids
        self.imported_rates = imported_rates
        self._groups: dict[tuple[int, bool], list[tuple[int, int, np.ndarray]]] = {}
        # Written by the rules: groups a cause touched too few times to compare, where no finding stands.
        self.too_small: list[str] = []

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
        return n, hist_pct(h, 50, lo, hi), hist_pct(h, 99, lo, hi), hi, int(a.sum_ns[m].sum())

    @cached_property
    def calls(self) -> np.ndarray:
        """Indices of CUDA runtime/driver calls in the frame (of the --pid processes)."""
        m = self.frame.mask_ops(GPU_CALLS)
        if self.pid_filter:
            m &= np.isin(self.frame.pid, np.array(self.pid_filter, dtype=np.int64))
        return np.flatnonzero(m)

    @cached_property
    def call_pids(self) -> list[int]:
        return [int(p) for p in np.unique(self.frame.pid[self.calls])]

    @cached_property
    def sched(self) -> np.ndarray:
        return np.flatnonzero(self.frame.op == SCHED)

    def _offcpu(self, s: np.ndarray) -> np.ndarray:
        """Per call: the time the off-CPU intervals ``s`` of its own thread cover."""
        f, c = self.frame, self.calls
        return overlap_by_key(f.tid[c], f.ts[c], f.ts[c] + f.dur[c], f.tid[s], f.ts[s], f.ts[s] + f.dur[s])

    @cached_property
    def _by_tracer(self) -> np.ndarray:
        """Per sched row: True when the task that took the CPU belongs to the tracer."""
        f, s = self.frame, self.sched
        if not self.tracer_pids:
            return np.zeros(len(s), dtype=bool)
        by: np.ndarray = np.isin(f.handle[s] >> 32, np.fromiter(self.tracer_pids, dtype=np.int64))
        by &= f.arg0[s] != 0
        return by

    @cached_property
    def preempting(self) -> np.ndarray:
        """sched_switch rows where another task took a traced thread's CPU (the tracer's own excepted)."""
        f, s = self.frame, self.sched
        rows: np.ndarray = s[(f.arg0[s] != 0) & ~self._by_tracer]
        return rows

    @cached_property
    def tracer_preempting(self) -> np.ndarray:
        """sched_switch rows where the tracer itself took a traced thread's CPU."""
        rows: np.ndarray = self.sched[self._by_tracer]
        return rows

    @cached_property
    def stateless_sched(self) -> np.ndarray:
        """sched_switch rows without task state (imported data): preemption cannot be told from blocking.

        gpuscope's own probe records prev_state; a thread switched out in TASK_RUNNING (0) is
        always flagged preempted, so "not preempted and state 0" only occurs without state.
        """
        f, s = self.frame, self.sched
        rows: np.ndarray = s[(f.arg0[s] == 0) & (f.arg1[s] == 0)]
        return rows

    @cached_property
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
        for pid in np.unique(f.pid[s]).tolist() if len(bio) else []:
            mine = bio[f.pid[bio] == pid]
            done = np.sort(f.ts[mine] + f.dur[mine])
            m = f.pid[s] == pid
            io[m] = np.searchsorted(done, end[m] + 1_000_000, "right") > np.searchsorted(done, f.ts[s][m], "left")
        d = f.dur[s].astype(np.float64)
        near = np.abs(d[:, None] - TIMER_PERIODS_NS[None, :]) <= np.maximum(0.02 * TIMER_PERIODS_NS, 100_000)
        timer = near.any(axis=1) & ~io
        idle = (f.cgroup[s] == 1) & ~io & ~timer
        return {"io": s[io], "timer": s[timer], "idle": s[idle], "unexplained": s[~(io | timer | idle)]}

    @cached_property
    def preempted_ns(self) -> np.ndarray:
        """Per call: time its thread was runnable but off CPU (another task, not the tracer, had it)."""
        return self._offcpu(self.preempting)

    @cached_property
    def tracer_preempted_ns(self) -> np.ndarray:
        """Per call: time its thread was runnable but the tracer had its CPU (tracing overhead)."""
        return self._offcpu(self.tracer_preempting)

    @cached_property
    def voluntary_ns(self) -> np.ndarray:
        """Per call: time its thread was blocked by its own choice (sleep, wait, I/O)."""
        f, s = self.frame, self.sched
        s = np.setdiff1d(s[f.arg0[s] == 0], self.stateless_sched, assume_unique=True)
        return self._offcpu(s)

    @cached_property
    def cold(self) -> np.ndarray:
        """Per call: True for a cold first call (first of its (pid, op), or of its kernel for launches)."""
        f, c = self.frame, self.calls
        n = len(c)
        out = np.zeros(n, dtype=bool)
        if n == 0:
            return out
        is_launch = np.isin(f.op[c], np.fromiter(LAUNCH_OPS, dtype=np.int64))
        key_handle = np.where(is_launch, f.handle[c], 0)
        group = f.pid[c] * 256 + f.op[c]
        order = np.lexsort((f.ts[c], key_handle, group))  # stable by time inside each key
        g_sorted, h_sorted = group[order], key_handle[order]
        starts = np.ones(n, dtype=bool)
        starts[1:] = (g_sorted[1:] != g_sorted[:-1]) | (h_sorted[1:] != h_sorted[:-1])
        first = np.zeros(n, dtype=bool)
        first[order[starts]] = True
        # Steady state per (pid, op): p50 of the calls that are not first calls.
        d = f.dur[c]
        for gpid, gop, pos in self._groups_of(group, np.ones(n, dtype=bool), 1):
            cand = pos[first[pos]]
            summary = self.op_summary(gpid, gop)
            if summary is not None and summary[0] >= 3:
                # Every call counts in the baseline, stored or not (the first few barely move a p50).
                base = max(summary[1], 1)
                if (gpid, gop) in self.thinned:
                    # Rows were read selectively: the first one read is a first call only in the op's first second.
                    cand = cand[f.ts[c[cand]] < self.aggregates.first_bucket(gpid, gop) + BUCKET_NS]  # type: ignore[union-attr]
            else:
                steady = d[pos[~first[pos]]]
                if len(steady) < 3:
                    continue
                base = max(pct(steady, 50), 1)
            hit = (d[cand] >= COLD_RATIO * base) & (d[cand] - base >= COLD_MIN_EXCESS_NS)
            out[cand[hit]] = True
        return out

    def pid_span_ns(self, pid: int) -> int:
        """Wall time a process was active in the window: its first event to its last call's end."""
        f = self.frame
        c = self.calls[f.pid[self.calls] == pid]
        if len(c) == 0:
            return 0
        lo = max(int(f.ts[c].min()), self.window.start_ns)
        hi = min(int((f.ts[c] + f.dur[c]).max()), self.window.end_ns)
        return max(hi - lo, 1)

    def groups(self, min_count: int = 10, warm_only: bool = True) -> list[tuple[int, int, np.ndarray]]:
        """(pid, op, positions into ``calls``) for every op of every process with enough calls."""
        key = (min_count, warm_only)
        if key not in self._groups:
            f, c = self.frame, self.calls
            keep = ~self.cold if warm_only else np.ones(len(c), dtype=bool)
            self._groups[key] = self._groups_of(f.pid[c] * 256 + f.op[c], keep, min_count)
        return self._groups[key]

    @staticmethod
    def _groups_of(group: np.ndarray, keep: np.ndarray, min_count: int) -> list[tuple[int, int, np.ndarray]]:
        out = []
        order = np.argsort(group, kind="stable")
        g_sorted = group[order]
        uniq, bounds = np.unique(g_sorted, return_index=True)
        bounds = np.append(bounds, len(g_sorted))
        for g in range(len(uniq)):
            pos = order[bounds[g] : bounds[g + 1]]
            pos = pos[keep[pos]]
            if len(pos) >= min_count:
                out.append((int(uniq[g]) // 256, int(uniq[g]) % 256, pos))
        return out
