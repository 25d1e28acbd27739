"""Merge recordings of several nodes (or several runs of one node) into one database.

Each input is ATTACHed read-only to the output under construction and copied
with INSERT ... SELECT, remapping what is local to a file:

- sessions get new row ids; a session whose ``uuid`` is already in the output
  is the same recording and is skipped, so merging a merged file again adds
  nothing;
- comms are re-interned and ops re-keyed by name (ops imported from other
  tools have ids that differ between files);
- ``event_log.id`` keeps its value when it is free in the output, else the
  whole input is shifted past the output's largest id: ``event_id`` =
  ``node:id`` stays unique;
- tables keyed by session (processes, findings, ...) follow their session;
  stacks are deduplicated by hash; other tables are copied row by row,
  ignoring rows already present.

Two inputs with the same node name and overlapping session time ranges are
refused (MergeConflictError) rather than silently interleaved. Ingero files
are converted first (``gpuscope.recording.merge_recordings``), so they can be inputs too.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuscope.config import check_node_name
from gpuscope.errors import DatabaseError, GpuscopeError, UsageError
from gpuscope.platform.files import atomic_output, database_write_failure, refuse_same_file
from gpuscope.platform.links import resolve_refusing_planted_links
from gpuscope.store.blocks import build_blocks
from gpuscope.store.build import build_database, ensure_op
from gpuscope.store.connect import connect_reader, read_uri
from gpuscope.store.liveness import recording_holders
from gpuscope.store.retention import build_indexes

Progress = Callable[[str], None]

_CHUNK = 200_000  # event rows per INSERT ... SELECT, between progress reports
# Handled by dedicated code below, or bookkeeping that belongs to the output.
# Column blocks are not copied (their op ids and row ids are the input's): the output's are built
# from its rows (gpuscope.store.blocks).
_SPECIAL = {
    "sessions", "event_log", "comms", "ops", "sources", "imported_events", "schema_migrations", "imports",
    "event_blocks",
}  # fmt: skip


class MergeConflictError(GpuscopeError):
    remedy = (
        "if they are different machines, give one a distinct name: --force-node PATH=NAME; "
        "if they are the same recording, merge only one copy"
    )


@dataclass(frozen=True, slots=True)
class ClockOffset:
    """Add ``offset_ns`` to a node's wall clock to put it on the reference clock."""

    node: str
    offset_ns: int
    source: str = "manual"


@dataclass(slots=True)
class InputReport:
    path: str
    kind: str  # "gpuscope" or "ingero"
    sessions_added: int = 0
    sessions_skipped: int = 0
    events_by_node: dict[str, int] = field(default_factory=dict)

    @property
    def events(self) -> int:
        return sum(self.events_by_node.values())


@dataclass(slots=True)
class MergeReport:
    inputs: list[InputReport] = field(default_factory=list)

    def events_by_node(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for inp in self.inputs:
            for node, n in inp.events_by_node.items():
                total[node] = total.get(node, 0) + n
        return dict(sorted(total.items()))


@dataclass(frozen=True, slots=True)
class _Span:
    node: str
    start_ns: int
    end_ns: int
    uuid: str
    path: str


@dataclass(frozen=True, slots=True)
class MergeInput:
    """One input: the user's file (``path``, named in reports and renames) and the gpuscope file to read."""

    path: Path
    source: Path
    kind: str  # "gpuscope" or "ingero"


def check_merge_request(
    paths: Sequence[Path], out_path: Path, force_node: str | None, renames: dict[Path, str]
) -> None:
    """Refuse a merge that cannot work before any file is read.

    Raises UsageError (no inputs, empty or ':' node names) or SameFileError
    (the output is an input under any name, or one of its SQLite side files).
    """
    if not paths:
        raise UsageError("nothing to merge", remedy="pass the databases to merge: gpuscope merge A.db B.db -o OUT.db")
    for name in [force_node, *renames.values()]:
        if name is not None:
            check_node_name(name, "--force-node")
    refuse_same_file(out_path, paths)


def merge_files(
    inputs: Sequence[MergeInput],
    dest: str | os.PathLike[str],
    *,
    force_node: str | None = None,
    rename: dict[Path, str] | None = None,
    clock_offsets: Sequence[ClockOffset] = (),
    progress: Progress | None = None,
) -> MergeReport:
    """Merge gpuscope databases into a new database at ``dest``.

    ``force_node`` names sessions recorded without a node; ``rename`` maps an
    input's resolved path to the node name all its sessions get. ``dest`` is
    replaced only when every input merged and the new file is on disk
    (``gpuscope.platform.files.atomic_output``). Other formats are converted
    first by ``gpuscope.recording.merge_recordings``.

    Raises UsageError (see ``check_merge_request``), OutputBusyError when a
    process has ``dest`` open, PlantedLinkError when ``dest`` is a link
    another user planted in a shared folder, DatabaseError /
    SchemaTooNewError for bad inputs (one not stored as UTF-8 included),
    MergeConflictError for overlapping sessions of one node, OutputError
    when ``dest`` cannot be written.
    """
    out_path = resolve_refusing_planted_links(dest)
    renames = rename or {}
    check_merge_request([i.path for i in inputs], out_path, force_node, renames)
    for given in inputs:
        _check_input(given)
    report = MergeReport()
    spans: list[_Span] = []
    try:
        # build_database fills ``tmp``; atomic_output adds the fsync, the checks on dest and the final rename.
        with atomic_output(out_path, holders=recording_holders) as tmp, build_database(tmp) as out:
            for i, item in enumerate(inputs, start=1):
                if progress:
                    progress(f"[{i}/{len(inputs)}] {item.path}")
                inp = InputReport(str(item.path), item.kind)
                with _attached(out, item.source):
                    _merge_one(out, inp, renames.get(item.path), force_node, spans, progress)
                report.inputs.append(inp)
            for off in clock_offsets:
                set_clock_offset(out, off)
            if progress:
                progress("building the time index")
            # As a trace's session end does: without it, every reader of the output scans for a time range.
            build_indexes(out)
    except sqlite3.Error as exc:
        failure = database_write_failure(exc, dest)
        if failure is None:
            raise
        raise failure from None
    return report


def _check_input(item: MergeInput) -> None:
    """Refuse an input that cannot be attached to the output: not gpuscope's, too new, or not UTF-8."""
    conn = connect_reader(item.source)  # raises for non-gpuscope files and newer schemas
    try:
        encoding = str(conn.execute("PRAGMA encoding").fetchone()[0])
    finally:
        conn.close()
    # SQLite attaches only files of the output's text encoding; gpuscope writes UTF-8, another tool may not have.
    if encoding != "UTF-8":
        raise DatabaseError(
            f"{item.path}: its text is stored as {encoding}; merge reads only UTF-8 recordings (gpuscope's own)",
            remedy="merge the recordings as gpuscope wrote them; explain, query and export read this one as it is",
        )


def set_clock_offset(conn: sqlite3.Connection, offset: ClockOffset, measured_at_ns: int | None = None) -> None:
    """Store (or replace) a node's clock offset; ``events_aligned`` applies it."""
    conn.execute(
        "INSERT OR REPLACE INTO node_clock_offsets(node, offset_ns, source, measured_at_ns) VALUES (?, ?, ?, ?)",
        (offset.node, offset.offset_ns, offset.source, measured_at_ns or time.time_ns()),
    )


@contextlib.contextmanager
def _attached(out: sqlite3.Connection, path: Path) -> Iterator[None]:
    # The same read path as every reader: nothing is created beside an input.
    out.execute("ATTACH DATABASE ? AS src", (read_uri(path)[0],))
    try:
        yield
    except BaseException:
        # Ctrl-C can land while a transaction (or a statement) still holds src: DETACH then fails with
        # "database src is locked", and that error must not take the place of the one on its way out.
        _abandon(out, "DETACH DATABASE src")
        raise
    out.execute("DETACH DATABASE src")


def _abandon(out: sqlite3.Connection, *then: str) -> None:
    """Roll back what is open on ``out``, then run ``then``, while another exception propagates: their errors are
    dropped (the output under construction is removed anyway; SQLite may have rolled back itself after a full disk)."""
    with contextlib.suppress(sqlite3.Error):
        if out.in_transaction:
            out.execute("ROLLBACK")
    for statement in then:
        with contextlib.suppress(sqlite3.Error):
            out.execute(statement)


def _merge_one(
    out: sqlite3.Connection,
    inp: InputReport,
    rename: str | None,
    force_node: str | None,
    spans: list[_Span],
    progress: Progress | None,
) -> None:
    out.execute("BEGIN")
    try:
        session_map = _merge_sessions(out, inp, rename, force_node, spans)
        out.execute("DROP TABLE IF EXISTS temp.session_map")
        out.execute("CREATE TEMP TABLE session_map(old INTEGER PRIMARY KEY, new INTEGER NOT NULL, node TEXT NOT NULL)")
        out.executemany("INSERT INTO temp.session_map VALUES (?, ?, ?)", session_map)
        if session_map:
            _remap_lookups(out)
            offset = _id_offset(out)
            _copy_events(out, offset, inp, progress)
            _copy_side_tables(out, offset, rename, force_node)
            if progress:
                progress(f"  {inp.path}: building the column blocks explain reads")
            build_blocks(out)  # the output's own, of its ids and ops: explain reads them as from a trace's file
        out.execute("COMMIT")
    except BaseException:
        _abandon(out)
        raise


def _merge_sessions(
    out: sqlite3.Connection, inp: InputReport, rename: str | None, force_node: str | None, spans: list[_Span]
) -> list[tuple[int, int, str]]:
    """Insert the input's new sessions; return (old id, new id, node) for each."""
    cols = _common_columns(out, "sessions")
    copied = [c for c in cols if c not in ("id", "node")]
    last = dict(
        out.execute(
            "SELECT session_id, max(ts_ns) FROM src.event_log GROUP BY session_id",
        ).fetchall()
    )
    mapping = []
    for row in out.execute(f"SELECT id, node, {', '.join(copied)} FROM src.sessions ORDER BY id").fetchall():
        old_id, node, values = row[0], rename or row[1] or force_node, dict(zip(copied, row[2:], strict=True))
        if not node:
            raise UsageError(
                f"{inp.path}: session {values.get('uuid')} was recorded without a node name",
                remedy="name it: --force-node NAME",
            )
        existing = out.execute("SELECT id, node FROM sessions WHERE uuid = ?", (values["uuid"],)).fetchone()
        if existing is not None:
            _check_same_recording(out, inp.path, old_id, existing, node, spans, values["uuid"])
            inp.sessions_skipped += 1
            continue
        span = _span(node, values, last.get(old_id), inp.path)
        for other in spans:
            if (
                other.node == node
                and other.path != inp.path
                and span.start_ns < other.end_ns
                and other.start_ns < span.end_ns
            ):
                raise MergeConflictError(
                    f"node {node!r} has overlapping sessions in {other.path} ({other.uuid}) and {inp.path} "
                    f"({span.uuid}): two recordings cannot share a node name"
                )
        spans.append(span)
        cur = out.execute(
            f"INSERT INTO sessions(node, {', '.join(copied)}) VALUES (?{', ?' * len(copied)})",
            (node, *values.values()),
        )
        mapping.append((old_id, int(cur.lastrowid or 0), node))
        inp.sessions_added += 1
    return mapping


def _span(node: str, s: dict[str, object], last_ts: object, path: str) -> _Span:
    start = int(str(s["started_wall_ns"]))
    end = int(str(s["stopped_wall_ns"])) if s.get("stopped_wall_ns") is not None else start
    if last_ts is not None:
        end = max(end, int(str(last_ts)) - int(str(s["started_mono_ns"])) + start)
    return _Span(node, start, end, str(s["uuid"]), path)


def _check_same_recording(
    out: sqlite3.Connection,
    path: str,
    old_id: int,
    existing: tuple[int, str],
    node: str,
    spans: list[_Span],
    session_uuid: str,
) -> None:
    """A uuid seen before must be the same recording: same node, same number of events."""
    theirs = out.execute("SELECT count(*) FROM src.event_log WHERE session_id = ?", (old_id,)).fetchone()[0]
    ours = out.execute("SELECT count(*) FROM event_log WHERE session_id = ?", (existing[0],)).fetchone()[0]
    if existing[1] != node or theirs != ours:
        first = next((s.path for s in spans if s.uuid == session_uuid), "an earlier input")
        raise MergeConflictError(
            f"session {session_uuid} is in {first} ({existing[1]}, {ours} events) and in {path} "
            f"({node}, {theirs} events) with different contents"
        )


def _remap_lookups(out: sqlite3.Connection) -> None:
    """Temp tables comm_map and op_map: the input's ids -> the output's."""
    out.execute("INSERT OR IGNORE INTO comms(comm) SELECT comm FROM src.comms")
    out.execute("DROP TABLE IF EXISTS temp.comm_map")
    out.execute(
        "CREATE TEMP TABLE comm_map AS SELECT s.id AS old, m.id AS new FROM src.comms s JOIN main.comms m ON m.comm = s.comm"
    )
    out.execute("DROP TABLE IF EXISTS temp.op_map")
    out.execute("CREATE TEMP TABLE op_map(old INTEGER PRIMARY KEY, new INTEGER NOT NULL)")
    for old, name, source, kind, desc in out.execute(
        "SELECT id, name, source, kind, description FROM src.ops"
    ).fetchall():
        out.execute("INSERT INTO temp.op_map VALUES (?, ?)", (old, ensure_op(out, name, source, kind, desc)))


def _id_offset(out: sqlite3.Connection) -> int:
    """0 when the input's event ids are all free in the output, else a shift past its largest id."""
    lo, hi = out.execute(
        "SELECT min(e.id), max(e.id) FROM src.event_log e JOIN temp.session_map m ON m.old = e.session_id"
    ).fetchone()
    if lo is None:
        return 0
    if out.execute("SELECT 1 FROM main.event_log WHERE id BETWEEN ? AND ? LIMIT 1", (lo, hi)).fetchone() is None:
        return 0
    top = out.execute("SELECT max(id) FROM main.event_log").fetchone()[0]
    return int(top) + 1 - int(lo)


def _copy_events(out: sqlite3.Connection, offset: int, inp: InputReport, progress: Progress | None) -> None:
    cols = _common_columns(out, "event_log")
    special = {
        "id": "e.id + :offset",
        "session_id": "m.new",
        "comm_id": "c.new",
        "op_id": "coalesce(o.new, e.op_id)",
    }
    select = ", ".join(special.get(c, f"e.{c}") for c in cols)
    sql = (
        f"INSERT INTO main.event_log({', '.join(cols)}) SELECT {select} FROM src.event_log e "
        "JOIN temp.session_map m ON m.old = e.session_id LEFT JOIN temp.comm_map c ON c.old = e.comm_id "
        "LEFT JOIN temp.op_map o ON o.old = e.op_id WHERE e.id BETWEEN :lo AND :hi"
    )
    lo, hi = out.execute("SELECT min(id), max(id) FROM src.event_log").fetchone()
    if lo is None:
        return
    total = hi - lo + 1
    for start in range(lo, hi + 1, _CHUNK):
        out.execute(sql, {"offset": offset, "lo": start, "hi": start + _CHUNK - 1})
        if progress and total > _CHUNK:
            progress(f"  {inp.path}: {min(start + _CHUNK - lo, total) * 100 // total}% of event ids copied")
    for node, n in out.execute(
        "SELECT m.node, count(*) FROM src.event_log e JOIN temp.session_map m ON m.old = e.session_id GROUP BY m.node"
    ):
        inp.events_by_node[node] = inp.events_by_node.get(node, 0) + n
    if "imported_events" in _tables(out, "src"):
        cols = _common_columns(out, "imported_events")
        select = ", ".join("i.event_log_id + :offset" if c == "event_log_id" else f"i.{c}" for c in cols)
        out.execute(
            f"INSERT INTO main.imported_events({', '.join(cols)}) SELECT {select} FROM src.imported_events i "
            "JOIN src.event_log e ON e.id = i.event_log_id JOIN temp.session_map m ON m.old = e.session_id",
            {"offset": offset},
        )


def _copy_side_tables(out: sqlite3.Connection, offset: int, rename: str | None, force_node: str | None) -> None:
    """Every other table both files have: by session, by stack hash, or row by row."""
    for table in sorted(_tables(out, "src") & _tables(out, "main") - _SPECIAL):
        if table.startswith("sqlite_"):
            continue
        cols = _common_columns(out, table)
        pk = _integer_pk(out, table)
        if pk is not None and pk != "hash":
            cols = [c for c in cols if c != pk]  # a fresh row id here; nothing else refers to it
        exprs = {c: f"t.{c}" for c in cols}
        join = ""
        if "session_id" in cols:
            exprs["session_id"] = "m.new"
            join = "JOIN temp.session_map m ON m.old = t.session_id"
        if "node" in cols:
            exprs["node"] = _node_expr(rename, force_node)
        # Stacks are content-addressed: the same hash on two nodes is one stack.
        where = "WHERE t.hash NOT IN (SELECT hash FROM main.stacks)" if table == "stacks" and "hash" in cols else ""
        select = ", ".join(exprs[c] for c in cols)
        verb = "INSERT OR REPLACE" if table == "node_clock_offsets" else "INSERT OR IGNORE"
        out.execute(f"{verb} INTO main.{table}({', '.join(cols)}) SELECT {select} FROM src.{table} t {join} {where}")
    if "imports" in _tables(out, "src"):
        out.execute(
            "INSERT INTO main.imports(source_path, source_kind, source_version, nodes, imported_at_ns, counts) "
            "SELECT source_path, source_kind, source_version, nodes, imported_at_ns, counts FROM src.imports s "
            "WHERE NOT EXISTS (SELECT 1 FROM main.imports i WHERE i.source_path = s.source_path "
            "AND i.source_kind = s.source_kind AND i.counts = s.counts)"
        )


def _node_expr(rename: str | None, force_node: str | None) -> str:
    if rename:
        return _quote_text(rename)
    if force_node:
        return f"CASE WHEN t.node = '' THEN {_quote_text(force_node)} ELSE t.node END"
    return "t.node"


def _quote_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _tables(out: sqlite3.Connection, schema: str) -> set[str]:
    return {r[0] for r in out.execute(f"SELECT name FROM {schema}.sqlite_master WHERE type = 'table'")}


def _common_columns(out: sqlite3.Connection, table: str) -> list[str]:
    """Columns of ``table`` in both the output and the input, in the output's order."""
    theirs = {r[1] for r in out.execute(f"PRAGMA src.table_info({table})")}
    return [r[1] for r in out.execute(f"PRAGMA main.table_info({table})") if r[1] in theirs]


def _integer_pk(out: sqlite3.Connection, table: str) -> str | None:
    """The column aliasing the rowid (a lone INTEGER PRIMARY KEY), if any."""
    pks = [(r[1], r[2]) for r in out.execute(f"PRAGMA main.table_info({table})") if r[5]]
    if len(pks) == 1 and pks[0][1].upper() == "INTEGER":
        return str(pks[0][0])
    return None
