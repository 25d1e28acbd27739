"""Migration 3 of the schema (``gpuscope.store.schema``): who a process is, and the views that name it.

Appended, never edited: databases have applied it as it is written here.
"""

from __future__ import annotations

# Attribution (containers, pods, jobs, ranks), NCCL communicators, exec argv,
# and the events view rebuilt with the v1 cgroup id and the rank.
ATTRIBUTION_DDL = """
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
