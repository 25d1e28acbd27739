"""Explain-rule findings in the live view: the rules run over the last minute of the recording.

``ExplainFindings`` evaluates: each ``run_once`` reads the rows stored since
the last look (by rowid, so no index and no scan), keeps the last
``horizon_s`` of them in memory, and runs the rules over them with the window
ending *now*. ``nccl-hang`` therefore sees a rank that has been silent while
its peers went on for longer than the threshold while the trace is still
running. It runs in a process of its own beside the recorder
(``gpuscope.tui.explain_process``), which spaces the evaluations by
``next_interval``.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gpuscope.model.findings import Finding, Severity
from gpuscope.store.attribution import LIVE_EVENT_COLUMNS, event_rows_after, newest_event_rowid
from gpuscope.store.connect import connect_reader
from gpuscope.store.sessions_read import session_wall_offsets

if TYPE_CHECKING:
    # The rules and the frame they read are imported by the first evaluation: the
    # live explain process starts at once, and one that a short command ends never loads them.
    from gpuscope.analysis.frame import EventFrame, Window
    from gpuscope.analysis.rules import Rule

# EventFrame.from_columns takes the live columns in their order: ts, dur, pid, tid, op, cgroup, bytes, handle,
# stream, arg0, arg1.
_NCOLS = len(LIVE_EVENT_COLUMNS)
MAX_LINES = 4


def _monotonic_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def live_rules(hang_threshold_ns: int | None = None, *, hang: bool = True) -> tuple[Rule, ...]:
    """The registry, with the hang rule at the live threshold (None: the rule's default), or without it."""
    from gpuscope.analysis.rules import RULES
    from gpuscope.analysis.rules.nccl_hang import DEFAULT_HANG_THRESHOLD_NS, NcclHangRule

    threshold = DEFAULT_HANG_THRESHOLD_NS if hang_threshold_ns is None else hang_threshold_ns
    return tuple(
        NcclHangRule(threshold) if r.id == NcclHangRule.id else r for r in RULES if hang or r.id != NcclHangRule.id
    )


def finding_line(f: Finding) -> str:
    return f"{f.severity.name} {f.kind}: {f.symptom.summary}"


class ExplainFindings:
    """The explain rules over the recent rows of the live database, one evaluation per ``run_once``.

    Args:
        db_path: the database the trace writes.
        hang_threshold_ns: silence after which a rank behind its peers is a hang.
        hang: evaluate nccl-hang (False when the recording agent checks it itself: ``agent.nccl_progress``).
        every_s: at most one evaluation per this many seconds (``next_interval``).
        horizon_s: the rules see this much of the recent recording.
        min_severity: findings below it are not shown (nccl-hang is always CRITICAL).
        max_rows: rows kept in memory at most, and read per evaluation at most. When more
            arrived since the last look (the first seconds of a busy trace keep every row), the
            older ones are skipped and the buffer starts afresh: the rules never see a gap in it.
        clock_ns: CLOCK_MONOTONIC ns, the clock of the events (tests pass a frozen one).
        cpu_share: evaluations use at most this share of one CPU: the next one is due
            ``max(every_s, cpu / cpu_share)`` after one that took ``cpu`` seconds of CPU.
            The first seconds of a busy trace store every row, and reading 200,000 of
            them back out of SQLite takes most of a second: unbounded, evaluations ran
            back to back and took a CPU from the traced program on a small machine.
        tracer_pids: the recording agent's processes, whose CPU is overhead and never a cause (default: this one).
    """

    def __init__(
        self,
        db_path: str | Path,
        *,
        hang_threshold_ns: int | None = None,
        hang: bool = True,
        every_s: float = 3.0,
        horizon_s: float = 60.0,
        min_severity: Severity = Severity.MEDIUM,
        max_rows: int = 200_000,
        clock_ns: Callable[[], int] = _monotonic_ns,
        cpu_share: float = 0.1,
        tracer_pids: frozenset[int] | None = None,
    ) -> None:
        self.db_path = Path(db_path)
        self._hang_threshold_ns = hang_threshold_ns
        self._hang = hang
        self._rules: tuple[Rule, ...] | None = None
        self.every_s = every_s
        self.horizon_ns = int(horizon_s * 1e9)
        self.min_severity = min_severity
        self.max_rows = max_rows
        self.clock_ns = clock_ns
        self.cpu_share = cpu_share
        self.tracer_pids = frozenset({os.getpid()}) if tracer_pids is None else tracer_pids
        self._last_rowid = 0
        self._cols = [np.zeros(0, dtype=np.int64) for _ in range(_NCOLS)]
        self.skipped_rows = 0

    @property
    def rules(self) -> tuple[Rule, ...]:
        """The rules evaluated (loaded at first use)."""
        if self._rules is None:
            self._rules = live_rules(self._hang_threshold_ns, hang=self._hang)
        return self._rules

    def next_interval(self, cpu_s: float) -> float:
        """Seconds from the start of one evaluation to the next, after one that took ``cpu_s`` of CPU."""
        return max(self.every_s, cpu_s / self.cpu_share) if self.cpu_share > 0 else self.every_s

    # -- one evaluation ---------------------------------------------------------

    def run_once(self) -> list[Finding]:
        """Read new rows and evaluate the rules over the horizon: the findings, most severe first."""
        from gpuscope.analysis.attribution import load_attribution
        from gpuscope.analysis.context import Context
        from gpuscope.analysis.coverage import load_coverage

        if not self.db_path.exists():
            return []
        # A connection per evaluation, closed after it: one held open would pin the WAL the
        # recorder checkpoints. Straight through SQLite, never ``open_recording`` (its format
        # sniffing is for files at rest, not one being written).
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
        # The tracer's CPU is overhead, never a cause to move away.
        ctx = Context(frame, window, attribution=attribution, tracer_pids=self.tracer_pids, coverage=coverage)
        found: list[Finding] = []
        for rule in self.rules:
            found.extend(rule.evaluate(ctx))
        found = [f for f in found if f.severity >= self.min_severity]
        found.sort(key=lambda f: (-f.severity, -f.lost_ns, f.kind))
        return found

    def _read_new(self, conn: sqlite3.Connection, now_ns: int) -> None:
        self._read_rows(conn)
        # Keep what ends inside the horizon, and at most max_rows (the newest).
        ts, dur = self._cols[0], self._cols[1]
        keep = ts + dur >= now_ns - self.horizon_ns
        if int(keep.sum()) > self.max_rows:
            keep &= np.arange(len(ts)) >= len(ts) - self.max_rows
        if not keep.all():
            self._cols = [c[keep] for c in self._cols]

    def _read_rows(self, conn: sqlite3.Connection) -> None:
        newest = newest_event_rowid(conn)
        if newest is not None and newest - self._last_rowid > self.max_rows:
            # Reading them all would take seconds: the rules see the newest max_rows, without a gap.
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


__all__ = ["ExplainFindings", "finding_line", "live_rules"]
