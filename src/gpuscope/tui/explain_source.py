"""Explain-rule findings in the live view: the rules run over the last minute of the recording.

``ExplainFindings`` is a ``FindingSource``. Asked once a second by the
snapshot builder, it answers at once with the lines of its last evaluation,
and when that is older than ``every_s`` (or longer, see ``cpu_share``) it
starts the next one on its own thread: take the rows stored since the last
look (handed over by the recorder as it stores them, see ``feed``; or read
from the recording by rowid, so no index and no scan), keep the last
``horizon_s`` of them in memory, and run the rules over them with the window
ending *now*. ``nccl-hang`` therefore sees a rank that has been silent while
its peers went on for longer than the threshold while the trace is still
running.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gpuscope.model.findings import Finding, Severity
from gpuscope.platform.threads import lower_thread_priority
from gpuscope.store.attribution import LIVE_EVENT_COLUMNS, event_rows_after, newest_event_rowid
from gpuscope.store.connect import connect_reader
from gpuscope.store.sessions_read import session_wall_offsets
from gpuscope.tui.live_snapshot import LiveWindow

if TYPE_CHECKING:
    # The rules and the frame they read are imported by the first evaluation, on
    # its own thread: `trace` starts about 0.1 s sooner, and a command that ends
    # within a second never loads them.
    from gpuscope.analysis.frame import EventFrame, Window
    from gpuscope.analysis.rules import Rule

# EventFrame.from_columns takes the live columns in their order: ts, dur, pid, tid, op, cgroup, bytes, handle,
# stream, arg0, arg1.
_NCOLS = len(LIVE_EVENT_COLUMNS)
# The same columns in a fed batch (EVENT_DTYPE names).
_FED_FIELDS = tuple("op" if c == "op_id" else c for c in LIVE_EVENT_COLUMNS)
MAX_LINES = 4
EXPLAIN_NICE = 10


def _monotonic_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def live_rules(hang_threshold_ns: int | None = None) -> tuple[Rule, ...]:
    """The registry, with the hang rule at the live threshold (None: the rule's default)."""
    from gpuscope.analysis.rules import RULES
    from gpuscope.analysis.rules.nccl_hang import DEFAULT_HANG_THRESHOLD_NS, NcclHangRule

    threshold = DEFAULT_HANG_THRESHOLD_NS if hang_threshold_ns is None else hang_threshold_ns
    return tuple(NcclHangRule(threshold) if r.id == NcclHangRule.id else r for r in RULES)


def finding_line(f: Finding) -> str:
    return f"{f.severity.name} {f.kind}: {f.symptom.summary}"


class ExplainFindings:
    """Run the explain rules over recent rows of the live database, on a background thread.

    Args:
        db_path: the database the trace writes.
        hang_threshold_ns: silence after which a rank behind its peers is a hang.
        every_s: at most one evaluation per this many seconds.
        horizon_s: the rules see this much of the recent recording.
        min_severity: findings below it are not shown (nccl-hang is always CRITICAL).
        max_rows: rows kept in memory at most, and read per evaluation at most. When more
            arrived since the last look (the first seconds of a busy trace keep every row), the
            older ones are skipped and the buffer starts afresh: the rules never see a gap in it.
        clock_ns: CLOCK_MONOTONIC ns, the clock of the events (tests pass a frozen one).
        cpu_share: evaluations use at most this share of one CPU: the next one waits
            ``max(every_s, cpu / cpu_share)`` after one that took ``cpu`` seconds of CPU.
            The first seconds of a busy trace store every row, and reading 200,000 of
            them back out of SQLite takes most of a second: unbounded, evaluations ran
            back to back and took a CPU from the traced program on a small machine.
    """

    def __init__(
        self,
        db_path: str | Path,
        *,
        hang_threshold_ns: int | None = None,
        every_s: float = 3.0,
        horizon_s: float = 60.0,
        min_severity: Severity = Severity.MEDIUM,
        max_rows: int = 200_000,
        clock_ns: Callable[[], int] = _monotonic_ns,
        cpu_share: float = 0.1,
    ) -> None:
        self.db_path = Path(db_path)
        self._hang_threshold_ns = hang_threshold_ns
        self._rules: tuple[Rule, ...] | None = None
        self.every_s = every_s
        self.horizon_ns = int(horizon_s * 1e9)
        self.min_severity = min_severity
        self.max_rows = max_rows
        self.clock_ns = clock_ns
        self.cpu_share = cpu_share
        self._interval_s = every_s
        self._last_rowid = 0
        self._cols = [np.zeros(0, dtype=np.int64) for _ in range(_NCOLS)]
        self._lines: tuple[str, ...] = ()
        self._counts: dict[tuple[str, str], int] = {}
        # The first evaluation comes every_s after the start: a trace's first
        # seconds have little to judge, and a short command then never loads the rules.
        self._last_run = time.monotonic()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False
        # Batches handed over by feed() since the last evaluation; None: read the recording instead.
        self._fed: list[np.ndarray] | None = None
        self._fed_rows = 0
        self.errors = 0
        self.skipped_rows = 0
        self.last_error: str | None = None

    @property
    def rules(self) -> tuple[Rule, ...]:
        """The rules evaluated (loaded at first use)."""
        if self._rules is None:
            self._rules = live_rules(self._hang_threshold_ns)
        return self._rules

    # -- input ------------------------------------------------------------------

    def feed(self, ev: np.ndarray) -> None:
        """Events as the recorder stores them (EVENT_DTYPE), for the next evaluation.

        Once fed, evaluations take their rows from here and never read them
        back out of SQLite (reading 200,000 rows back took most of a second of
        CPU in a trace's first, store-everything seconds). Called on the
        recorder's thread: it only keeps a reference.
        """
        if not len(ev):
            return
        with self._lock:
            if self._fed is None:
                self._fed = []
            self._fed.append(ev)
            self._fed_rows += len(ev)
            # Only the newest max_rows can be evaluated: let older batches go now.
            while self._fed_rows - len(self._fed[0]) >= self.max_rows:
                self._fed_rows -= len(self._fed[0])
                self.skipped_rows += len(self._fed.pop(0))

    # -- FindingSource --------------------------------------------------------

    def findings(self, window: LiveWindow) -> Sequence[str]:
        """The last evaluation's lines; start the next evaluation when it is due (never waits for it)."""
        now = time.monotonic()
        with self._lock:
            busy = self._thread is not None and self._thread.is_alive()
            if not busy and not self._closed and now - self._last_run >= self._interval_s:
                self._last_run = now
                self._thread = threading.Thread(target=self._run_quietly, name="gpuscope-explain", daemon=True)
                self._thread.start()
            return self._lines

    def _run_quietly(self) -> None:
        # Live findings can wait: the traced program gets the CPU first.
        lower_thread_priority(EXPLAIN_NICE)
        cpu0 = time.thread_time()
        try:
            self.run_once()
        except Exception as exc:
            # A failed evaluation must not stop the live view: the database being created or rotated,
            # or a rule failing on partial data. Try again next turn.
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
        finally:
            self._interval_s = self.next_interval(time.thread_time() - cpu0)

    def next_interval(self, cpu_s: float) -> float:
        """Seconds from the start of one evaluation to the next, after one that took ``cpu_s`` of CPU."""
        return max(self.every_s, cpu_s / self.cpu_share) if self.cpu_share > 0 else self.every_s

    # -- one evaluation ---------------------------------------------------------

    def run_once(self) -> list[Finding]:
        """Read new rows, evaluate the rules over the horizon, publish and return the findings."""
        from gpuscope.analysis.attribution import load_attribution
        from gpuscope.analysis.context import Context
        from gpuscope.analysis.coverage import load_coverage

        if not self.db_path.exists():
            return []
        # A connection per evaluation: each runs on a thread of its own, and opening is cheap.
        # Straight through SQLite, never ``open_recording``: sniffing the format opens
        # the file with Python, and closing that descriptor would drop the POSIX
        # locks this process's writer holds on the recording.
        conn = connect_reader(self.db_path)
        try:
            now = self.clock_ns()
            self._read_new(conn, now)
            frame, window = self._frame(conn, now)
            attribution = load_attribution(conn)
            # The ops the overhead budget probes in windows have rows only there: no rate over time from them.
            coverage = load_coverage(conn, window.start_ns, window.end_ns)
        finally:
            conn.close()
        if len(frame) == 0:
            return []
        # This process is the tracer: its CPU is overhead, never a cause to move away.
        ctx = Context(frame, window, attribution=attribution, tracer_pids=frozenset({os.getpid()}), coverage=coverage)
        found: list[Finding] = []
        for rule in self.rules:
            found.extend(rule.evaluate(ctx))
        found = [f for f in found if f.severity >= self.min_severity]
        found.sort(key=lambda f: (-f.severity, -f.lost_ns, f.kind))
        with self._lock:
            self._lines = tuple(finding_line(f) for f in found[:MAX_LINES])
            counts: dict[tuple[str, str], int] = {}
            for f in found:
                counts[f.kind, f.severity.name] = counts.get((f.kind, f.severity.name), 0) + 1
            self._counts = counts
        return found

    def finding_counts(self) -> dict[tuple[str, str], int]:
        """The latest evaluation's findings by (kind, severity): the metrics exporter's gauge."""
        with self._lock:
            return dict(self._counts)

    def _read_new(self, conn: sqlite3.Connection, now_ns: int) -> None:
        with self._lock:
            fed, self._fed = self._fed, ([] if self._fed is not None else None)
            self._fed_rows = 0
        if fed is not None:
            self._take_fed(fed)
        else:
            self._read_rows(conn)
        # Keep what ends inside the horizon, and at most max_rows (the newest).
        ts, dur = self._cols[0], self._cols[1]
        keep = ts + dur >= now_ns - self.horizon_ns
        if int(keep.sum()) > self.max_rows:
            keep &= np.arange(len(ts)) >= len(ts) - self.max_rows
        if not keep.all():
            self._cols = [c[keep] for c in self._cols]

    def _take_fed(self, fed: list[np.ndarray]) -> None:
        if not fed:
            return
        ev = np.concatenate(fed)
        if len(ev) >= self.max_rows:
            # A gap before these: the rules must not see the older buffer beside them.
            self._cols = [c[:0] for c in self._cols]
        # The recording's columns, as signed 64-bit integers (as the writer stores them).
        new = [ev[name].astype(np.uint64).view(np.int64) for name in _FED_FIELDS]
        self._cols = [np.concatenate([old, col]) for old, col in zip(self._cols, new, strict=True)]

    def _read_rows(self, conn: sqlite3.Connection) -> None:
        newest = newest_event_rowid(conn)
        if newest is not None and newest - self._last_rowid > self.max_rows:
            # Reading them all would hold the interpreter for seconds beside the collector loop.
            self.skipped_rows += newest - self.max_rows - self._last_rowid
            self._last_rowid = newest - self.max_rows
            self._cols = [c[:0] for c in self._cols]
        rows = event_rows_after(conn, self._last_rowid, self.max_rows)
        if rows:
            block = np.array(rows, dtype=np.int64).reshape(-1, _NCOLS + 1)
            self._last_rowid = int(block[-1, 0])
            self._cols = [np.concatenate([old, block[:, j + 1]]) for j, old in enumerate(self._cols)]

    def _frame(self, conn: sqlite3.Connection, now_ns: int) -> tuple[EventFrame, Window]:
        from gpuscope.analysis.frame import EventFrame, Window, process_names

        cols = self._cols
        order = np.argsort(cols[0], kind="stable")
        cols = [c[order] for c in cols]
        frame = EventFrame.from_columns(cols, *process_names(conn))
        # The newest session: the one being recorded.
        offsets = session_wall_offsets(conn)
        sessions, offset = ((offsets[-1][0],), offsets[-1][1]) if offsets else ((), 0)
        start = int(cols[0][0]) if len(cols[0]) else now_ns
        end = max(now_ns, start)
        return frame, Window(start, end, start, end, offset, sessions, len(frame))

    def close(self) -> None:
        """Start no more evaluations and wait for the running one to finish.

        The wait is not bounded: a thread still inside numpy when the
        interpreter exits aborts the process (an evaluation covers at most
        ``horizon_s`` of data and ``max_rows`` rows, so it ends).
        """
        with self._lock:
            self._closed = True
            t = self._thread
        if t is not None:
            t.join()

    def wait(self, timeout_s: float = 5.0) -> None:
        """Wait (bounded) for a running evaluation to finish."""
        t = self._thread
        if t is not None:
            t.join(timeout_s)


__all__ = ["ExplainFindings", "finding_line", "live_rules"]
