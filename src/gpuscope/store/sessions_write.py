"""Write the ``sessions`` row: created when a recording starts, counted while it runs, closed when it stops."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

_INSERT_SESSION = (
    "INSERT INTO sessions(uuid, node, hostname, kernel, gpuscope_version, libbpf_version, started_wall_ns, "
    "started_mono_ns, argv, flags, agent_pid) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_UPDATE_COUNTS = (
    "UPDATE sessions SET events_recorded = ?, events_dropped = ?, drops = ?, targets = ?, libraries = ? WHERE id = ?"
)
_CLOSE_SESSION = (
    "UPDATE sessions SET events_recorded = ?, events_dropped = ?, drops = ?, targets = ?, libraries = ?, "
    "stopped_wall_ns = ?, stopped_mono_ns = ?, committed_wall_ns = coalesce(?, committed_wall_ns), "
    "committed_mono_ns = coalesce(?, committed_mono_ns), end_reason = ? WHERE id = ?"
)
_MARK_COMMITTED = "UPDATE sessions SET committed_wall_ns = ?, committed_mono_ns = ? WHERE id = ?"
_MARK_EVENTS = "UPDATE sessions SET events_recorded = ? WHERE id = ?"


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """What is known about a recording when it starts; ``flags`` are the options it runs with."""

    uuid: str
    node: str
    hostname: str
    kernel: str
    gpuscope_version: str
    libbpf_version: str
    started_wall_ns: int
    started_mono_ns: int
    argv: list[str]
    flags: dict[str, Any]
    agent_pid: int | None = None


@dataclass(frozen=True, slots=True)
class SessionCounts:
    """What a recording has counted so far.

    ``drops`` holds the tracer's counters by name, ``targets`` the pids asked
    for, ``libraries`` one ``{"path", "kind", "version", "probes"}`` mapping
    per library probed. The writer thread stores them later, so a caller
    hands over values it no longer changes (tuples, a fresh dict).
    """

    events_recorded: int
    events_dropped: int
    drops: dict[str, int]
    targets: tuple[int, ...]
    libraries: tuple[dict[str, Any], ...]

    def _params(self) -> tuple[object, ...]:
        return (
            self.events_recorded,
            self.events_dropped,
            json.dumps(self.drops, sort_keys=True),
            json.dumps(self.targets),
            json.dumps(self.libraries),
        )


def create_session(conn: sqlite3.Connection, info: SessionInfo) -> int:
    """Insert the row of a recording that starts now; return its id."""
    cur = conn.execute(
        _INSERT_SESSION,
        (
            info.uuid,
            info.node,
            info.hostname,
            info.kernel,
            info.gpuscope_version,
            info.libbpf_version,
            info.started_wall_ns,
            info.started_mono_ns,
            json.dumps(info.argv),
            json.dumps(info.flags, sort_keys=True),
            info.agent_pid,
        ),
    )
    return int(cur.lastrowid or 0)


def set_session_flag(conn: sqlite3.Connection, session_id: int, key: str, value: object) -> None:
    """Set one key of a session's ``flags`` (a JSON object) to a JSON value."""
    conn.execute(
        "UPDATE sessions SET flags = json_set(coalesce(flags, '{}'), ?, json(?)) WHERE id = ?",
        ("$." + key, json.dumps(value), session_id),
    )


def update_session_counts(conn: sqlite3.Connection, session_id: int, counts: SessionCounts) -> None:
    """Store what a running recording has counted so far."""
    conn.execute(_UPDATE_COUNTS, (*counts._params(), session_id))


def mark_committed(
    conn: sqlite3.Connection, session_id: int, wall_ns: int, mono_ns: int, events_seen: int | None = None
) -> None:
    """Store that everything read up to this moment is in the transaction now committing (and, given, how many
    events were read up to then: ``events_recorded`` then says what the file holds after a SIGKILL too)."""
    conn.execute(_MARK_COMMITTED, (wall_ns, mono_ns, session_id))
    if events_seen is not None:
        conn.execute(_MARK_EVENTS, (events_seen, session_id))


def close_session(
    conn: sqlite3.Connection,
    session_id: int,
    counts: SessionCounts,
    *,
    stopped_wall_ns: int,
    stopped_mono_ns: int,
    end_reason: str = "stopped",
    complete: bool = True,
) -> None:
    """Store a recording's final counts, when it stopped and why ("stopped", "disk full", ...).

    ``complete``: everything read was committed, so the session is complete up to its stop. False after the
    store failed (a full disk): it stays complete only up to its last commit (``mark_committed``).
    """
    committed = (stopped_wall_ns, stopped_mono_ns) if complete else (None, None)
    conn.execute(
        _CLOSE_SESSION,
        (*counts._params(), stopped_wall_ns, stopped_mono_ns, *committed, end_reason, session_id),
    )
