"""The versioned schema: ordered migrations, each recorded once.

Every migration is appended, never edited: a database records the versions it
has applied in ``schema_migrations`` and in ``PRAGMA user_version``. See
docs/schema.md for what each table, view and column means (a test keeps the
two in sync).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuscope.model.ops import OPS, Source


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    description: str
    sql: str


_V1 = """
CREATE TABLE sessions (
    id INTEGER PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    node TEXT NOT NULL,
    hostname TEXT,
    kernel TEXT,
    gpuscope_version TEXT,
    libbpf_version TEXT,
    started_wall_ns INTEGER NOT NULL,
    started_mono_ns INTEGER NOT NULL,
    stopped_wall_ns INTEGER,
    stopped_mono_ns INTEGER,
    argv TEXT,
    flags TEXT,
    targets TEXT,
    libraries TEXT,
    events_recorded INTEGER NOT NULL DEFAULT 0,
    events_dropped INTEGER NOT NULL DEFAULT 0,
    drops TEXT
);
CREATE TABLE sources (
    name TEXT PRIMARY KEY,
    description TEXT NOT NULL
);
CREATE TABLE ops (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    source TEXT NOT NULL REFERENCES sources(name),
    kind TEXT NOT NULL,
    description TEXT NOT NULL
);
CREATE TABLE comms (
    id INTEGER PRIMARY KEY,
    comm TEXT NOT NULL UNIQUE
);
CREATE TABLE processes (
    session_id INTEGER NOT NULL REFERENCES sessions(id),
    pid INTEGER NOT NULL,
    comm TEXT,
    cmdline TEXT,
    exe TEXT,
    cgroup_id INTEGER,
    cgroup_path TEXT,
    first_seen_ns INTEGER NOT NULL,
    PRIMARY KEY (session_id, pid)
);
CREATE TABLE event_log (
    id INTEGER PRIMARY KEY,
    session_id INTEGER NOT NULL,
    ts_ns INTEGER NOT NULL,
    duration_ns INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    tid INTEGER NOT NULL,
    comm_id INTEGER,
    cgroup_id INTEGER NOT NULL,
    op_id INTEGER NOT NULL,
    flags INTEGER NOT NULL,
    ret INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    handle INTEGER NOT NULL,
    stream INTEGER NOT NULL,
    arg0 INTEGER NOT NULL,
    arg1 INTEGER NOT NULL
);
CREATE INDEX event_log_ts ON event_log(ts_ns);
CREATE VIEW events AS
SELECT
    e.id AS id,
    s.node || ':' || e.id AS event_id,
    e.session_id AS session_id,
    s.node AS node,
    e.ts_ns AS ts_ns,
    e.ts_ns - s.started_mono_ns + s.started_wall_ns AS wall_ns,
    e.pid AS pid,
    e.tid AS tid,
    c.comm AS comm,
    e.cgroup_id AS cgroup_id,
    o.source AS source,
    o.name AS op,
    e.duration_ns AS duration_ns,
    e.bytes AS bytes,
    e.ret AS ret,
    e.stream AS stream,
    e.handle AS handle,
    e.arg0 AS arg0,
    e.arg1 AS arg1,
    e.flags AS flags
FROM event_log e
JOIN sessions s ON s.id = e.session_id
LEFT JOIN ops o ON o.id = e.op_id
LEFT JOIN comms c ON c.id = e.comm_id;
CREATE VIEW cuda_calls AS
SELECT
    ev.*,
    CASE WHEN o.kind = 'copy' THEN
        CASE ev.arg0 WHEN 0 THEN 'H2H' WHEN 1 THEN 'H2D' WHEN 2 THEN 'D2H' WHEN 3 THEN 'D2D' ELSE 'default' END
    END AS direction,
    CASE WHEN o.kind = 'launch' THEN ev.handle END AS kernel,
    CASE WHEN o.kind = 'launch' THEN (ev.arg0 & 4294967295) * ((ev.arg0 >> 32) & 65535) * ((ev.arg0 >> 48) & 65535) END
        AS grid_blocks,
    CASE WHEN o.kind = 'launch' THEN (ev.arg1 & 4294967295) * ((ev.arg1 >> 32) & 65535) * ((ev.arg1 >> 48) & 65535) END
        AS block_threads
FROM events ev
JOIN ops o ON o.name = ev.op
WHERE ev.source IN ('cuda', 'driver');
CREATE VIEW sched_switches AS
SELECT
    ev.id, ev.event_id, ev.session_id, ev.node, ev.ts_ns, ev.wall_ns, ev.pid, ev.tid, ev.comm, ev.cgroup_id,
    ev.duration_ns AS off_cpu_ns,
    ev.arg0 AS preempted,
    ev.arg1 AS prev_state,
    ev.handle >> 32 AS by_pid,
    ev.handle & 4294967295 AS by_tid,
    ev.stream AS by_cgroup_id
FROM events ev
WHERE ev.op = 'sched_switch';
"""

MIGRATIONS: list[Migration] = [
    Migration(1, "sessions, events, ops lookup, processes", _V1),
]

SCHEMA_VERSION = MIGRATIONS[-1].version

SOURCE_DESCRIPTIONS = {
    Source.CUDA: "CUDA Runtime API (libcudart) uprobes",
    Source.DRIVER: "CUDA Driver API (libcuda) uprobes",
    Source.HOST: "kernel tracepoints: scheduler and process lifecycle",
}


def lookup_rows() -> tuple[list[tuple[str, str]], list[tuple[int, str, str, str, str]]]:
    """Rows of the sources and ops lookup tables, refreshed at every open."""
    sources = [(s.value, d) for s, d in SOURCE_DESCRIPTIONS.items()]
    ops = [(int(i.op), i.op.name, i.source.value, i.kind.value, i.description) for i in OPS.values()]
    return sources, ops
