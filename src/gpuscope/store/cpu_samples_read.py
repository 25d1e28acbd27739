"""Read on-CPU samples (gpuscope.store.cpu_samples) and the stacks they ran, for profiles."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

import numpy as np

from gpuscope.store.connect import table_names
from gpuscope.store.sessions_read import session_flag_docs

_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class SampleColumns:
    """Samples in a time window, by time: parallel int64 arrays, and the sampling rate of their sessions."""

    ts_ns: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    stack_hash: np.ndarray
    hz: int  # samples per second of a thread's CPU time (the lowest of the sessions'); 0 when unknown

    def __len__(self) -> int:
        return len(self.ts_ns)


def has_cpu_samples(conn: sqlite3.Connection) -> bool:
    """Whether the recording holds any on-CPU sample (older schemas have no table for them)."""
    return (
        "cpu_samples" in table_names(conn) and conn.execute("SELECT 1 FROM cpu_samples LIMIT 1").fetchone() is not None
    )


def sample_rate_hz(conn: sqlite3.Connection) -> int:
    """The sampling rate the recording's sessions used (the lowest, when they differ); 0 when none sampled."""
    rates = [hz for d in session_flag_docs(conn).values() if (hz := _positive(d.get("cpu_sample_hz")))]
    return min(rates) if rates else 0


def sample_columns(conn: sqlite3.Connection, start_ns: int, end_ns: int, pids: tuple[int, ...] = ()) -> SampleColumns:
    """The samples taken in [start_ns, end_ns] (of ``pids`` when given), by time."""
    empty = np.zeros(0, dtype=np.int64)
    if "cpu_samples" not in table_names(conn):
        return SampleColumns(empty, empty, empty, empty, 0)
    lo, hi = max(start_ns, _I64_MIN), min(end_ns, _I64_MAX)
    sql = "SELECT ts_ns, pid, tid, stack_hash FROM cpu_samples WHERE ts_ns BETWEEN ? AND ?"
    params: list[int] = [lo, hi]
    if pids:
        sql += f" AND pid IN ({','.join('?' * len(pids))})"
        params.extend(pids)
    rows = conn.execute(sql + " ORDER BY ts_ns", params).fetchall()
    if not rows:
        return SampleColumns(empty, empty, empty, empty, sample_rate_hz(conn))
    a = np.array(rows, dtype=np.int64)
    return SampleColumns(a[:, 0], a[:, 1], a[:, 2], a[:, 3], sample_rate_hz(conn))


def stack_frames_json(conn: sqlite3.Connection, hashes: list[int]) -> dict[int, str]:
    """The stored frames (JSON) of each stack hash that has them."""
    out: dict[int, str] = {}
    for i in range(0, len(hashes), 500):
        chunk = hashes[i : i + 500]
        q = f"SELECT hash, frames FROM stacks WHERE hash IN ({','.join('?' * len(chunk))})"
        out.update((int(h), str(f)) for h, f in conn.execute(q, chunk).fetchall())
    return out


def _positive(v: object) -> int:
    """``v`` when it is a positive integer, else 0 (a flag of a changed file)."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


SampleCount = tuple[int, int, int, int]
"""(pid, tid, stack hash, samples)."""


def sample_counts(
    conn: sqlite3.Connection, *, pid: int | None = None, start_ns: int | None = None, end_ns: int | None = None
) -> list[SampleCount]:
    """Samples per (pid, tid, stack), most first; through the reader's filter views when it has them."""
    if "cpu_samples" not in table_names(conn):
        return []
    clauses, params = ["1"], []
    for clause, value in (("pid = ?", pid), ("ts_ns >= ?", start_ns), ("ts_ns <= ?", end_ns)):
        if value is not None:
            clauses.append(clause)
            params.append(max(min(value, _I64_MAX), _I64_MIN))
    sql = (
        "SELECT pid, tid, stack_hash, count(*) AS n FROM cpu_samples WHERE "
        + " AND ".join(clauses)
        + " GROUP BY pid, tid, stack_hash ORDER BY n DESC, pid, tid, stack_hash"
    )
    return [(int(p), int(t), int(h), int(n)) for p, t, h, n in conn.execute(sql, params).fetchall()]
