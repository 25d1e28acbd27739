"""Migration 5 of the schema (``gpuscope.store.schema``): what merging and importing recordings add.

Clock offsets between nodes (and the aligned events view), where each import
came from, and another tool's history as it stored it (Ingero's events,
stacks, causal chains, snapshots, aggregates and cgroups). Appended, never
edited: databases have applied it as it is written here.
"""

from __future__ import annotations

MERGE_IMPORT_DDL = """
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
