"""Read the reference system Ingero's SQLite files into gpuscope's schema.

Ingero keeps one ``events`` table with wall-clock ``timestamp`` (Unix ns),
numeric ``source``/``op`` codes and two generic arguments; sessions relate to
events only by time range; ids are ``{node}:{seq}`` text in newer files and
integers in older ones. This module converts such a file into rows of an open
gpuscope writer connection:

- every event becomes an ``event_log`` row (op mapped by name, see
  ``ingero_ops``) plus an ``imported_events`` row with Ingero's raw values;
- each Ingero session becomes a session whose ``started_mono_ns`` equals its
  ``started_wall_ns``, so ``ts_ns`` is Ingero's wall clock and the ``wall_ns``
  column of the views reproduces Ingero's ``timestamp`` exactly;
- stacks, causal chains, snapshots, aggregates and cgroup metadata go to the
  ``imported_*`` tables; any other table is kept row by row as JSON in
  ``imported_rows``, so nothing in the file is lost.
"""

from __future__ import annotations

import bisect
import json
import re
import sqlite3
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuscope.config import check_node_name, expand_home
from gpuscope.errors import DatabaseError, UsageError
from gpuscope.importers.detect import is_ingero
from gpuscope.importers.ingero_history import count_rows, import_history, op_lookup, rows, version
from gpuscope.importers.ingero_ops import COLUMNS, Rule, convert_args, ingero_op_name, rule_for
from gpuscope.store.blocks import build_blocks
from gpuscope.store.build import ensure_op
from gpuscope.store.conformance import VALUE_LIMIT_NS
from gpuscope.store.connect import column_names, connect_probe, table_names
from gpuscope.store.retention import build_indexes

Progress = Callable[[str], None]

SOURCE_KIND = "ingero"
_NAMESPACE = uuid.UUID("6a1f3c2e-57c4-4d0a-9b1e-2f1c9a0e4b7d")  # session uuids of imported files
_BATCH = 5000


@dataclass(slots=True)
class ImportReport:
    """What one file contributed, counted as it was written."""

    source_path: str
    nodes: list[str] = field(default_factory=list)
    sessions: int = 0
    events: int = 0
    events_by_op: dict[str, int] = field(default_factory=dict)  # Ingero op name -> rows
    stacks: int = 0
    chains: int = 0
    snapshots: int = 0
    aggregates: int = 0
    processes: int = 0
    cgroups: int = 0
    other_rows: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the import decided that the file did not say

    def as_dict(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "notes": self.notes,
            "sessions": self.sessions,
            "events": self.events,
            "events_by_op": self.events_by_op,
            "stacks": self.stacks,
            "chains": self.chains,
            "snapshots": self.snapshots,
            "aggregates": self.aggregates,
            "processes": self.processes,
            "cgroups": self.cgroups,
            "other_rows": self.other_rows,
        }


def open_source(path: str | Path) -> sqlite3.Connection:
    """Open an Ingero file read-only; DatabaseError when it is not one."""
    p = expand_home(path)
    if not p.is_file():
        raise DatabaseError(f"{p}: no such file", remedy="check the path of the Ingero database")
    try:
        conn = connect_probe(p)
        ok = is_ingero(conn)
    except sqlite3.DatabaseError as exc:
        raise DatabaseError(f"{p}: not a valid SQLite database ({exc})", remedy="check the file is intact") from None
    if not ok:
        raise DatabaseError(
            f"{p}: not an Ingero database (no events table with timestamp, source and op columns)",
            remedy="pass a file written by `ingero trace` (default ~/.ingero/ingero.db)",
        )
    return conn


def import_ingero(
    src: sqlite3.Connection,
    out: sqlite3.Connection,
    source_path: str,
    *,
    node: str | None = None,
    progress: Progress | None = None,
) -> ImportReport:
    """Copy everything in the Ingero file ``src`` into the gpuscope database ``out``.

    ``node`` names rows recorded without a node; it also renames the node of a
    single-node file. Runs in one transaction on ``out``.

    A file recorded without any node name is named after the file (a note
    says so). Raises UsageError when some rows name nodes and others do not,
    and ``node`` is not given: which node the others belong to is a guess.
    """
    report = ImportReport(source_path=source_path)
    names = _Nodes.resolve(src, node, source_path)
    report.nodes = names.all()
    if names.derived:
        report.notes.append(
            f"recorded without a node name: named {names.default!r} after the file (--node NAME to choose one)"
        )
    out.execute("BEGIN")
    try:
        sessions = _import_sessions(src, out, names, source_path, report)
        _import_events(src, out, names, sessions, report, progress)
        _import_processes(src, out, sessions, report)
        history = import_history(src, out, names.default or (report.nodes[0] if report.nodes else ""), names.of)
        report.stacks, report.chains, report.snapshots = history.stacks, history.chains, history.snapshots
        report.aggregates, report.cgroups, report.other_rows = history.aggregates, history.cgroups, history.other_rows
        # As a trace's recording has them: column blocks for explain, and the time index for every reader.
        build_blocks(out)
        build_indexes(out)
        counts = json.dumps(report.as_dict(), sort_keys=True)
        out.execute(
            "INSERT INTO imports(source_path, source_kind, source_version, nodes, imported_at_ns, counts) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (source_path, SOURCE_KIND, version(src), json.dumps(report.nodes), time.time_ns(), counts),
        )
        out.execute("COMMIT")
    except BaseException:
        # SQLite has already rolled back after a full disk or an I/O error; a second
        # ROLLBACK would fail and hide the error that matters.
        if out.in_transaction:
            out.execute("ROLLBACK")
        raise
    return report


# -- nodes and sessions -----------------------------------------------------------------------------


def node_from_path(path: str) -> str:
    """A node name for a file that recorded none: its name without extension, or ``local``."""
    stem = re.sub(r"[\s:]+", "-", Path(path).name.split(".")[0]).strip("-")
    return stem or "local"


@dataclass(slots=True)
class _Nodes:
    default: str | None
    rename: dict[str, str]
    seen: set[str]
    derived: bool = False  # default came from the file name, not from the file or the user

    @classmethod
    def resolve(cls, src: sqlite3.Connection, override: str | None, path: str) -> _Nodes:
        found: set[str] = set()
        for table in ("events", "sessions", "causal_chains"):
            if "node" in column_names(src, table):
                for (value,) in src.execute(f"SELECT DISTINCT node FROM {table} WHERE node != ''"):
                    if not isinstance(value, str):
                        raise DatabaseError(f"{path}: {table}: a node is {repr(value)[:40]}, not text", remedy=REPAIR)
                    found.add(value)
        if override is not None:
            check_node_name(override, "--node")
        rename = {found.pop(): override} if override and len(found) == 1 else {}
        default = override or (next(iter(found)) if len(found) == 1 else None)
        if not found and default is None and count_rows(src, "events"):
            return cls(node_from_path(path), rename, set(), derived=True)
        return cls(default, rename, found | set(rename.values()))

    def of(self, raw: str | None) -> str:
        name = self.rename.get(raw or "", raw or "") or self.default
        if not name:
            raise UsageError("some rows have no node name", remedy="name them: --node NAME (merge: --force-node NAME)")
        self.seen.add(name)
        return name

    def all(self) -> list[str]:
        return sorted(self.seen | ({self.default} if self.default else set()))


@dataclass(slots=True)
class _Sessions:
    """Our session ids per node, with start times for assigning events by time range."""

    starts: dict[str, list[int]] = field(default_factory=dict)
    ids: dict[str, list[int]] = field(default_factory=dict)
    events: Counter[int] = field(default_factory=Counter)
    first_by_pid: dict[int, int] = field(default_factory=dict)  # pid -> session of its earliest event

    def add(self, node: str, started_ns: int, session_id: int) -> None:
        i = bisect.bisect_right(self.starts.setdefault(node, []), started_ns)
        self.starts[node].insert(i, started_ns)
        self.ids.setdefault(node, []).insert(i, session_id)

    def find(self, node: str, ts_ns: int) -> int | None:
        starts = self.starts.get(node)
        if not starts:
            return None
        return self.ids[node][max(bisect.bisect_right(starts, ts_ns) - 1, 0)]


_SESSION_INSERT = (
    "INSERT INTO sessions(uuid, node, hostname, kernel, gpuscope_version, started_wall_ns, started_mono_ns, "
    "stopped_wall_ns, stopped_mono_ns, flags, targets) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_SESSION_FACTS = (
    "gpu_model",
    "gpu_driver",
    "cpu_model",
    "cpu_cores",
    "mem_total",
    "os_release",
    "cuda_ver",
    "python_ver",
    "rank",
    "local_rank",
    "world_size",
)


def _import_sessions(
    src: sqlite3.Connection, out: sqlite3.Connection, names: _Nodes, path: str, report: ImportReport
) -> _Sessions:
    sessions = _Sessions()
    if "sessions" not in table_names(src):
        return sessions
    for row in rows(src, "SELECT * FROM sessions ORDER BY started_at, id"):
        if row.get("stopped_at") is None:
            row["stopped_at"] = 0  # never stopped (a column older files lack)
        _require_integers(row, "sessions", ("started_at", "stopped_at"), path)
        name = names.of(row.get("node"))
        started, stopped = int(row["started_at"]), int(row.get("stopped_at") or 0) or None
        facts = {k: row[k] for k in _SESSION_FACTS if row.get(k) not in (None, "")}
        flags = {"imported_from": SOURCE_KIND, "source_path": path, "ingero_flags": row.get("flags", ""), **facts}
        targets = [int(p) for p in str(row.get("pid_filter") or "").split(",") if p.strip().isdigit()]
        key = f"{SOURCE_KIND}:{name}:{started}:{row.get('id')}"
        cur = out.execute(
            _SESSION_INSERT,
            (
                str(uuid.uuid5(_NAMESPACE, key)),
                name,
                name,
                row.get("kernel") or None,
                f"ingero {row.get('ingero_ver') or '?'}",
                started,
                started,
                stopped,
                stopped,
                json.dumps(flags, sort_keys=True, default=str),  # a blob where Ingero wrote text: kept as its repr
                json.dumps(targets),
            ),
        )
        sessions.add(name, started, int(cur.lastrowid or 0))
        report.sessions += 1
    return sessions


def _synthetic_session(out: sqlite3.Connection, node: str, started_ns: int, path: str, sessions: _Sessions) -> int:
    """A session for events of a node that has none in the file (pruned or never written)."""
    flags = json.dumps({"imported_from": SOURCE_KIND, "source_path": path, "synthetic": True}, sort_keys=True)
    key = f"{SOURCE_KIND}:{node}:synthetic:{started_ns}"
    cur = out.execute(
        _SESSION_INSERT,
        (
            str(uuid.uuid5(_NAMESPACE, key)),
            node,
            node,
            None,
            "ingero ?",
            started_ns,
            started_ns,
            None,
            None,
            flags,
            "[]",
        ),
    )
    sid = int(cur.lastrowid or 0)
    sessions.add(node, started_ns, sid)
    return sid


# -- events ---------------------------------------------------------------------------------------

_EVENT_INSERT = (
    "INSERT INTO event_log(id, session_id, ts_ns, duration_ns, pid, tid, comm_id, cgroup_id, op_id, flags, ret, "
    "bytes, handle, stream, arg0, arg1) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?)"
)
_RAW_INSERT = (
    "INSERT INTO imported_events(event_log_id, source_event_id, source_code, op_code, source_op, arg0, arg1, "
    "gpu_id, stack_hash, rank, local_rank, world_size) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_OPTIONAL = {
    "tid": "pid",  # older files recorded no thread: the process's main thread stands for it
    "gpu_id": "0",
    "arg0": "0",
    "arg1": "0",
    "ret_code": "0",
    "stack_hash": "0",
    "node": "''",
    "rank": "NULL",
    "local_rank": "NULL",
    "world_size": "NULL",
    "comm": "''",
    "cgroup_id": "0",
}


def _import_events(
    src: sqlite3.Connection,
    out: sqlite3.Connection,
    names: _Nodes,
    sessions: _Sessions,
    report: ImportReport,
    progress: Progress | None,
) -> None:
    have = column_names(src, "events")
    select = ", ".join(c if c in have else f"{d} AS {c}" for c, d in _OPTIONAL.items())
    id_col = "id" if "id" in have else "rowid"
    query = (
        f"SELECT {id_col} AS id, timestamp, pid, source, op, duration, {select} FROM events ORDER BY timestamp, rowid"
    )
    lookup = op_lookup(src)
    sources = {r[0] for r in out.execute("SELECT name FROM sources")}
    op_ids: dict[tuple[int, int], tuple[str, Rule, int]] = {}
    comm_ids: dict[str, int | None] = {"": None}
    proc_names = _process_names(src)
    total = count_rows(src, "events")
    by_op: Counter[str] = Counter()
    events, raw = [], []
    next_id = int(out.execute("SELECT coalesce(max(id), 0) FROM event_log").fetchone()[0]) + 1
    for row in rows(src, query):
        _require_integers(row, "events", _EVENT_INTEGERS, report.source_path)
        key = (int(row["source"]), int(row["op"]))
        if key not in op_ids:
            name = ingero_op_name(*key, lookup)
            rule = rule_for(name, key[0])
            our_source = rule.source if rule.source in sources else "host"
            desc = f"imported from Ingero ({name})"
            op_ids[key] = (name, rule, ensure_op(out, rule.name, our_source, rule.kind, desc))
        name, rule, op_id = op_ids[key]
        node = names.of(row["node"])
        ts, duration = int(row["timestamp"]), int(row["duration"])
        if rule.ends_at_timestamp:
            ts -= duration
        sid = sessions.find(node, ts)
        if sid is None:
            sid = _synthetic_session(out, node, ts, report.source_path, sessions)
            report.sessions += 1
        comm = row["comm"] or proc_names.get(int(row["pid"]), "")
        if comm not in comm_ids:
            out.execute("INSERT OR IGNORE INTO comms(comm) VALUES (?)", (comm,))
            comm_ids[comm] = int(out.execute("SELECT id FROM comms WHERE comm = ?", (comm,)).fetchone()[0])
        cols = convert_args(rule, int(row["arg0"]), int(row["arg1"]))
        eid = next_id
        next_id += 1
        events.append(
            (
                eid,
                sid,
                ts,
                duration,
                row["pid"],
                row["tid"],
                comm_ids[comm],
                row["cgroup_id"],
                op_id,
                row["ret_code"],
                *tuple(cols[c] for c in COLUMNS),
            )
        )
        raw.append(
            (
                eid,
                str(row["id"]),
                key[0],
                key[1],
                name,
                row["arg0"],
                row["arg1"],
                row["gpu_id"],
                row["stack_hash"],
                row["rank"],
                row["local_rank"],
                row["world_size"],
            )
        )
        sessions.events[sid] += 1
        sessions.first_by_pid.setdefault(int(row["pid"]), sid)
        by_op[name] += 1
        if len(events) >= _BATCH:
            _flush(out, events, raw)
            if progress:
                progress(f"{report.source_path}: {sum(by_op.values()):,}/{total:,} events")
    _flush(out, events, raw)
    out.executemany(
        "UPDATE sessions SET events_recorded = events_recorded + ? WHERE id = ?",
        [(n, sid) for sid, n in sessions.events.items()],
    )
    report.events = sum(by_op.values())
    report.events_by_op = dict(sorted(by_op.items()))


# Columns of an Ingero event that become numbers of ours: each must hold an integer (times within VALUE_LIMIT_NS).
_EVENT_INTEGERS = (
    *("timestamp", "duration", "pid", "tid", "source", "op"),
    *("arg0", "arg1", "ret_code", "cgroup_id", "gpu_id", "stack_hash"),
)
_TIMES = {"timestamp", "duration", "started_at", "stopped_at", "seen_at"}
REPAIR = "repair or delete that row in a copy of the file (sqlite3 COPY.db), then import the copy"


def _require_integers(row: dict[str, Any], table: str, names: tuple[str, ...], path: str) -> None:
    """Refuse a row whose ``names`` are not all integers (a time or duration also within ±VALUE_LIMIT_NS)."""
    for name in names:
        value = row[name]
        if type(value) is int and (name not in _TIMES or -VALUE_LIMIT_NS <= value <= VALUE_LIMIT_NS):
            continue
        shown = "NULL" if value is None else repr(value)[:40]
        what = "beyond ±2^62 ns" if type(value) is int else "not an integer"
        raise DatabaseError(f"{path}: {table} row {row.get('id')}: {name} is {shown}, {what}", remedy=REPAIR)


def _flush(out: sqlite3.Connection, events: list[tuple[Any, ...]], raw: list[tuple[Any, ...]]) -> None:
    out.executemany(_EVENT_INSERT, events)
    out.executemany(_RAW_INSERT, raw)
    events.clear()
    raw.clear()


def _process_names(src: sqlite3.Connection) -> dict[int, str]:
    if not {"pid", "name"} <= column_names(src, "process_names"):
        return {}
    return {int(p): str(n) for p, n in src.execute("SELECT pid, name FROM process_names")}


def _import_processes(
    src: sqlite3.Connection, out: sqlite3.Connection, sessions: _Sessions, report: ImportReport
) -> None:
    """Ingero's pid -> name table becomes ``processes`` rows of the session where the pid first appears."""
    if not {"pid", "name"} <= column_names(src, "process_names"):
        return
    seen_col = "seen_at" if "seen_at" in column_names(src, "process_names") else "0"
    fallback = next((ids[0] for ids in sessions.ids.values() if ids), None)
    for pid, name, seen in src.execute(f"SELECT pid, name, {seen_col} FROM process_names ORDER BY pid"):
        _require_integers(
            {"id": pid, "pid": pid, "seen_at": seen or 0}, "process_names", ("pid", "seen_at"), report.source_path
        )
        sid = sessions.first_by_pid.get(int(pid), fallback)
        if sid is None:
            continue
        out.execute(
            "INSERT OR IGNORE INTO processes(session_id, pid, comm, first_seen_ns) VALUES (?, ?, ?, ?)",
            (sid, pid, name, int(seen or 0)),
        )
        report.processes += 1
