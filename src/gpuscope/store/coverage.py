"""What the overhead budget leaves for analysis: when the sampled ops were probed, and what probing cost.

- ``probe_windows``: the intervals (CLOCK_MONOTONIC ns, like ``ts_ns``) in which
  a session's sampled ops (``sessions.flags`` ``sampled_ops``) were probed. Their
  calls outside these intervals were not seen: counts, rates and time are
  estimated from the windows (gpuscope.analysis.coverage).
- ``probe_window_procs``: per window, each process's sampled calls seen and the
  time its probes took in it: a process runs slower inside a window, so its
  rate without probes is its calls over the window less that time.
- ``probe_costs``: the calibrated cost of one probe hit at the session's start.
- ``self_cost``: each traced process's probe time and CPU time, per second.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

COVERAGE_DDL = """
CREATE TABLE probe_windows (
    session_id INTEGER NOT NULL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    exact INTEGER NOT NULL,
    PRIMARY KEY (session_id, start_ns)
);
CREATE TABLE probe_window_procs (
    session_id INTEGER NOT NULL,
    start_ns INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    sampled_calls INTEGER NOT NULL,
    probe_ns INTEGER NOT NULL,
    threads INTEGER NOT NULL,
    PRIMARY KEY (session_id, start_ns, pid)
);
CREATE TABLE probe_costs (
    session_id INTEGER NOT NULL,
    prologue TEXT NOT NULL,
    entry_ns REAL NOT NULL,
    return_ns REAL NOT NULL,
    PRIMARY KEY (session_id, prologue)
);
CREATE TABLE self_cost (
    session_id INTEGER NOT NULL,
    bucket_ns INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    probed_calls INTEGER NOT NULL,
    probe_ns INTEGER NOT NULL,
    cpu_ns INTEGER NOT NULL,
    budget REAL,
    duty REAL,
    PRIMARY KEY (session_id, bucket_ns, pid)
);
"""

SelfCostRow = tuple[int, int, int, int]
"""(pid, probed_calls, probe_ns, cpu_ns) over the second before a bucket."""


WindowProcRow = tuple[int, int, float, int]
"""(pid, sampled calls seen, probe ns, threads) in one window."""


def insert_probe_window(
    conn: sqlite3.Connection,
    session_id: int,
    start_ns: int,
    end_ns: int,
    exact: bool = False,
    procs: Sequence[WindowProcRow] = (),
) -> None:
    """Record one interval in which the session's sampled ops were probed, with each process's probe time.

    ``exact``: a chunk of the first seconds (of the trace, a new process, a new library), probed whole.
    """
    conn.execute(
        "INSERT OR REPLACE INTO probe_windows(session_id, start_ns, end_ns, exact) VALUES (?, ?, ?, ?)",
        (session_id, start_ns, end_ns, int(exact)),
    )
    conn.executemany(
        "INSERT OR REPLACE INTO probe_window_procs(session_id, start_ns, pid, sampled_calls, probe_ns, threads) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [(session_id, start_ns, pid, calls, int(probe), threads) for pid, calls, probe, threads in procs],
    )


def insert_probe_costs(conn: sqlite3.Connection, session_id: int, costs: Sequence[tuple[str, float, float]]) -> None:
    """Record the calibrated cost of a probe hit: (prologue, entry_ns, return_ns) rows."""
    conn.executemany(
        "INSERT OR REPLACE INTO probe_costs(session_id, prologue, entry_ns, return_ns) VALUES (?, ?, ?, ?)",
        [(session_id, p, e, r) for p, e, r in costs],
    )


def insert_self_costs(
    conn: sqlite3.Connection,
    session_id: int,
    bucket_ns: int,
    budget: float | None,
    duty: float | None,
    rows: Sequence[SelfCostRow],
) -> None:
    """Record each traced process's probe and CPU time over the second before ``bucket_ns``.

    ``duty``: the share of that second the sampled ops were probed (1 in the first seconds, None without a
    budget).
    """
    conn.executemany(
        "INSERT OR REPLACE INTO self_cost(session_id, bucket_ns, pid, probed_calls, probe_ns, cpu_ns, budget, duty) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [(session_id, bucket_ns, pid, calls, probe, cpu, budget, duty) for pid, calls, probe, cpu in rows],
    )
