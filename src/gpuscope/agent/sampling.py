"""The overhead budget: probe the high-rate ops in windows, so a traced process pays at most its budget.

Every probed call costs the calling thread a trap (about 1 µs for an entry
probe on a ``push %rbp`` prologue, several times that for a single-stepped
one, a second trap for a return probe), and no kernel mechanism makes an
attached uprobe free. So the ops whose individual timing matters least and
whose rate is highest (``SAMPLED_PROBE_OPS``: launches, memsets, asynchronous
copies) are probed only in windows: their links are attached for a slice of
each period and detached otherwise. Everything else is probed all the time.

- **Exact first seconds.** For ``exact_first_s`` after the trace starts, a
  new traced process appears or a library is attached, the sampled ops stay
  attached: cold start, first launches and first allocations are seen whole.
- **The duty cycle.** After that, once a period, each traced process's load
  is measured: its CPU time per second (/proc), what the always-probed calls
  cost it, and what the sampled ops would cost with their probes attached all
  the time (their calls per covered second times the calibrated cost of one).
  The share of time they may be attached is the one that keeps the costliest
  process within ``budget`` of its CPU time (with a margin).
- **Windows are exact.** A BPF gate (``sample_gate``) opens after the links
  are attached and closes before they are detached, and each window's bounds
  are recorded (``probe_windows``): a sampled op's records exist exactly for
  the calls inside the recorded windows. Analysis estimates the rest, and
  labels it so (gpuscope.analysis.coverage): by the process's always-probed
  calls inside and outside the windows, else by time at its unprobed speed,
  for which each window's per-process probe time is reported with it.
- **Self-cost, measured.** ``self_costs`` gives each process's probe time
  (its probed calls, counted, times the calibrated cost per call) over its
  CPU time.

The controller's arithmetic is in ``gpuscope.agent.duty_cycle``, the counting
of calls and costs per process in ``gpuscope.agent.probe_tallies``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuscope.agent.calibration import ProbeCosts, calibrate
from gpuscope.agent.duty_cycle import MIN_WINDOW_S, PERIOD_S, ProcessLoad, duty_for, schedule
from gpuscope.agent.probe_tallies import (
    COST_FLAGS,
    FIRST_HOST_OP,
    IS_SAMPLED,
    Mark,
    Tally,
    Totals,
    add_to_tally,
    per_process,
)
from gpuscope.agent.tracer import Tracer
from gpuscope.bpf.calibration import Prologue
from gpuscope.bpf.wire import Flag
from gpuscope.model.policy import SAMPLED_PROBE_OPS
from gpuscope.platform.system import process_cpu_ns

# The calibration waits this long after the start (see _loop).
CALIBRATE_AFTER_S = 1.0
# A window's calls are all read from the ring this long after it closed (the collector drains it every few ms).
SETTLE_S = 0.5
# Loads and self-costs are measured over this much of the recent past.
HORIZON_S = 5.0


@dataclass(frozen=True, slots=True)
class SelfCost:
    """gpuscope's measured cost to one process over the recent past."""

    pid: int
    probe_ns: int  # its probed calls, each times the calibrated cost of its probes
    cpu_ns: int  # its CPU time over the same interval
    calls: int  # probed calls counted

    @property
    def share(self) -> float:
        return self.probe_ns / self.cpu_ns if self.cpu_ns > 0 else 0.0


WindowStats = tuple[int, int, float, int]
"""(pid, sampled calls seen, probe ns, threads) of one window."""


class ProbeSampler:
    """Attach the sampled ops' probes in windows under ``budget`` (a share of each process's CPU time).

    With ``budget`` None every op is probed all the time, and only the self-cost is measured.

    ``on_window(start_ns, end_ns, exact, stats)`` is called with each window (CLOCK_MONOTONIC ns) once its calls
    have been read (``SETTLE_S`` after it closed, or at ``flush``), with each process's calls and probe time
    in it: inside a window the process runs slower by its probe time, so analysis needs that time to turn
    the calls seen into a rate without probes. ``observe`` is called by the collector with every batch.
    """

    def __init__(
        self,
        tracer: Tracer,
        budget: float | None,
        exact_first_s: float,
        on_window: Callable[[int, int, bool, list[WindowStats]], None],
        *,
        open_since_ns: int | None = None,
        period_s: float = PERIOD_S,
    ) -> None:
        self.tracer = tracer
        self.budget = budget
        self.exact_first_s = exact_first_s
        self.period_s = period_s
        self.on_window = on_window
        self.costs: ProbeCosts | None = None
        self.calibration_error: str | None = None
        # The share of time the sampled ops are probed now; None without a budget.
        self.duty: float | None = 1.0
        # ns a call's probes cost, by the record's STEPPED and ENTRY_ONLY flags (zeros until calibrated).
        self._flag_costs = np.zeros(COST_FLAGS + 1, dtype=np.float64)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._exact_until = _now() + int(exact_first_s * 1e9)
        self._started_ns = open_since_ns if open_since_ns is not None else _now()
        self._libraries = 0
        self._covered_ns = 0
        self._totals: dict[int, Totals] = {}
        # Calls counted before the calibration gave their cost: (pid, flags, op) -> calls, costed once it has.
        self._uncosted: dict[tuple[int, int, int], int] = {}
        self._taken: dict[int, tuple[float, int, int | None]] = {}
        self._marks: list[Mark] = []
        self._tallies: list[Tally] = []
        self._chunk_start: int | None = None  # the open chunk of a window (the gate is open), or None
        self._last_end: int | None = None
        if open_since_ns is not None and budget is not None:
            # The tracer opened the gate with every probe attached when it loaded: the first window began
            # then, and is recorded even if the trace ends before this thread first runs.
            self._start_chunk(open_since_ns)
        self._thread = threading.Thread(target=self._run, name="gpuscope-sampler", daemon=True)

    # -- inputs (collector thread) ---------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def note_process(self, pid: int) -> None:
        """A new traced process: its first seconds are probed whole."""
        with self._lock:
            self._exact_until = max(self._exact_until, _now() + int(self.exact_first_s * 1e9))

    def observe(self, ev: np.ndarray) -> None:
        """Count a batch's probed calls per process, with what each cost (once calibrated).

        On the collector's path for every batch: columns are read, never whole records copied, and a batch
        of one process (the common case) is summed without grouping.
        """
        m = ev["op"] < FIRST_HOST_OP
        n = int(np.count_nonzero(m))
        if not n:
            return
        whole = n == len(ev)

        def col(name: str) -> np.ndarray:
            c: np.ndarray = ev[name]
            return c if whole else c[m]

        ops, flags, pids, ts = col("op"), col("flags"), col("pid"), col("ts_ns")
        cost = self._costs_of(flags)
        sampled = IS_SAMPLED[ops]
        per_pid = per_process(pids, sampled, cost)
        with self._lock:
            if self.costs is None:
                self._note_uncosted(pids, flags, ops)
            for tally in self._tallies:
                inside = ts >= tally.start_ns
                if tally.end_ns is not None:
                    inside &= ts <= tally.end_ns
                if inside.all():
                    add_to_tally(tally, per_pid, pids, col("tid"))
                elif inside.any():
                    sub = per_process(pids[inside], sampled[inside], cost[inside])
                    add_to_tally(tally, sub, pids[inside], col("tid")[inside])
            for pid, (calls, _, sampled_ns, always_ns) in per_pid.items():
                t = self._totals.setdefault(pid, Totals())
                t.always_ns += always_ns
                t.sampled_ns += sampled_ns
                t.calls += calls

    def _note_uncosted(self, pids: np.ndarray, flags: np.ndarray, ops: np.ndarray) -> None:
        """Keep (pid, cost flags, op) counts until the calibration says what each cost (lock held)."""
        keys = (pids.astype(np.int64) << 24) | ((flags.astype(np.int64) & COST_FLAGS) << 16) | ops
        uniq, counts = np.unique(keys, return_counts=True)
        for key, c in zip(uniq.tolist(), counts.tolist(), strict=True):
            k = (key >> 24, (key >> 16) & 0xFF, key & 0xFFFF)
            self._uncosted[k] = self._uncosted.get(k, 0) + c

    def flush(self, settled_before_ns: int | None = None) -> None:
        """Report the closed windows (those closed before ``settled_before_ns``; all when None)."""
        with self._lock:
            done = [
                t
                for t in self._tallies
                if t.end_ns is not None and (settled_before_ns is None or t.end_ns < settled_before_ns)
            ]
            self._tallies = [t for t in self._tallies if t not in done]
        for t in done:
            assert t.end_ns is not None
            stats = [(pid, int(acc[0]), acc[1], len(t.threads.get(pid, ()))) for pid, acc in sorted(t.procs.items())]
            self.on_window(t.start_ns, t.end_ns, t.exact, stats)

    # -- outputs ----------------------------------------------------------------

    @property
    def sampled_ops(self) -> frozenset[int]:
        """The ops probed in windows (none without a budget)."""
        return SAMPLED_PROBE_OPS if self.tracer.samples and self.budget is not None else frozenset()

    def coverage(self) -> tuple[int, int]:
        """(ns the sampled ops were probed, ns since their probes were first attached), read at one instant."""
        with self._lock:
            now = _now()
            if self._stop.is_set() and self._chunk_start is None and self._last_end is not None:
                now = self._last_end  # stopped: nothing is probed or counted after the last window
            open_ = now - self._chunk_start if self._chunk_start is not None else 0
            return self._covered_ns + open_, now - self._started_ns

    def self_costs(self) -> list[SelfCost]:
        """Each process's measured cost over the horizon (empty until calibrated and measured twice)."""
        with self._lock:
            if self.costs is None or len(self._marks) < 2:
                return []
            old, new = self._marks[0], self._marks[-1]
            out = []
            for pid, t in new.procs.items():
                o = old.procs.get(pid, Totals())
                if t.cpu_ns is None:
                    continue
                cpu = t.cpu_ns - (o.cpu_ns if o.cpu_ns is not None else t.cpu_ns)
                probe = (t.always_ns + t.sampled_ns) - (o.always_ns + o.sampled_ns)
                if cpu > 0:
                    out.append(SelfCost(pid, int(probe), int(cpu), t.calls - o.calls))
            return sorted(out, key=lambda c: c.pid)

    def stop(self) -> None:
        """Close the open window (it is reported) and end the thread; the probes stay as they are."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    # -- the loop (its own thread) -------------------------------------------------

    def _costs_of(self, flags: np.ndarray) -> np.ndarray:
        costs: np.ndarray = self._flag_costs[flags.astype(np.int64) & COST_FLAGS]
        return costs

    def _calibrate(self) -> None:
        try:
            costs = calibrate(self.tracer, with_return=not self.tracer.opts.entry_only)
        except Exception as exc:  # a missing library or a refused attach: the cost is reported as not measured
            self.calibration_error = f"the probe cost could not be calibrated: {exc}"
            return
        table = np.zeros(COST_FLAGS + 1, dtype=np.float64)
        for f in range(COST_FLAGS + 1):
            prologue = Prologue.STEPPED if f & int(Flag.STEPPED) else Prologue.EMULATED
            table[f] = costs.call_ns(prologue, with_return=not f & int(Flag.ENTRY_ONLY))
        with self._lock:
            self._flag_costs = table
            self.costs = costs
            for (pid, flags, op), n in self._uncosted.items():
                t = self._totals.setdefault(pid, Totals())
                if IS_SAMPLED[op]:
                    t.sampled_ns += n * table[flags]
                else:
                    t.always_ns += n * table[flags]
            self._uncosted.clear()

    def add_cost(self, pid: int, ns: float) -> None:
        """Probe time measured elsewhere (the on-CPU sampler's): paid all the time, like the always-probed calls."""
        with self._lock:
            self._totals.setdefault(pid, Totals()).always_ns += ns

    def take_interval(self) -> list[SelfCost]:
        """Each process's probe time, probed calls and CPU time since the last call (once calibrated)."""
        with self._lock:
            if self.costs is None:
                return []
            snap = {pid: (t.always_ns + t.sampled_ns, t.calls) for pid, t in self._totals.items()}
        out = []
        for pid, (probe, calls) in snap.items():
            cpu = process_cpu_ns(pid)
            prev = self._taken.get(pid)
            if cpu is None:
                self._taken.pop(pid, None)
                continue
            self._taken[pid] = (probe, calls, cpu)
            if prev is None or cpu is None or prev[2] is None or cpu < prev[2]:
                continue
            out.append(SelfCost(pid, int(probe - prev[0]), cpu - prev[2], calls - prev[1]))
        return out

    def _note_libraries(self) -> None:
        """New libraries attached: their first seconds are probed whole."""
        n = len(self.tracer.attached)
        if n == self._libraries:
            return
        self._libraries = n
        with self._lock:
            self._exact_until = max(self._exact_until, _now() + int(self.exact_first_s * 1e9))

    def _mark(self) -> None:
        """Snapshot the totals (and read each process's CPU time) for rates over the horizon."""
        now = _now()
        with self._lock:
            procs = {pid: Totals(t.always_ns, t.sampled_ns, t.calls) for pid, t in self._totals.items()}
            covered = self._covered_ns
        gone = []
        for pid, t in procs.items():
            t.cpu_ns = process_cpu_ns(pid)
            if t.cpu_ns is None:
                gone.append(pid)
        with self._lock:
            # An exited process is measured no more (a system-wide trace sees thousands come and go).
            for pid in gone:
                self._totals.pop(pid, None)
                procs.pop(pid, None)
            self._marks.append(Mark(now, covered, procs))
            horizon = now - int(HORIZON_S * 1e9)
            while len(self._marks) > 2 and self._marks[1].mono_ns <= horizon:
                self._marks.pop(0)

    def loads(self) -> list[ProcessLoad]:
        """Each process's load over the horizon (empty before two marks)."""
        with self._lock:
            if len(self._marks) < 2:
                return []
            old, new = self._marks[0], self._marks[-1]
        wall = (new.mono_ns - old.mono_ns) / 1e9
        covered = (new.covered_ns - old.covered_ns) / 1e9
        if wall <= 0:
            return []
        out = []
        for pid, t in new.procs.items():
            o = old.procs.get(pid, Totals())
            if t.cpu_ns is None or o.cpu_ns is None:
                continue
            sampled_full = (t.sampled_ns - o.sampled_ns) / covered if covered > 0 else 0.0
            out.append(ProcessLoad(pid, (t.cpu_ns - o.cpu_ns) / wall, (t.always_ns - o.always_ns) / wall, sampled_full))
        return out

    # A window is recorded in chunks of at most a period, so a long one (the first seconds) is on disk as it
    # goes; consecutive chunks leave the gate open between them, so not one call falls between two.

    def _open(self) -> None:
        """Attach the sampled ops' probes and open the gate, unless they are already: a chunk starts."""
        if self._chunk_start is not None:
            return
        self.tracer.set_sampled_probes(True)
        self.tracer.set_sample_gate(True)
        self._start_chunk(_now())

    def _start_chunk(self, start: int) -> None:
        with self._lock:
            self._chunk_start = start
            self._tallies.append(Tally(start, exact=self.duty == 1.0))

    def _end_chunk(self, end: int) -> None:
        with self._lock:
            start, self._chunk_start = self._chunk_start, None
            if start is None:
                return
            for t in self._tallies:
                if t.end_ns is None:
                    t.end_ns = end
            self._covered_ns += end - start
            self._last_end = end
        self.flush(end - int(SETTLE_S * 1e9))

    def _hold(self, seconds: float) -> bool:
        """Keep the window open for ``seconds`` and record that chunk of it; False when asked to stop."""
        stopped = self._stop.wait(seconds)
        end = _now()
        self._end_chunk(end)
        if not stopped:
            self._start_chunk(end)
        return not stopped

    def _close(self) -> None:
        """Close the gate (no record after this instant) and record the open chunk."""
        if self._chunk_start is None:
            return
        self.tracer.set_sample_gate(False)
        self._end_chunk(_now())

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            self._close()

    def _loop(self) -> None:
        # Calibrating takes a fraction of a second of CPU: not in the first second, when the agent is busiest
        # reading new processes (their maps, their first stacks) and a short-lived one may already be gone.
        if self._stop.wait(CALIBRATE_AFTER_S):
            return
        self._calibrate()
        if self.budget is None:
            # Every call probed all the time (--record-all, --budget off): only the cost is measured.
            self.duty = None
            while not self._stop.wait(self.period_s):
                self._mark()
            return
        while not self._stop.is_set():
            self._note_libraries()
            with self._lock:
                exact_left = (self._exact_until - _now()) / 1e9
            if exact_left > 0:
                self.duty = 1.0
                self._mark()
                self._open()
                if not self._hold(min(exact_left, self.period_s)):
                    return
                continue
            loads = self.loads()
            if loads:
                duty = duty_for(loads, self.budget)
                self.duty = duty
                window, period = schedule(duty, self.period_s)
            else:
                # Nothing measured yet (no mark since the first seconds): the smallest window until there is.
                self.duty = MIN_WINDOW_S / self.period_s
                window, period = MIN_WINDOW_S, self.period_s
            if window < period:
                t0 = time.monotonic()
                self._close()
                self.tracer.set_sampled_probes(False)
                if self._stop.wait(max(period - window - (time.monotonic() - t0), 0.0)):
                    return
            self.flush(_now() - int(SETTLE_S * 1e9))
            # Marked just before a window opens: the calls of the last one have been read from the ring by
            # now (the collector drains it every few ms), so each interval between marks holds one window
            # and all of its calls.
            self._mark()
            self._open()
            if not self._hold(window):
                return


def _now() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)
