"""How a recording ended and what it lost, said the same way by every command.

A session is *closed* when its agent stopped it (``stopped_wall_ns`` set);
``end_reason`` then says whether it stopped because asked to ("stopped") or
early ("disk full", "error: ..."). A session that is not closed is either
still being recorded (its agent has the file open) or was left by an agent
that was killed or crashed: its data is complete up to its last commit
(``committed_wall_ns``). Who has the file open is read from ``/proc/locks``
(``gpuscope.store.liveness``), never by opening the file.

Drops are the events the kernel could not hand over: counted per source by
the agent (``sessions.drops``) and placed in time per second (``drop_log``;
files before it only have the counts). ``explain`` shows all of this and puts
caveats on the numbers it touches; ``query`` prints ``state_lines`` as one
note on stderr, so its data output stays machine-readable.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuscope.analysis.frame import BUCKET_NS, Window
from gpuscope.config import expand_home
from gpuscope.model.drops import DROP_SOURCES, drop_advice
from gpuscope.model.times import iso_utc
from gpuscope.store.aggregates_read import DropRow, drop_rows
from gpuscope.store.events_read import event_span
from gpuscope.store.liveness import recording_holders
from gpuscope.store.sessions_read import (
    SessionState,
    session_clocks,
    session_flag_docs,
    session_states,
    sessions_last_event_end,
)

# Sources whose losses are events (the ``dropped`` total); "stack" loses call stacks, "cpu_sample" on-CPU
# samples, "exec" command lines.
EVENT_SOURCES = ("cuda", "driver", "nccl", "host")
_SOURCE_ORDER = (*EVENT_SOURCES, "stack", "cpu_sample", "exec")


def iso_wall(wall_ns: int | None) -> str | None:
    """A Unix time in ns as ISO 8601 UTC to the millisecond (truncated, so "complete up to" never overstates)."""
    return None if wall_ns is None else iso_utc(wall_ns, 3)


@dataclass(frozen=True, slots=True)
class SessionStatus:
    """One session's state: "closed", "recording" (its agent has the file open), "not closed" or "imported".

    ``complete_until_wall_ns`` is up to when its data is complete, from its
    stop, its last commit, or (files that predate commit times) its last
    stored event: ``complete_until_from`` says which. ``holders``: other
    processes that have the file open. ``drops``: events lost by source.
    """

    session_id: int
    node: str
    state: str
    end_reason: str | None
    agent_pid: int | None
    holders: tuple[int, ...]
    started_wall_ns: int
    stopped_wall_ns: int | None
    complete_until_wall_ns: int | None
    complete_until_from: str | None
    events_recorded: int
    events_dropped: int
    drops: Mapping[str, int] = field(default_factory=dict)
    flags: Mapping[str, object] = field(default_factory=dict)

    @property
    def stopped_early(self) -> bool:
        return self.state == "closed" and self.end_reason not in (None, "stopped")

    def as_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "node": self.node,
            "state": self.state,
            "end_reason": self.end_reason,
            "agent_pid": self.agent_pid,
            "started_wall_ns": self.started_wall_ns,
            "stopped_wall_ns": self.stopped_wall_ns,
            "complete_until_wall_ns": self.complete_until_wall_ns,
            "complete_until": iso_wall(self.complete_until_wall_ns),
            "complete_until_from": self.complete_until_from,
            "events_recorded": self.events_recorded,
            "events_dropped": self.events_dropped,
            "drops": dict(self.drops),
        }


@dataclass(frozen=True, slots=True)
class SourceDrops:
    """The events one source lost over the whole recording, and in the analysed window.

    ``from_wall_ns``/``to_wall_ns``: the first and the end of the last second
    in which drops were logged (None when the file only has the counts).
    ``in_window``: drops logged in the seconds the window touches (a second's
    count may hold events lost in the second before, read once a second);
    ``unlocated``: drops not placed in time, of sessions the window overlaps;
    ``window_share``: ``in_window`` / (events of the source counted in the
    window + ``in_window``), when the counts are known.
    """

    source: str
    dropped: int
    from_wall_ns: int | None = None
    to_wall_ns: int | None = None
    in_window: int = 0
    unlocated: int = 0
    window_share: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "dropped": self.dropped,
            "from_wall_ns": self.from_wall_ns,
            "to_wall_ns": self.to_wall_ns,
            "from": iso_wall(self.from_wall_ns),
            "to": iso_wall(self.to_wall_ns),
            "in_window": self.in_window,
            "unlocated_in_window": self.unlocated,
            "window_share": None if self.window_share is None else round(self.window_share, 4),
        }


@dataclass(frozen=True, slots=True)
class RecordingState:
    """Every session's state, what each source lost, and the measured fix when events were dropped."""

    sessions: tuple[SessionStatus, ...]
    drops: tuple[SourceDrops, ...] = ()
    advice: str | None = None

    @property
    def closed(self) -> bool:
        return all(s.state in ("closed", "imported") for s in self.sessions)

    @property
    def complete_until_wall_ns(self) -> int | None:
        """Up to when every session is complete: the earliest such time of an open one, else the last stop."""
        open_ = [s for s in self.sessions if s.state in ("recording", "not closed")]
        if open_:
            times = [s.complete_until_wall_ns for s in open_]
            return None if any(t is None for t in times) else min(t for t in times if t is not None)
        stops = [s.complete_until_wall_ns for s in self.sessions if s.complete_until_wall_ns is not None]
        return max(stops) if stops else None

    @property
    def events_recorded(self) -> int:
        return sum(s.events_recorded for s in self.sessions)

    @property
    def events_dropped(self) -> int:
        """Events lost: the sessions' totals, or what the per-second log holds when it says more (a killed agent)."""
        logged = sum(d.dropped for d in self.drops if d.source in EVENT_SOURCES)
        return max(sum(s.events_dropped for s in self.sessions), logged)

    @property
    def lost_share(self) -> float:
        """Events lost among all the probes saw: dropped / (recorded + dropped)."""
        total = self.events_recorded + self.events_dropped
        return self.events_dropped / total if total else 0.0

    def source(self, name: str) -> SourceDrops | None:
        return next((d for d in self.drops if d.source == name), None)

    def notes(self) -> list[str]:
        """What a reader must know before trusting the numbers: state lines, then what was lost."""
        lines = state_lines(self.sessions)
        lost = drop_line(self)
        return [*lines, lost] if lost else lines

    def as_dict(self) -> dict[str, Any]:
        return {
            "closed": self.closed,
            "complete_until_wall_ns": self.complete_until_wall_ns,
            "complete_until": iso_wall(self.complete_until_wall_ns),
            "events_recorded": self.events_recorded,
            "events_dropped": self.events_dropped,
            "lost_share": round(self.lost_share, 4),
            "drops": [d.as_dict() for d in self.drops],
            "advice": self.advice,
            "sessions": [s.as_dict() for s in self.sessions],
            "notes": self.notes(),
        }


def _until(s: SessionStatus) -> str:
    at = iso_wall(s.complete_until_wall_ns)
    if at is None:
        return "up to a time the file does not record"
    if s.complete_until_from == "last event":
        return f"up to its last stored event, {at} (the file does not record its commits)"
    return f"up to {at}"


MAX_STATE_LINES = 5


def state_lines(sessions: tuple[SessionStatus, ...] | list[SessionStatus]) -> list[str]:
    """One sentence per session that is not closed or stopped early; none for complete ones.

    The one wording of a recording's state: ``explain`` prints these under
    "Recording:", ``query`` as its note on stderr.
    """
    lines = []
    told = [s for s in sessions if s.state in ("recording", "not closed") or s.stopped_early]
    if len(told) > MAX_STATE_LINES:
        # A sentence for each of thousands of sessions is no note: the newest ones, and how many before them.
        older, told = told[: -MAX_STATE_LINES + 1], told[-MAX_STATE_LINES + 1 :]
        lines.append(
            f"{len(older):,} earlier sessions ({older[0].session_id}–{older[-1].session_id}) were not closed or "
            "stopped early (each one's state: `gpuscope explain --session N`)"
        )
    for s in told:
        if s.state == "recording" and s.agent_pid is not None:
            lines.append(
                f"session {s.session_id} is still being recorded (gpuscope pid {s.agent_pid}): "
                f"it is complete {_until(s)}, and later events are not in this reading"
            )
        elif s.state == "recording":
            who = ", ".join(str(p) for p in s.holders)
            lines.append(
                f"session {s.session_id} is not closed and pid {who} has the file open: it may still be being "
                f"recorded; it is complete {_until(s)}"
            )
        elif s.state == "not closed":
            agent = f" (pid {s.agent_pid})" if s.agent_pid is not None else ""
            lines.append(
                f"session {s.session_id} was not closed: the recording agent{agent} stopped without closing it "
                f"(killed or crashed); it is complete {_until(s)}"
            )
        elif s.stopped_early:
            lines.append(
                f"session {s.session_id} stopped early ({s.end_reason}) at {iso_wall(s.stopped_wall_ns)}: it is "
                "complete up to then, and nothing after it was recorded"
            )
    return lines


def drop_line(state: RecordingState) -> str | None:
    """Say what was lost, by source and when ("N events dropped (x% of all events): cuda N (..)"); None: nothing."""
    if not state.drops:
        return None
    parts = []
    for d in state.drops:
        when = f" ({iso_wall(d.from_wall_ns)} to {iso_wall(d.to_wall_ns)})" if d.from_wall_ns is not None else ""
        what = {"stack": " call stacks", "cpu_sample": " on-CPU samples", "exec": " command lines"}.get(d.source, "")
        parts.append(f"{d.source} {d.dropped:,}{what}{when}")
    head = (
        f"{state.events_dropped:,} events dropped ({state.lost_share:.1%} of all events)"
        if state.events_dropped
        else "lost"
    )
    return f"{head}: {', '.join(parts)}"


def recording_note(conn: sqlite3.Connection, path: str | os.PathLike[str]) -> str | None:
    """The one-line note ``query`` prints on stderr: the state of sessions not closed or stopped early."""
    lines = state_lines(session_statuses(conn, path))
    return "note: " + "; ".join(lines) if lines else None


def session_statuses(
    conn: sqlite3.Connection, path: str | os.PathLike[str] | None, *, own_pid: int | None = None
) -> tuple[SessionStatus, ...]:
    """Read every session's state; ``path`` (the recording as the user named it) tells who has it open.

    ``own_pid``: this process (default ``os.getpid()``): its own reader's
    locks are not another holder.
    """
    own = os.getpid() if own_pid is None else own_pid
    states = session_states(conn)
    flags = session_flag_docs(conn)
    needs_holders = any(not s.closed for s in states)
    holders = sorted(recording_holders(expand_home(path)) - {own}) if needs_holders and path else []
    clocks = {c.session_id: c.started_wall_ns - c.started_mono_ns for c in session_clocks(conn)}
    last_id = states[-1].session_id if states else None
    # Files that predate commit times: a session's last stored event is the best bound there is, read for all
    # of them at once (the last session's through the time index: its events end the recording).
    unbounded = [
        s.session_id
        for s in states
        if s.stopped_wall_ns is None and s.committed_wall_ns is None and s.session_id != last_id
    ]
    ends = sessions_last_event_end(conn, unbounded)
    out = []
    for s in states:
        f = flags.get(s.session_id, {})
        until, until_from = _complete_until(conn, s, clocks.get(s.session_id, 0), s.session_id == last_id, ends)
        if f.get("imported_from"):
            state = "imported"  # another tool's session: whether it was closed is that tool's record
        elif s.closed:
            state = "closed"
        elif s.agent_pid is not None:
            state = "recording" if s.agent_pid == own or s.agent_pid in holders else "not closed"
        else:
            # No agent pid (files before it): any other process with the file open may be the recorder.
            state = "recording" if holders else "not closed"
        out.append(
            SessionStatus(
                s.session_id,
                s.node,
                state,
                s.end_reason,
                s.agent_pid,
                tuple(holders) if state == "recording" else (),
                s.started_wall_ns,
                s.stopped_wall_ns,
                until,
                until_from,
                s.events_recorded,
                s.events_dropped,
                {src: n for k, src in DROP_SOURCES.items() if (n := s.drops.get(k, 0)) > 0},
                f,
            )
        )
    return tuple(out)


def _complete_until(
    conn: sqlite3.Connection, s: SessionState, wall_offset_ns: int, is_last: bool, ends: Mapping[int, int]
) -> tuple[int | None, str | None]:
    if s.stopped_wall_ns is not None:
        return s.stopped_wall_ns, "stop"
    if s.committed_wall_ns is not None:
        return s.committed_wall_ns, "commit"
    if is_last:
        span = event_span(conn)
        last = None if span is None else span[1]
    else:
        last = ends.get(s.session_id)
    return (None, None) if last is None else (last + wall_offset_ns, "last event")


def read_recording_state(
    conn: sqlite3.Connection,
    path: str | os.PathLike[str] | None,
    *,
    window: Window | None = None,
    counted: Mapping[str, int] | None = None,
    own_pid: int | None = None,
) -> RecordingState:
    """Read the sessions' states and drops; with ``window``, also what each source lost inside it.

    ``counted``: events of each source counted in the window (from the
    aggregates), for the share lost; without it shares are None.
    """
    sessions = session_statuses(conn, path, own_pid=own_pid)
    rows = drop_rows(conn)
    drops = tuple(_source_drops(conn, sessions, rows, window, counted or {}))
    advice = None
    if any(d.source in EVENT_SOURCES for d in drops):
        worst = max(sessions, key=lambda s: sum(n for src, n in s.drops.items() if src in EVENT_SOURCES))
        advice = drop_advice(worst.flags)
    return RecordingState(sessions, drops, advice)


def _source_drops(
    conn: sqlite3.Connection,
    sessions: tuple[SessionStatus, ...],
    rows: list[DropRow],
    window: Window | None,
    counted: Mapping[str, int],
) -> list[SourceDrops]:
    clocks = {c.session_id: c for c in session_clocks(conn)}
    offsets = {sid: c.started_wall_ns - c.started_mono_ns for sid, c in clocks.items()}
    logged: dict[tuple[int, str], int] = {}
    seconds: dict[str, list[int]] = {}
    in_window: dict[str, int] = {}
    for sid, bucket, source, n in rows:
        logged[(sid, source)] = logged.get((sid, source), 0) + n
        seconds.setdefault(source, []).append(bucket + offsets.get(sid, 0))
        # Counters are read once a second: a second's drops may have happened in the second before it.
        if window is not None and bucket - BUCKET_NS < window.end_ns and bucket + BUCKET_NS > window.start_ns:
            in_window[source] = in_window.get(source, 0) + n
    totals: dict[str, int] = {}
    unlocated: dict[str, int] = {}
    for s in sessions:
        for source, n in s.drops.items():
            log = logged.get((s.session_id, source), 0)
            totals[source] = totals.get(source, 0) + max(n, log)
            if window is not None and n > log and _overlaps(s, offsets.get(s.session_id, 0), window):
                unlocated[source] = unlocated.get(source, 0) + n - log
    for (sid, source), n in logged.items():
        if source not in _session_drops(sessions, sid):
            totals[source] = totals.get(source, 0) + n  # logged, but not in the session's counters
    out = []
    for source in sorted(totals, key=lambda x: _SOURCE_ORDER.index(x) if x in _SOURCE_ORDER else len(_SOURCE_ORDER)):
        when = seconds.get(source)
        lost = in_window.get(source, 0)
        have = counted.get(source)
        out.append(
            SourceDrops(
                source,
                totals[source],
                min(when) if when else None,
                max(when) + BUCKET_NS if when else None,
                lost,
                unlocated.get(source, 0),
                lost / (have + lost) if have is not None and have + lost > 0 else None,
            )
        )
    return [d for d in out if d.dropped > 0]


def _session_drops(sessions: tuple[SessionStatus, ...], session_id: int) -> Mapping[str, int]:
    return next((s.drops for s in sessions if s.session_id == session_id), {})


def _overlaps(s: SessionStatus, wall_offset_ns: int, window: Window) -> bool:
    """Whether a session's time (on its monotonic clock) meets the window."""
    start = s.started_wall_ns - wall_offset_ns
    end = None if s.complete_until_wall_ns is None else s.complete_until_wall_ns - wall_offset_ns
    return start <= window.end_ns and (end is None or end >= window.start_ns)
