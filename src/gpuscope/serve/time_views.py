"""The dashboard's time views: the timeline, the thread lanes and the slowest calls of a span, from one read.

A span (wall clock: ``since``, or ``from``/``to``, within the sessions read)
is read once as a frame of its events, kept while the recording is unchanged,
and every view of it is computed from that frame and kept too: a page asks
for the timeline and the lanes of the same span together, on every refresh.
``Api`` (gpuscope.serve.http_api) is these views and the rest of /api/v1.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuscope.analysis.attribution import load_attribution
from gpuscope.analysis.engine import ExplainOptions, resolve_window
from gpuscope.analysis.frame import EventFrame, Window, load_frame
from gpuscope.analysis.lanes import LaneIntervals, lane_intervals, reduce_lanes
from gpuscope.analysis.timeline import op_timeline
from gpuscope.model.session_choice import LAST_RUN, SessionChoice
from gpuscope.model.times import TimePoint
from gpuscope.recording.open import open_recording
from gpuscope.serve.cache import ReportCache
from gpuscope.stacks.frames import frames_from_json
from gpuscope.store import dashboard_read as store
from gpuscope.store.connect import file_signature
from gpuscope.store.cpu_samples_read import stack_frames_json
from gpuscope.store.sessions_read import session_wall_offsets


class TimeViews:
    """The time views of the recording at ``db`` (``read`` opens a read-only connection per read)."""

    db: Path

    def __init__(self) -> None:
        # The events of the span the timeline and the lanes show (one read serves both), and the views of it.
        self._frames = ReportCache(size=2)
        self._views = ReportCache(size=8)
        # A window's every event by its bounds (the events' clock): explain's report of the page's window reads
        # the same rows as its time views, once for both.
        self._whole = ReportCache(size=2)

    def read(self, read: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``read(conn, *args, **kwargs)`` on a read-only connection of its own."""
        conn = open_recording(self.db)
        try:
            return read(conn, *args, **kwargs)
        finally:
            conn.close()

    def timeline(
        self,
        since_ns: int | None = None,
        start: TimePoint | None = None,
        end: TimePoint | None = None,
        buckets: int = 120,
        sessions: SessionChoice = LAST_RUN,
    ) -> dict[str, Any]:
        """Per time bucket: each op's call count, mean and max latency, and the host's off-CPU and I/O events.

        ``start``/``end`` (resolved against the sessions read) or ``since_ns`` choose the span, ``buckets`` its
        resolution.
        """
        span = self._wall_span(since_ns, start, end, sessions)
        if span is None:
            return {"start_wall_ns": None, "end_wall_ns": None, "bucket_ns": None, "series": []}
        first, last = span
        width = max(1, -(-(last - first) // buckets))
        series = self._views.get(
            ("timeline", first, last, width, sessions),
            file_signature(self.db),
            lambda: self._op_timeline(first, last, width, sessions),
        )
        return {
            "start_wall_ns": first,
            "end_wall_ns": last,
            "bucket_ns": width,
            "series": series,
        }

    def _op_timeline(self, first: int, last: int, width: int, sessions: SessionChoice) -> list[dict[str, object]]:
        w, frame = self._span_frame(first, last, sessions)
        # The buckets are the span's, in wall time: its start in the window's clock is first - the offset.
        return [s.as_dict() for s in op_timeline(frame, first - w.wall_offset_ns, last - w.wall_offset_ns, width)]

    def _span_frame(self, first: int, last: int, sessions: SessionChoice) -> tuple[Window, EventFrame]:
        """The window of wall span [first, last] of ``sessions`` and its events, read once while unchanged."""
        opts = ExplainOptions(from_wall_ns=first, to_wall_ns=last, sessions=sessions)

        def read(conn: sqlite3.Connection) -> tuple[Window, EventFrame]:
            w = resolve_window(conn, opts)
            return w, self.whole_frame(conn, w.start_ns, w.end_ns)

        found: tuple[Window, EventFrame] = self._frames.get(
            (first, last, sessions), file_signature(self.db), lambda: self.read(read)
        )
        return found

    def whole_frame(self, conn: sqlite3.Connection, start_ns: int, end_ns: int) -> EventFrame:
        """Every event of [start_ns, end_ns] (read through ``conn`` once while the recording is unchanged)."""
        found: EventFrame = self._whole.get(
            (start_ns, end_ns), file_signature(self.db), lambda: load_frame(conn, start_ns, end_ns)
        )
        return found

    def _wall_span(
        self, since_ns: int | None, start: TimePoint | None, end: TimePoint | None, sessions: SessionChoice
    ) -> tuple[int, int] | None:
        """The wall-clock span a time view reads: ``start``/``end`` (resolved against the sessions read) or the
        last ``since_ns``, within the sessions' bounds; None when they hold nothing."""
        lo, hi = self.read(session_wall_bounds, sessions)
        if lo is None:
            return None
        first, last = (hi - since_ns if since_ns is not None else lo), hi
        if start is not None:
            first = max(lo, start.resolve(lo, hi))
        if end is not None:
            last = min(hi, end.resolve(lo, hi))
        return first, max(last, first + 1)

    def lanes(
        self,
        since_ns: int | None = None,
        start: TimePoint | None = None,
        end: TimePoint | None = None,
        width: int = 600,
        sessions: SessionChoice = LAST_RUN,
    ) -> dict[str, Any]:
        """Per thread that made GPU calls (the busiest first): its shares of each of ``width`` intervals in GPU
        calls, preempted and blocked (gpuscope.analysis.lanes), over the span ``timeline`` would read."""
        span = self._wall_span(since_ns, start, end, sessions)
        if span is None:
            return {"start_wall_ns": None, "end_wall_ns": None, "width": width, "lanes": []}
        first, last = span
        found = self._views.get(
            ("lanes", first, last, width, sessions),
            file_signature(self.db),
            lambda: self._thread_lanes(first, last, width, sessions),
        )
        return {"start_wall_ns": first, "end_wall_ns": last, "width": width, "lanes": found}

    def _thread_lanes(self, first: int, last: int, width: int, sessions: SessionChoice) -> list[dict[str, object]]:
        w, _ = self._span_frame(first, last, sessions)
        found = self.lane_intervals(first, last, sessions)
        return [x.as_dict() for x in reduce_lanes(found, w.start_ns, w.end_ns, width)]

    def lane_intervals(self, first: int, last: int, sessions: SessionChoice) -> list[LaneIntervals]:
        """The threads' merged intervals of a span, kept: any width of its lanes is then a cheap reduction."""

        def read() -> list[LaneIntervals]:
            w, frame = self._span_frame(first, last, sessions)
            return lane_intervals(frame, w.start_ns, w.end_ns, ranks=self.read(_ranks))

        found: list[LaneIntervals] = self._views.get(
            ("lane intervals", first, last, sessions), file_signature(self.db), read
        )
        return found

    def time_views_ahead(self, sessions: SessionChoice) -> None:
        """Compute what the page's first time views read (its span's events, timeline and lane intervals)."""
        self.timeline(sessions=sessions)
        span = self._wall_span(None, None, None, sessions)
        if span is not None:
            self.lane_intervals(*span, sessions)

    def calls(
        self,
        since_ns: int | None = None,
        start: TimePoint | None = None,
        end: TimePoint | None = None,
        limit: int = 10,
        sessions: SessionChoice = LAST_RUN,
    ) -> dict[str, Any]:
        """The slowest GPU calls that start in the span ``timeline`` would read, slowest first, each with its
        stack (frames innermost first, rendered as ``stacks`` shows them; null for a call without one)."""
        span = self._wall_span(since_ns, start, end, sessions)
        if span is None:
            return {"start_wall_ns": None, "end_wall_ns": None, "calls": []}
        first, last = span
        opts = ExplainOptions(from_wall_ns=first, to_wall_ns=last, sessions=sessions)
        rows: list[dict[str, Any]] = self.read(_slowest_calls, opts, limit)
        return {"start_wall_ns": first, "end_wall_ns": last, "calls": rows}


def session_wall_bounds(conn: sqlite3.Connection, sessions: SessionChoice) -> tuple[int | None, int | None]:
    """The first and last wall time of the sessions read (every event's for the whole recording)."""
    if not store.has_events(conn):
        return None, None
    w = resolve_window(conn, ExplainOptions(sessions=sessions))
    if w.part is not None or len({offset for _, offset in session_wall_offsets(conn)}) == 1:
        # One clock for all that is read: the window's bounds, found through the time index. (The events'
        # wall times were a scan of every row: 0.5 s on a million, before each timeline and lanes answer.)
        return w.start_ns + w.wall_offset_ns, w.end_ns + w.wall_offset_ns
    # Sessions on clocks of their own (merged from several nodes, or the wall clock stepped between runs).
    return store.wall_bounds(conn)


def _slowest_calls(conn: sqlite3.Connection, opts: ExplainOptions, limit: int) -> list[dict[str, Any]]:
    w = resolve_window(conn, opts)
    rows = store.slowest_calls(conn, w.start_ns, w.end_ns, limit)
    texts = stack_frames_json(conn, sorted({int(r["stack_hash"]) for r in rows if r["stack_hash"] is not None}))
    for r in rows:
        h = r.pop("stack_hash")
        text = texts.get(int(h)) if h is not None else None
        r["frames"] = [f.render() for f in frames_from_json(text)] if text is not None else None
    return rows


def _ranks(conn: sqlite3.Connection) -> dict[int, int]:
    """Each process's rank: its RANK (or equivalent) where recorded, else its rank in its widest communicator
    (the world's, not a sub-group's)."""
    attribution = load_attribution(conn)
    widest: dict[int, tuple[int, int]] = {}
    for (pid, _), c in attribution.communicators.items():
        if pid not in widest or c.nranks > widest[pid][0]:
            widest[pid] = (c.nranks, c.rank)
    return {**{pid: rank for pid, (_, rank) in widest.items()}, **attribution.ranks}
