"""Read the ``sessions`` table: clocks, nodes and flags of each ``gpuscope trace`` run."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from gpuscope.store.statement import Statement
from gpuscope.store.stored_json import stored_json

ALL_SESSIONS = Statement("SELECT * FROM sessions ORDER BY id")
"""Every column of every session, oldest first (what ``Trace.sessions()`` shows)."""


@dataclass(frozen=True, slots=True)
class SessionClock:
    """Where a session ran and when it started, on both clocks."""

    session_id: int
    node: str
    started_wall_ns: int
    started_mono_ns: int


def session_clocks(conn: sqlite3.Connection) -> list[SessionClock]:
    """Read every session's node and start times, by id."""
    rows = conn.execute("SELECT id, node, started_wall_ns, started_mono_ns FROM sessions ORDER BY id").fetchall()
    return [SessionClock(int(sid), str(node), int(wall), int(mono)) for sid, node, wall, mono in rows]


def session_wall_span(conn: sqlite3.Connection, session_ids: tuple[int, ...]) -> tuple[int, int] | None:
    """(first start, last stop) of these sessions in wall-clock ns; a session still open counts to its start."""
    if not session_ids:
        return None
    marks = ",".join("?" * len(session_ids))
    row = conn.execute(
        "SELECT min(started_wall_ns), max(coalesce(stopped_mono_ns, started_mono_ns) - started_mono_ns "
        f"+ started_wall_ns) FROM sessions WHERE id IN ({marks})",
        session_ids,
    ).fetchone()
    return None if row is None or row[0] is None else (int(row[0]), int(row[1]))


def session_wall_offsets(conn: sqlite3.Connection) -> list[tuple[int, int]]:
    """Read (session id, ns to add to its monotonic timestamps to get wall-clock ns), by id."""
    rows = conn.execute("SELECT id, started_wall_ns - started_mono_ns FROM sessions ORDER BY id").fetchall()
    return [(int(sid), int(offset)) for sid, offset in rows]


def session_flags(conn: sqlite3.Connection) -> list[tuple[int, str | None]]:
    """Read (session id, its ``flags`` JSON text or None) of every session, in table order."""
    return [(int(sid), raw) for sid, raw in conn.execute("SELECT id, flags FROM sessions").fetchall()]


def session_flag_docs(conn: sqlite3.Connection) -> dict[int, dict[str, object]]:
    """Every session's ``flags`` as a JSON object by id; {} where there are none or they do not parse."""
    out: dict[int, dict[str, object]] = {}
    for sid, raw in session_flags(conn):
        doc = stored_json(raw)
        out[sid] = doc if isinstance(doc, dict) else {}
    return out


def traced_roots(conn: sqlite3.Connection) -> dict[int, frozenset[int] | None]:
    """Per session, the pids it was asked to trace (a launched command, ``--pid``); None where it traced every process.

    The traced processes are these and every process they forked (the
    ``process_fork`` rows, recorded for traced parents only). Other processes
    appear in a recording only through machine-wide host events and as culprits.
    """
    flags = session_flag_docs(conn)
    out: dict[int, frozenset[int] | None] = {}
    for sid, raw in conn.execute("SELECT id, targets FROM sessions").fetchall():
        pids = stored_json(raw)
        roots = frozenset(int(p) for p in pids if isinstance(p, int)) if isinstance(pids, list) else frozenset()
        # No roots: a trace of every process (or a file that does not say): every process is the run's own.
        every = flags.get(int(sid), {}).get("filter_targets") is False or not roots
        out[int(sid)] = None if every else roots
    return out


def last_session(conn: sqlite3.Connection) -> tuple[int, int] | None:
    """Return (id, events recorded) of the newest session, or None in an empty recording."""
    row = conn.execute("SELECT id, events_recorded FROM sessions ORDER BY id DESC LIMIT 1").fetchone()
    return (int(row[0]), int(row[1])) if row else None


def recording_origin_ns(conn: sqlite3.Connection) -> int | None:
    """Return when the recording started, on the monotonic clock of its last session; None without sessions.

    The start is the first session's start (what ``--from 30s`` counts from in
    every command), moved onto the clock explain analyses in: the last
    session's, whose wall-clock offset ``Window`` reports.
    """
    row = conn.execute(
        "SELECT min(started_wall_ns) - (SELECT started_wall_ns - started_mono_ns FROM sessions ORDER BY id DESC LIMIT 1) "
        "FROM sessions"
    ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def sessions_last_event_end(conn: sqlite3.Connection, session_ids: list[int]) -> dict[int, int]:
    """The end of each listed session's last event (its clock, ns), in one pass over the events.

    One grouped scan, whatever the number of sessions (one query per session read every event once a
    session: 50,000 sessions left unclosed by hand kept a reader busy past ten minutes). Sessions without
    events are absent.
    """
    if not session_ids:
        return {}
    wanted = set(session_ids)
    rows = conn.execute("SELECT session_id, max(ts_ns + duration_ns) FROM event_log GROUP BY session_id").fetchall()
    return {int(sid): int(end) for sid, end in rows if sid in wanted and end is not None}


@dataclass(frozen=True, slots=True)
class SessionState:
    """How one session ended (or did not), and what it lost.

    ``closed`` is False for a session still recording or one whose agent was
    killed or crashed: ``committed_wall_ns`` then says up to when its data is
    complete (None in files written before gpuscope recorded it).
    ``drops`` holds the tracer's drop counters by name (``dropped`` is the
    total of events the kernel could not hand over).
    """

    session_id: int
    node: str
    hostname: str | None
    agent_pid: int | None
    started_wall_ns: int
    stopped_wall_ns: int | None
    committed_wall_ns: int | None
    end_reason: str | None
    events_recorded: int
    events_dropped: int
    drops: dict[str, int] = field(default_factory=dict)

    @property
    def closed(self) -> bool:
        return self.stopped_wall_ns is not None


_STATE_COLUMNS = (
    "id",
    "node",
    "hostname",
    "agent_pid",
    "started_wall_ns",
    "stopped_wall_ns",
    "committed_wall_ns",
    "end_reason",
    "events_recorded",
    "events_dropped",
    "drops",
)


def session_states(conn: sqlite3.Connection) -> list[SessionState]:
    """Read how every session ended, by id (columns a file predates read as None)."""
    have = {r[1] for r in conn.execute("PRAGMA table_info(sessions)")}
    cols = ", ".join(c if c in have else f"NULL AS {c}" for c in _STATE_COLUMNS)
    out: list[SessionState] = []
    for row in conn.execute(f"SELECT {cols} FROM sessions ORDER BY id").fetchall():
        sid, node, host, pid, start, stop, committed, reason, recorded, dropped, drops = row
        parsed = stored_json(drops)
        out.append(
            SessionState(
                int(sid),
                str(node),
                host,
                None if pid is None else int(pid),
                int(start),
                None if stop is None else int(stop),
                None if committed is None else int(committed),
                reason,
                int(recorded or 0),
                int(dropped or 0),
                {str(k): int(v) for k, v in parsed.items() if isinstance(v, int)} if isinstance(parsed, dict) else {},
            )
        )
    return out
