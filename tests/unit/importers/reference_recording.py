"""Write reference (Ingero) recordings by hand, stored the way the reference stores them.

Every event is counted in the file's per-minute and per-5 s aggregates; rows are kept as the reference's
selective storage keeps them: everything in a session's first 10 s, then syncs, lifecycle events, block I/O
over 10 ms and the scheduler rows of traced threads, and of the other calls only those a test marks as kept
(its anomalies and 1-in-N samples). Scheduler and block I/O rows are stamped at their end, as the reference
stamps them. Codes are the reference's (source, op) numbers.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from tests.unit.importers.reference_schema import LEGACY_TABLES

S = 1_000_000_000
MS = 1_000_000
US = 1_000
T0 = 1_775_000_000 * S  # Unix ns, as the reference records
STORE_ALL_NS = 10 * S

LAUNCH, MEMCPY, STREAM_SYNC, MEMCPY_ASYNC = (1, 3), (1, 4), (1, 5), (1, 7)
SWITCH, FORK, EXIT = (3, 1), (3, 7), (3, 6)
MEM_ALLOC = (4, 5)
BLOCK_READ = (5, 1)
_ALWAYS_KEPT = {STREAM_SYNC, (1, 6), (4, 4), FORK, EXIT, (3, 5), (3, 4), SWITCH}
_STAMPED_AT_END = {SWITCH, BLOCK_READ}

_AGGREGATE_TABLE = """
CREATE TABLE {name} (bucket INTEGER NOT NULL, source INTEGER NOT NULL, op INTEGER NOT NULL,
    pid INTEGER NOT NULL DEFAULT 0, count INTEGER NOT NULL DEFAULT 0, stored INTEGER NOT NULL DEFAULT 0,
    sum_dur INTEGER NOT NULL DEFAULT 0, min_dur INTEGER NOT NULL DEFAULT 0, max_dur INTEGER NOT NULL DEFAULT 0,
    sum_arg0 INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (bucket, source, op, pid));
"""


@dataclass(frozen=True, slots=True)
class Event:
    stamp: int  # the reference's timestamp: a call's entry, a switch's or an I/O's end
    pid: int
    tid: int
    code: tuple[int, int]
    dur: int
    arg1: int
    kept: bool


@dataclass
class Reference:
    """The events of one reference session of ``seconds`` s; ``names``: the file's pid -> name table."""

    seconds: float
    names: dict[int, str] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)

    def add(
        self,
        at: int,
        pid: int,
        code: tuple[int, int],
        dur: int = 0,
        *,
        tid: int | None = None,
        arg1: int = 0,
        sampled: bool = False,
    ) -> None:
        """An event starting ``at`` ns after the session start; ``sampled``: kept outside the store-all window
        though its op is not always kept (an anomaly or a 1-in-N sample)."""
        stamp = at + dur if code in _STAMPED_AT_END else at
        kept = at < STORE_ALL_NS or code in _ALWAYS_KEPT or sampled or (code == BLOCK_READ and dur > 10 * MS)
        self.events.append(Event(T0 + stamp, pid, pid if tid is None else tid, code, dur, arg1, kept))

    def switch(self, back_at: int, off_ns: int, pid: int, by: int = 0) -> None:
        """``pid``'s main thread back on-CPU at ``back_at`` after ``off_ns`` off it (``by`` ran before it)."""
        self.add(back_at - off_ns, pid, SWITCH, off_ns, arg1=by)

    def write(self, path: Path, *, aggregates: bool) -> Path:
        """The file at ``path``; its per-minute and per-5 s counts too when ``aggregates``."""
        c = sqlite3.connect(path)
        c.executescript(LEGACY_TABLES + "CREATE TABLE process_names (pid INTEGER PRIMARY KEY, name TEXT, seen_at INT);")
        c.execute(
            "INSERT INTO sessions(started_at, stopped_at, ingero_ver) VALUES (?, ?, '0.8.1')",
            (T0, T0 + int(self.seconds * S)),
        )
        c.executemany("INSERT INTO process_names VALUES (?, ?, ?)", [(p, n, T0) for p, n in self.names.items()])
        c.executemany(
            "INSERT INTO events(timestamp, pid, tid, source, op, duration, arg1) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(e.stamp, e.pid, e.tid, *e.code, e.dur, e.arg1) for e in sorted(self.events, key=_stamp) if e.kept],
        )
        if aggregates:
            for table, width in (("event_aggregates", 60 * S), ("event_aggregates_5s", 5 * S)):
                c.executescript(_AGGREGATE_TABLE.format(name=table))
                c.executemany(f"INSERT INTO {table} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0)", self._buckets(width))
        c.commit()
        c.close()
        return path

    def _buckets(self, width: int) -> list[tuple[int, ...]]:
        """(bucket, source, op, pid, count, stored, sum, min, max) of every event, in buckets of ``width``."""
        out: dict[tuple[int, int, int, int], list[int]] = {}
        for e in self.events:
            key = (e.stamp - e.stamp % width, *e.code, e.pid)
            n, kept, total, lo, hi = out.get(key, [0, 0, 0, e.dur, e.dur])
            out[key] = [n + 1, kept + e.kept, total + e.dur, min(lo, e.dur), max(hi, e.dur)]
        return [(*k, *v) for k, v in sorted(out.items())]


def _stamp(e: Event) -> int:
    return e.stamp
