"""``--session/--since/--from/--to/--pid/--node`` as TEMP views that shadow the event views.

The user's SQL is never edited. Instead, on the read-only connection, a TEMP
view named like each table or view that has ``session_id`` and ``ts_ns``
columns (``events``, ``cuda_calls``, ``sched_switches``, ``event_log``, …)
selects the filtered rows of its ``main.`` namesake; SQLite resolves unqualified names to the temp schema
first, so ``SELECT … FROM events`` sees only the window. ``main.events`` stays
reachable. Bounds are resolved to integers per session (monotonic ``ts_ns``,
so the ``ts_ns`` index is used) and pids to integers before they are written
into the view: no user text is pasted into SQL; node names are matched with a
bound parameter.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from gpuscope.errors import UsageError
from gpuscope.model.session_choice import LAST_RUN, SessionChoice
from gpuscope.model.times import TIME_FORMS, TimePoint
from gpuscope.model.units import DURATION_FORMS, parse_duration_ns
from gpuscope.store.session_scope import ChosenSessions, choose_sessions


def parse_time(text: str, flag: str) -> TimePoint:
    """Read a ``--from``/``--to`` time (every form of ``TIME_FORMS``); raises UsageError naming ``flag``."""
    try:
        return TimePoint.parse(text, flag)
    except ValueError:
        raise UsageError(f"{flag} {text}: not a time", remedy=f"give {TIME_FORMS}") from None


@dataclass(frozen=True, slots=True)
class EventFilter:
    """Which events a reader sees: by default every event of the last run (``sessions``).

    ``sessions``: which sessions (``--session``; the last run unless given).
    ``since_ns``: the last stretch of them, measured back from the end of
    their last call (as ``explain --since`` counts). ``start``/``end``:
    inclusive window, offsets counted from the start of those sessions.
    ``pids``/``nodes``: keep only these (any of them).
    """

    since_ns: int | None = None
    start: TimePoint | None = None
    end: TimePoint | None = None
    pids: tuple[int, ...] = ()
    nodes: tuple[str, ...] = ()
    sessions: SessionChoice = LAST_RUN

    @property
    def empty(self) -> bool:
        """No window, pid or node: only the sessions choose."""
        return self.since_ns is None and self.start is None and self.end is None and not self.pids and not self.nodes

    @classmethod
    def from_options(
        cls,
        since: str | None = None,
        start: str | None = None,
        end: str | None = None,
        pids: list[int] | tuple[int, ...] | None = None,
        nodes: list[str] | tuple[str, ...] | None = None,
        sessions: SessionChoice = LAST_RUN,
    ) -> EventFilter:
        """Build a filter from the ``--since/--from/--to/--pid/--node`` texts; raises UsageError on bad text."""
        since_ns = None
        if since is not None:
            try:
                since_ns = parse_duration_ns(since)
            except ValueError:
                raise UsageError(f"--since {since}: not a duration", remedy=f"give {DURATION_FORMS}") from None
        f = cls(
            since_ns=since_ns,
            start=parse_time(start, "--from") if start else None,
            end=parse_time(end, "--to") if end else None,
            pids=tuple(int(p) for p in pids or ()),
            nodes=tuple(nodes or ()),
            sessions=sessions,
        )
        if f.start is not None and f.end is not None and f.start.is_after(f.end):
            # An empty window is never what was meant: say so rather than answer "0 events".
            raise UsageError(f"--from {start} is after --to {end}", remedy="give the earlier time to --from")
        return f


@dataclass(frozen=True, slots=True)
class _Session:
    id: int
    wall_minus_mono: int
    start_wall_ns: int
    end_wall_ns: int


def _sessions(
    conn: sqlite3.Connection, nodes: tuple[str, ...], chosen: ChosenSessions, need_end: bool
) -> list[_Session]:
    """The chosen sessions of ``nodes`` (any node when empty), with their ends where ``need_end``."""
    ids = frozenset(chosen.ids)
    rows = [
        r
        for r in conn.execute("SELECT id, node, started_wall_ns, started_mono_ns, stopped_wall_ns FROM sessions")
        if int(r[0]) in ids and (not nodes or r[1] in nodes)
    ]
    # The end of a session is the end of its last call (as `explain` counts it); only --since and the
    # end- forms need it, and it costs a scan of the rows where the file holds several sessions.
    last: dict[int, int | None] = {}
    if need_end and rows and len(chosen.every) == 1:
        # One session: through the ts_ns index, among the calls that started in the final minute.
        (top,) = conn.execute("SELECT max(ts_ns) FROM event_log").fetchone()
        if top is not None:
            (last[rows[0][0]],) = conn.execute(
                "SELECT max(ts_ns + duration_ns) FROM event_log WHERE ts_ns >= ?", (int(top) - 60_000_000_000,)
            ).fetchone()
    elif need_end and rows:
        marks = ",".join("?" * len(rows))
        last = dict(
            conn.execute(
                "SELECT session_id, max(ts_ns + duration_ns) FROM event_log "
                f"WHERE session_id IN ({marks}) GROUP BY session_id",
                [r[0] for r in rows],
            ).fetchall()
        )
    out = []
    for sid, _node, wall0, mono0, stopped in rows:
        offset = int(wall0) - int(mono0)
        end_mono = last.get(sid)
        end = int(end_mono) + offset if end_mono is not None else int(stopped or wall0)
        out.append(_Session(int(sid), offset, int(wall0), end))
    return out


def _where(conn: sqlite3.Connection, f: EventFilter, chosen: ChosenSessions) -> str:
    """The WHERE clause (integers only) that selects the filtered rows."""
    ends = (f.start, f.end)
    need_end = f.since_ns is not None or any(p is not None and p.before_end_ns is not None for p in ends)
    sessions = _sessions(conn, f.nodes, chosen, need_end)
    if not sessions:
        return "0"
    rec_start = min(s.start_wall_ns for s in sessions)
    rec_end = max(s.end_wall_ns for s in sessions)
    lo: int | None = None
    hi: int | None = None

    if f.since_ns is not None:
        lo = rec_end - f.since_ns
    if f.start is not None:
        lo = max(lo, f.start.resolve(rec_start, rec_end)) if lo is not None else f.start.resolve(rec_start, rec_end)
    if f.end is not None:
        hi = f.end.resolve(rec_start, rec_end)
        if f.start is not None and lo is not None and f.start.resolve(rec_start, rec_end) > hi:
            # An offset against a Unix time: in order only once the recording's start and end are known.
            raise UsageError("--from is after --to in this recording", remedy="give the earlier time to --from")
    per_session = []
    for s in sessions:
        terms = [f"session_id = {s.id}"]
        if lo is not None:
            terms.append(f"ts_ns >= {lo - s.wall_minus_mono}")
        if hi is not None:
            terms.append(f"ts_ns <= {hi - s.wall_minus_mono}")
        per_session.append("(" + " AND ".join(terms) + ")")
    clause = "(" + " OR ".join(per_session) + ")"
    if f.pids:
        clause += " AND pid IN (" + ", ".join(str(int(p)) for p in f.pids) + ")"
    return clause


def apply_filter(conn: sqlite3.Connection, f: EventFilter) -> ChosenSessions:
    """Create the TEMP views that restrict the event views of ``conn`` to ``f``; returns the sessions read.

    Must run before the read-only authorizer is installed. ``query_only`` is
    lifted for the duration: ``mode=ro`` still keeps the file itself unwritable,
    and the temp schema lives in memory. Raises UsageError for a session the
    file does not hold.
    """
    chosen = choose_sessions(conn, f.sessions)
    if f.empty and chosen.whole:
        return chosen
    names = [r[0] for r in conn.execute("SELECT name FROM main.sqlite_master WHERE type IN ('table', 'view')")]
    where = _where(conn, f, chosen)
    targets = []
    for name in names:
        cols = {r[1] for r in conn.execute("SELECT * FROM pragma_table_info(?)", (name,))}
        if {"session_id", "ts_ns"} <= cols and ("pid" in cols or not f.pids):
            targets.append(name)
    conn.execute("PRAGMA query_only=0")
    try:
        for name in targets:
            quoted = '"' + name.replace('"', '""') + '"'
            conn.execute(f"CREATE TEMP VIEW {quoted} AS SELECT * FROM main.{quoted} WHERE {where}")
    finally:
        conn.execute("PRAGMA query_only=1")
    return chosen
