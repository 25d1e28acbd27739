"""The versioned schema: ordered migrations, each recorded once.

Every migration is appended, never edited: a database records the versions it
has applied in ``schema_migrations`` and in ``PRAGMA user_version``. See
docs/schema.md for what each table, view and column means (a test keeps the
two in sync).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuscope.model.ops import OPS, Source
from gpuscope.store.coverage import COVERAGE_DDL
from gpuscope.store.cpu_samples import CPU_SAMPLES_DDL
from gpuscope.store.schema_attribution import ATTRIBUTION_DDL
from gpuscope.store.schema_imports import MERGE_IMPORT_DDL


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

_V2 = """
CREATE TABLE findings (
    id INTEGER PRIMARY KEY,
    session_id INTEGER REFERENCES sessions(id),
    window_start_ns INTEGER NOT NULL,
    window_end_ns INTEGER NOT NULL,
    severity TEXT NOT NULL,
    kind TEXT NOT NULL,
    finding_id TEXT NOT NULL,
    symptom TEXT NOT NULL,
    causes TEXT NOT NULL,
    fix TEXT NOT NULL,
    lost_ns INTEGER NOT NULL DEFAULT 0,
    created_at_ns INTEGER NOT NULL
);
CREATE INDEX findings_session ON findings(session_id, created_at_ns);
"""

# Exact per-second aggregates of every event (selective storage keeps only
# some rows; counts, rates and percentiles come from here). The time index on
# event_log costs a fifth of the insert rate while tracing, so it is built when
# a session ends instead (store.retention.build_indexes).
_V4_AGGREGATES = """
DROP INDEX IF EXISTS event_log_ts;
CREATE TABLE event_aggregates (
    session_id INTEGER NOT NULL,
    bucket_ns INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    op_id INTEGER NOT NULL,
    count INTEGER NOT NULL,
    stored INTEGER NOT NULL,
    sum_duration_ns INTEGER NOT NULL,
    min_duration_ns INTEGER NOT NULL,
    max_duration_ns INTEGER NOT NULL,
    sum_bytes INTEGER NOT NULL,
    histogram BLOB,
    PRIMARY KEY (session_id, bucket_ns, pid, op_id)
);
CREATE VIEW aggregates AS
SELECT
    a.session_id AS session_id,
    s.node AS node,
    a.bucket_ns AS bucket_ns,
    a.bucket_ns - s.started_mono_ns + s.started_wall_ns AS wall_ns,
    a.pid AS pid,
    o.source AS source,
    o.name AS op,
    a.count AS count,
    a.stored AS stored,
    a.sum_duration_ns AS sum_duration_ns,
    a.min_duration_ns AS min_duration_ns,
    a.max_duration_ns AS max_duration_ns,
    a.sum_bytes AS sum_bytes,
    a.histogram AS histogram
FROM event_aggregates a
JOIN sessions s ON s.id = a.session_id
LEFT JOIN ops o ON o.id = a.op_id;
"""

# Call stacks of CUDA calls, deduplicated (gpuscope.stacks writes them).
_V6_STACKS = """
CREATE TABLE stacks (
    hash INTEGER PRIMARY KEY,
    frames TEXT NOT NULL,
    call_site TEXT,
    native_depth INTEGER NOT NULL,
    python_depth INTEGER NOT NULL,
    marker TEXT
);
CREATE TABLE event_stacks (
    session_id INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    tid INTEGER NOT NULL,
    ts_ns INTEGER NOT NULL,
    stack_hash INTEGER NOT NULL,
    PRIMARY KEY (session_id, tid, ts_ns)
) WITHOUT ROWID;
CREATE VIEW event_call_stacks AS
SELECT
    ev.*,
    st.hash AS stack_hash,
    st.call_site AS call_site,
    st.frames AS frames,
    st.marker AS stack_marker
FROM events ev
JOIN event_stacks es ON es.session_id = ev.session_id AND es.tid = ev.tid AND es.ts_ns = ev.ts_ns
JOIN stacks st ON st.hash = es.stack_hash;
CREATE VIEW stack_frames AS
SELECT
    st.hash AS stack_hash,
    CAST(f.key AS INTEGER) AS depth,
    json_extract(f.value, '$.kind') AS kind,
    json_extract(f.value, '$.function') AS function,
    json_extract(f.value, '$.file') AS file,
    json_extract(f.value, '$.line') AS line,
    json_extract(f.value, '$.module') AS module,
    json_extract(f.value, '$.offset') AS offset,
    json_extract(f.value, '$.marker') AS marker
FROM stacks st, json_each(st.frames) f;
"""

# How a recording ended, and up to when it is complete. ``committed_*_ns`` is
# the moment up to which everything the agent had read from the kernel is
# committed (moved forward with every commit, at most 250 ms apart): after a
# SIGKILL or a crash, ``stopped_*`` stays NULL and this says how far the
# recording can be trusted. ``end_reason`` is NULL while recording (or after a
# crash), "stopped" after a clean stop, else why recording stopped early
# ("disk full", "error: ..."). ``agent_pid`` lets analysis tell the tracer's
# own CPU time from the workload's neighbours. ``drop_log`` says when events
# were dropped: per second (monotonic bucket, as in event_aggregates) and per
# source ("cuda", "driver", "nccl", "host"; "stack" for call stacks only), so
# a number computed over a window knows whether it is a lower bound.
_V7_DURABILITY = """
ALTER TABLE sessions ADD COLUMN agent_pid INTEGER;
ALTER TABLE sessions ADD COLUMN committed_wall_ns INTEGER;
ALTER TABLE sessions ADD COLUMN committed_mono_ns INTEGER;
ALTER TABLE sessions ADD COLUMN end_reason TEXT;
CREATE TABLE drop_log (
    session_id INTEGER NOT NULL,
    bucket_ns INTEGER NOT NULL,
    source TEXT NOT NULL,
    dropped INTEGER NOT NULL,
    PRIMARY KEY (session_id, bucket_ns, source)
);
"""

# The stack of most calls rides on their own row: the call-site design
# (gpuscope.stacks.policy) knows it when the row is written, and a second row
# per call in event_stacks cost the recorder more than the row itself. 0: no
# stack on the row (a call without one, or one linked through event_stacks).
# event_stacks keeps the links written apart from the row (a call whose full
# stack was taken with it, or whose stack arrived later); it wins when both exist.
_V8_ROW_STACKS = """
ALTER TABLE event_log ADD COLUMN stack_hash INTEGER;
DROP VIEW event_call_stacks;
CREATE VIEW event_call_stacks AS
SELECT
    ev.*,
    st.hash AS stack_hash,
    st.call_site AS call_site,
    st.frames AS frames,
    st.marker AS stack_marker
FROM events ev
JOIN event_log el ON el.id = ev.id
LEFT JOIN event_stacks es ON es.session_id = ev.session_id AND es.tid = ev.tid AND es.ts_ns = ev.ts_ns
JOIN stacks st ON st.hash = coalesce(es.stack_hash, nullif(el.stack_hash, 0));
"""

_V9_SYSTEM = """
CREATE TABLE system_samples (
    session_id INTEGER NOT NULL REFERENCES sessions(id),
    wall_ns INTEGER NOT NULL,
    cpu_pct REAL,
    mem_pct REAL,
    mem_available_bytes INTEGER,
    swap_used_bytes INTEGER,
    load1 REAL,
    cpus INTEGER,
    PRIMARY KEY (session_id, wall_ns)
);
"""

# A columnar copy of the event rows for the analysis (gpuscope.store.blocks):
# one row per block of contiguous ids. A row deleted or updated by anything
# but retention (which trims the block itself) drops its block, so the rows are
# read as rows again; the triggers cost nothing while rows are only appended.
_V10_BLOCKS = """
CREATE TABLE event_blocks (
    first_id INTEGER PRIMARY KEY,
    rows INTEGER NOT NULL,
    session_id INTEGER NOT NULL,
    min_ts_ns INTEGER NOT NULL,
    max_ts_ns INTEGER NOT NULL,
    max_end_ns INTEGER NOT NULL,
    columns BLOB NOT NULL
);
CREATE TRIGGER event_log_delete_block AFTER DELETE ON event_log BEGIN
    DELETE FROM event_blocks
    WHERE first_id = (SELECT max(first_id) FROM event_blocks WHERE first_id <= old.id) AND first_id + rows > old.id;
END;
CREATE TRIGGER event_log_update_block AFTER UPDATE ON event_log BEGIN
    DELETE FROM event_blocks
    WHERE first_id = (SELECT max(first_id) FROM event_blocks WHERE first_id <= old.id) AND first_id + rows > old.id;
    DELETE FROM event_blocks
    WHERE first_id = (SELECT max(first_id) FROM event_blocks WHERE first_id <= new.id) AND first_id + rows > new.id;
END;
"""

MIGRATIONS: list[Migration] = [
    Migration(1, "sessions, events, ops lookup, processes", _V1),
    Migration(2, "findings history written by gpuscope explain", _V2),
    Migration(3, "attribution: cgroups, ranks, NCCL communicators, exec argv", ATTRIBUTION_DDL),
    Migration(4, "exact per-second aggregates of every event", _V4_AGGREGATES),
    Migration(5, "merge and import: clock offsets, import provenance, imported history", MERGE_IMPORT_DDL),
    Migration(6, "call stacks: deduplicated stacks and the event -> stack link", _V6_STACKS),
    Migration(7, "durability: agent pid, committed-until time, end reason, drops per second", _V7_DURABILITY),
    Migration(8, "call stacks on the event's own row", _V8_ROW_STACKS),
    Migration(9, "host CPU, memory, load and swap once a second", _V9_SYSTEM),
    Migration(10, "column blocks of the event rows, for the analysis", _V10_BLOCKS),
    Migration(11, "the overhead budget: probe windows of the sampled ops, probe costs, self-cost", COVERAGE_DDL),
    Migration(12, "on-CPU samples of traced threads and the stacks they ran", CPU_SAMPLES_DDL),
]

MIGRATIONS.sort(key=lambda m: m.version)
SCHEMA_VERSION = MIGRATIONS[-1].version

SOURCE_DESCRIPTIONS = {
    Source.CUDA: "CUDA Runtime API (libcudart) uprobes",
    Source.DRIVER: "CUDA Driver API (libcuda) uprobes",
    Source.NCCL: "NCCL (libnccl) uprobes",
    Source.HOST: "kernel tracepoints: scheduler, process lifecycle, block I/O, TCP, memory",
}


def lookup_rows() -> tuple[list[tuple[str, str]], list[tuple[int, str, str, str, str]]]:
    """Rows of the sources and ops lookup tables, refreshed at every open."""
    sources = [(s.value, d) for s, d in SOURCE_DESCRIPTIONS.items()]
    ops = [(int(i.op), i.op.name, i.source.value, i.kind.value, i.description) for i in OPS.values()]
    return sources, ops
