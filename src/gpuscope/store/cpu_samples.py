"""On-CPU samples of traced threads: which stack each thread was running, a few dozen times a second.

``cpu_samples`` holds one row per sample the kernel took of a traced thread
while it was on a CPU (bpf/include/profile.bpf.h): its time (CLOCK_MONOTONIC
ns, like ``event_log.ts_ns``) and the stack it was running, by hash into
``stacks``. Samples come at ``sessions.flags`` ``cpu_sample_hz`` per second of
a thread's CPU time, so each stands for 1/hz seconds of it: a profile is
counts, and its time is an estimate from them (gpuscope.analysis.cpu_profile).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

CPU_SAMPLES_DDL = """
CREATE TABLE cpu_samples (
    session_id INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    tid INTEGER NOT NULL,
    ts_ns INTEGER NOT NULL,
    stack_hash INTEGER NOT NULL,
    PRIMARY KEY (session_id, tid, ts_ns)
) WITHOUT ROWID;
CREATE INDEX idx_cpu_samples_ts ON cpu_samples(ts_ns);
"""

CpuSampleRow = tuple[int, int, int, int, int]
"""(session id, pid, tid, ts_ns of the sample, stack hash)."""


def insert_cpu_samples(conn: sqlite3.Connection, rows: Sequence[CpuSampleRow]) -> None:
    """Store samples; a second sample of a thread at the same instant is ignored."""
    conn.executemany(
        "INSERT OR IGNORE INTO cpu_samples(session_id, pid, tid, ts_ns, stack_hash) VALUES (?, ?, ?, ?, ?)", rows
    )
