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

_V5_MERGE_IMPORT = """
CREATE TABLE node_clock_offsets (
    node TEXT PRIMARY KEY,
    offset_ns INTEGER NOT NULL,
    source TEXT NOT NULL,
    measured_at_ns INTEGER
);
CREATE VIEW events_aligned AS
SELECT
    ev.*,
    COALESCE(o.offset_ns, 0) AS clock_offset_ns,
    ev.wall_ns + COALESCE(o.offset_ns, 0) AS aligned_wall_ns
FROM events ev
LEFT JOIN node_clock_offsets o ON o.node = ev.node;
CREATE TABLE imports (
    id INTEGER PRIMARY KEY,
    source_path TEXT NOT NULL,
    source_kind TEXT NOT NULL,
    source_version TEXT,
    nodes TEXT NOT NULL,
    imported_at_ns INTEGER NOT NULL,
    counts TEXT NOT NULL,
    UNIQUE (source_path, imported_at_ns)
);
CREATE TABLE imported_events (
    event_log_id INTEGER PRIMARY KEY,
    source_event_id TEXT NOT NULL,
    source_code INTEGER NOT NULL,
    op_code INTEGER NOT NULL,
    source_op TEXT NOT NULL,
    arg0 INTEGER NOT NULL,
    arg1 INTEGER NOT NULL,
    gpu_id INTEGER NOT NULL,
    stack_hash INTEGER NOT NULL,
    rank INTEGER,
    local_rank INTEGER,
    world_size INTEGER
);
CREATE INDEX imported_events_stack ON imported_events(stack_hash) WHERE stack_hash != 0;
CREATE TABLE imported_stacks (
    hash INTEGER PRIMARY KEY,
    ips TEXT NOT NULL,
    frames TEXT NOT NULL
);
CREATE TABLE imported_chains (
    id TEXT PRIMARY KEY,
    node TEXT NOT NULL,
    detected_wall_ns INTEGER NOT NULL,
    severity TEXT NOT NULL,
    summary TEXT NOT NULL,
    root_cause TEXT NOT NULL,
    explanation TEXT NOT NULL,
    recommendations TEXT NOT NULL,
    op TEXT NOT NULL,
    p99_us INTEGER NOT NULL,
    p50_us INTEGER NOT NULL,
    tail_ratio REAL NOT NULL,
    timeline TEXT NOT NULL
);
CREATE TABLE imported_snapshots (
    node TEXT NOT NULL,
    wall_ns INTEGER NOT NULL,
    cpu_pct REAL,
    mem_pct REAL,
    mem_avail_mb INTEGER,
    swap_mb INTEGER,
    load_avg REAL,
    PRIMARY KEY (node, wall_ns)
);
CREATE TABLE imported_aggregates (
    node TEXT NOT NULL,
    bucket_wall_ns INTEGER NOT NULL,
    width_ns INTEGER NOT NULL,
    op TEXT NOT NULL,
    pid INTEGER NOT NULL,
    count INTEGER NOT NULL,
    stored INTEGER NOT NULL,
    sum_duration_ns INTEGER NOT NULL,
    min_duration_ns INTEGER NOT NULL,
    max_duration_ns INTEGER NOT NULL,
    sum_arg0 INTEGER NOT NULL,
    PRIMARY KEY (node, width_ns, bucket_wall_ns, op, pid)
);
CREATE TABLE imported_cgroups (
    node TEXT NOT NULL,
    cgroup_id INTEGER NOT NULL,
    container_id TEXT NOT NULL,
    cgroup_path TEXT NOT NULL,
    pod_name TEXT NOT NULL,
    namespace TEXT NOT NULL,
    PRIMARY KEY (node, cgroup_id)
);
CREATE TABLE imported_rows (
    node TEXT NOT NULL,
    table_name TEXT NOT NULL,
    row TEXT NOT NULL,
    UNIQUE (node, table_name, row)
);
"""

# Attribution (containers, pods, jobs, ranks), NCCL communicators, exec argv,
# and the events view rebuilt with the v1 cgroup id and the rank.
_V3_ATTRIBUTION = """
ALTER TABLE event_log ADD COLUMN cgroup_v1_id INTEGER NOT NULL DEFAULT 0;
ALTER TABLE processes ADD COLUMN cgroup_v1_id INTEGER;
ALTER TABLE processes ADD COLUMN rank INTEGER;
ALTER TABLE processes ADD COLUMN local_rank INTEGER;
ALTER TABLE processes ADD COLUMN world_size INTEGER;
ALTER TABLE processes ADD COLUMN launcher TEXT;
ALTER TABLE processes ADD COLUMN slurm_job_id TEXT;
ALTER TABLE processes ADD COLUMN slurm_step_id TEXT;
CREATE TABLE cgroups (
    cgroup_id INTEGER NOT NULL,
    hierarchy TEXT NOT NULL,
    path TEXT NOT NULL,
    container_id TEXT,
    runtime TEXT,
    pod_uid TEXT,
    pod_name TEXT,
    pod_namespace TEXT,
    slurm_job_id TEXT,
    slurm_step_id TEXT,
    ecs_task_id TEXT,
    first_seen_ns INTEGER NOT NULL,
    PRIMARY KEY (cgroup_id, hierarchy)
);
CREATE TABLE nccl_comms (
    session_id INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    comm_handle INTEGER NOT NULL,
    comm_hash INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    nranks INTEGER NOT NULL,
    ts_ns INTEGER NOT NULL,
    PRIMARY KEY (session_id, pid, comm_handle, ts_ns)
);
CREATE TABLE execs (
    session_id INTEGER NOT NULL,
    ts_ns INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    tid INTEGER NOT NULL,
    argv TEXT NOT NULL
);
DROP VIEW events;
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
    CASE WHEN e.cgroup_id <= 1 AND e.cgroup_v1_id > 0 THEN e.cgroup_v1_id ELSE e.cgroup_id END AS cgroup_id,
    e.cgroup_id AS cgroup_v2_id,
    e.cgroup_v1_id AS cgroup_v1_id,
    p.rank AS rank,
    p.local_rank AS local_rank,
    p.world_size AS world_size,
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
LEFT JOIN comms c ON c.id = e.comm_id
LEFT JOIN processes p ON p.session_id = e.session_id AND p.pid = e.pid;
CREATE VIEW containers AS
SELECT cgroup_id, hierarchy, path, container_id, runtime, pod_uid, pod_name, pod_namespace,
       slurm_job_id, slurm_step_id, ecs_task_id
FROM cgroups;
CREATE VIEW cuda_events AS
SELECT cc.*, printf('0x%x', cc.kernel) AS kernel_name
FROM cuda_calls cc
WHERE cc.kernel IS NOT NULL;
CREATE VIEW nccl_calls AS
SELECT
    ev.*,
    ev.arg0 AS count,
    ev.arg1 & 255 AS datatype,
    (ev.arg1 >> 8) & 255 AS reduce_op,
    CASE WHEN ev.op IN ('ncclSend', 'ncclRecv', 'ncclReduce', 'ncclBroadcast') THEN (ev.arg1 >> 32) & 4294967295 END
        AS peer,
    ev.handle AS communicator,
    (SELECT nc.comm_hash FROM nccl_comms nc WHERE nc.session_id = ev.session_id AND nc.pid = ev.pid
        AND nc.comm_handle = ev.handle AND nc.ts_ns <= ev.ts_ns ORDER BY nc.ts_ns DESC LIMIT 1) AS comm_hash,
    (SELECT nc.rank FROM nccl_comms nc WHERE nc.session_id = ev.session_id AND nc.pid = ev.pid
        AND nc.comm_handle = ev.handle AND nc.ts_ns <= ev.ts_ns ORDER BY nc.ts_ns DESC LIMIT 1) AS comm_rank,
    (SELECT nc.nranks FROM nccl_comms nc WHERE nc.session_id = ev.session_id AND nc.pid = ev.pid
        AND nc.comm_handle = ev.handle AND nc.ts_ns <= ev.ts_ns ORDER BY nc.ts_ns DESC LIMIT 1) AS nranks
FROM events ev
WHERE ev.source = 'nccl';
CREATE VIEW nccl_events AS SELECT * FROM nccl_calls;
CREATE VIEW graph_events AS
SELECT
    ev.*,
    CASE WHEN ev.op IN ('cudaStreamEndCapture', 'cuStreamEndCapture', 'cudaGraphDestroy', 'cuGraphDestroy')
         THEN ev.handle
         WHEN ev.op IN ('cudaGraphInstantiate', 'cuGraphInstantiate', 'cudaGraphExecUpdate', 'cuGraphExecUpdate')
         THEN ev.arg0 END AS graph,
    CASE WHEN ev.op IN ('cudaGraphInstantiate', 'cuGraphInstantiate', 'cudaGraphLaunch', 'cuGraphLaunch',
                        'cudaGraphExecUpdate', 'cuGraphExecUpdate', 'cudaGraphExecDestroy', 'cuGraphExecDestroy')
         THEN ev.handle END AS graph_exec,
    CASE WHEN ev.op IN ('cudaStreamBeginCapture', 'cuStreamBeginCapture') THEN ev.arg0 END AS capture_mode
FROM events ev
JOIN ops o ON o.name = ev.op
WHERE o.kind = 'graph';
CREATE INDEX nccl_comms_lookup ON nccl_comms(session_id, pid, comm_handle, ts_ns);
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
    Migration(3, "attribution: cgroups, ranks, NCCL communicators, exec argv", _V3_ATTRIBUTION),
    Migration(4, "exact per-second aggregates of every event", _V4_AGGREGATES),
    Migration(5, "merge and import: clock offsets, import provenance, imported history", _V5_MERGE_IMPORT),
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
