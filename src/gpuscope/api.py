"""The Python API for notebooks and scripts.

    import gpuscope
    t = gpuscope.open("run.db")
    t.events(since="5m", op="cudaStreamSynchronize")   # DataFrame (pandas/polars) or list of dicts
    t.findings()                                       # one row per finding
    t.explain()                                        # list[Finding], what `gpuscope explain` renders

Every read goes through the same read-only, write-refusing connection as
``gpuscope query``. Tables come back as a pandas DataFrame when pandas is
installed (``pip install 'gpuscope[frames]'``), else a polars DataFrame when
polars is, else plain rows (a list of dicts); ``frame=`` picks explicitly.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Sequence
from typing import Any, Literal

from gpuscope.errors import UsageError
from gpuscope.model.findings import Finding
from gpuscope.model.session_choice import SessionChoice
from gpuscope.query.filters import EventFilter
from gpuscope.query.finding_sources import explain_findings
from gpuscope.query.guarded import GuardedReader, open_reader
from gpuscope.query.output import unique_columns
from gpuscope.store.events_read import events_statement
from gpuscope.store.sessions_read import ALL_SESSIONS

FrameKind = Literal["auto", "pandas", "polars", "rows"]
Rows = list[dict[str, Any]]

_FRAMES_REMEDY = "pip install 'gpuscope[frames]' (pandas), or pip install polars; or pass frame='rows'"


def open(
    path: str | os.PathLike[str], *, timeout_s: float = 0.0, frame: FrameKind = "auto", session: int | str = "last"
) -> Trace:
    """Open a recording read-only. ``timeout_s``: limit per query (0: none). ``frame``: default table type.

    ``session``: which sessions every call reads, as ``--session`` does: a
    number, ``"last"`` (the last trace run, the default) or ``"all"``.
    Raises DatabaseError (missing, corrupt, not gpuscope), SchemaTooNewError,
    or UsageError for a session the recording does not hold.
    """
    trace = Trace(os.fspath(path), timeout_s=timeout_s, frame=frame, session=session)
    trace._reader(EventFilter(sessions=trace.chosen)).close()  # fail now, not at the first call
    return trace


class Trace:
    """A recording on disk. Cheap to keep: each call opens and closes its own read-only connection."""

    def __init__(
        self, path: str, *, timeout_s: float = 0.0, frame: FrameKind = "auto", session: int | str = "last"
    ) -> None:
        self.path = path
        self.timeout_s = timeout_s
        self.frame: FrameKind = frame
        try:
            self.chosen = SessionChoice.parse(str(session))
        except ValueError as exc:
            raise UsageError(f"session: {exc}") from None

    def __repr__(self) -> str:
        return f"gpuscope.Trace({self.path!r})"

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def _reader(self, event_filter: EventFilter | None = None) -> GuardedReader:
        return open_reader(self.path, event_filter=event_filter, timeout_s=self.timeout_s)

    def query(
        self,
        sql: str,
        params: Sequence[Any] | dict[str, Any] = (),
        *,
        frame: FrameKind | None = None,
        since: str | float | None = None,
        pid: int | Sequence[int] | None = None,
    ) -> Any:
        """Run one read-only SQL statement (``?`` or ``:name`` parameters); filters as in ``events``."""
        with self._reader(_filter(self.chosen, since, pid)) as reader:
            result = reader.query(sql, params)
            return to_frame(result.columns, list(result.rows), frame or self.frame)

    def events(
        self,
        since: str | float | None = None,
        op: str | Sequence[str] | None = None,
        *,
        pid: int | Sequence[int] | None = None,
        source: str | None = None,
        start: str | None = None,
        end: str | None = None,
        node: str | Sequence[str] | None = None,
        limit: int | None = None,
        frame: FrameKind | None = None,
    ) -> Any:
        """Rows of the ``events`` view (columns: docs/schema.md), oldest first.

        ``since``: the last stretch of the recording (``"5m"`` or seconds).
        ``op``: one op name or several. ``start``/``end``: offsets from the
        recording start (``"90s"``) or ISO 8601 times. ``limit``: at most N rows.
        """
        ops: list[str] | None = None
        if op is not None:
            ops = [op] if isinstance(op, str) else list(op)
        statement = events_statement(ops, source, limit)
        with self._reader(_filter(self.chosen, since, pid, start, end, node)) as reader:
            result = reader.query(statement.sql, statement.params)
            return to_frame(result.columns, list(result.rows), frame or self.frame)

    def explain(self, since: str | float | None = None, pid: int | Sequence[int] | None = None) -> list[Finding]:
        """Run the explain engine (stores nothing) and return its ranked ``Finding`` objects."""
        f = _filter(self.chosen, since, pid)
        return explain_findings(self.path, since_ns=f.since_ns, pids=f.pids, sessions=f.sessions)

    def findings(
        self,
        since: str | float | None = None,
        pid: int | Sequence[int] | None = None,
        *,
        frame: FrameKind | None = None,
    ) -> Any:
        """``explain()`` flattened to one row per finding (severity, kind, op, pid, p50/p99, lost time, fix)."""
        rows = [finding_row(f) for f in self.explain(since, pid)]
        columns = list(rows[0]) if rows else list(_FINDING_COLUMNS)
        return to_frame(columns, [tuple(r.values()) for r in rows], frame or self.frame)

    def sessions(self, *, frame: FrameKind | None = None) -> Any:
        """The ``sessions`` table: one row per ``gpuscope trace`` run."""
        return self.query(ALL_SESSIONS.sql, ALL_SESSIONS.params, frame=frame)


_FINDING_COLUMNS = (
    "id",
    "severity",
    "kind",
    "rule",
    "summary",
    "op",
    "pid",
    "comm",
    "count",
    "p50_ns",
    "p99_ns",
    "lost_ns",
    "lost_share",
    "causes",
    "fix",
)


def finding_row(f: Finding) -> dict[str, Any]:
    """One finding as a flat row (``causes`` as the list of cause kinds, strongest first)."""
    s = f.symptom
    values = (
        f.id,
        f.severity.name,
        f.kind,
        f.rule,
        s.summary,
        s.op,
        s.pid,
        s.comm,
        s.count,
        s.p50_ns,
        s.p99_ns,
        f.lost_ns,
        round(f.lost_share, 4),
        ", ".join(c.kind for c in f.causes),
        f.fix,
    )
    return dict(zip(_FINDING_COLUMNS, values, strict=True))


def _filter(
    sessions: SessionChoice,
    since: str | float | None,
    pid: int | Sequence[int] | None,
    start: str | None = None,
    end: str | None = None,
    node: str | Sequence[str] | None = None,
) -> EventFilter:
    pids = [pid] if isinstance(pid, int) else list(pid or [])
    nodes = [node] if isinstance(node, str) else list(node or [])
    return EventFilter.from_options(
        since=None if since is None else (f"{since}s" if isinstance(since, (int, float)) else since),
        start=start,
        end=end,
        pids=pids,
        nodes=nodes,
        sessions=sessions,
    )


def available_frame() -> Literal["pandas", "polars", "rows"]:
    """What ``frame="auto"`` returns here."""
    if importlib.util.find_spec("pandas") is not None:
        return "pandas"
    if importlib.util.find_spec("polars") is not None:
        return "polars"
    return "rows"


def to_frame(columns: Sequence[str], rows: Sequence[Sequence[Any]], frame: FrameKind = "auto") -> Any:
    """Rows as a pandas/polars DataFrame, or a list of dicts (``frame="rows"``, or neither installed)."""
    kind = available_frame() if frame == "auto" else frame
    keys = unique_columns(columns)
    if kind == "rows":
        return [dict(zip(keys, r, strict=False)) for r in rows]
    if kind == "pandas":
        try:
            pandas = importlib.import_module("pandas")
        except ImportError:
            raise UsageError("pandas is not installed", remedy=_FRAMES_REMEDY) from None
        return pandas.DataFrame.from_records([tuple(r) for r in rows], columns=keys)
    if kind == "polars":
        try:
            polars = importlib.import_module("polars")
        except ImportError:
            raise UsageError("polars is not installed", remedy=_FRAMES_REMEDY) from None
        return polars.DataFrame([tuple(r) for r in rows], schema=keys, orient="row")
    raise UsageError(f"unknown frame kind {frame!r}", remedy="use 'auto', 'pandas', 'polars' or 'rows'")
