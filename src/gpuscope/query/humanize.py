"""Readable table cells for query results: durations with units, times as ISO 8601 UTC, grouped integers.

A query's result is bare columns, so what a value means is read from its
column's name, by the schema's conventions (docs/schema.md): integer
nanoseconds are named ``*_ns``; ``wall_ns``, ``*_wall_ns`` and ``*_at_ns``
are Unix times; ``ts_ns``, ``bucket_ns`` and ``*_mono_ns`` are the recording
host's CLOCK_MONOTONIC, turned into wall-clock time with the offset of the
row's session (``sessions.started_wall_ns - started_mono_ns``); every other
``*_ns`` is a duration. ``min(x)``, ``max(x)``, ``avg(x)``, ``sum(x)`` and
``total(x)`` keep the meaning of ``x`` (a sum of times is no time). Ids,
handles and codes stay as they are: ``4,821`` is no pid.

Only the table is made readable; JSON and CSV keep the stored values.
"""

from __future__ import annotations

import enum
import re
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from gpuscope.model.times import iso_utc
from gpuscope.model.units import fmt_ns
from gpuscope.query.output import cell_text
from gpuscope.store.sessions_read import session_wall_offsets

# Unix times outside these bounds (1973 .. 2099) are not times a recording holds: such a value in a
# time column (a difference of two times named ts_ns, a monotonic value with no session) is shown
# as a number rather than as a made-up date.
_WALL_MIN_NS = 100_000_000_000_000_000
_WALL_MAX_NS = 4_102_444_800_000_000_000

_AGGREGATE = re.compile(r"(min|max|avg|sum|total)\(\s*(?:distinct\s+)?(?:\w+\.)?(\w+)\s*\)", re.IGNORECASE)
# Names whose integers identify or encode something: grouping their digits would misread them.
_IDENTIFIERS = frozenset(
    {
        "arg0",
        "arg1",
        "capture_mode",
        "comm_rank",
        "communicator",
        "datatype",
        "flags",
        "graph",
        "graph_exec",
        "kernel",
        "kernel_name",
        "local_rank",
        "nranks",
        "peer",
        "prev_state",
        "rank",
        "reduce_op",
        "ret",
        "stream",
        "version",
        "world_size",
    }
)
_IDENTIFIER_SUFFIXES = ("id", "hash", "handle", "_code")


class ColumnKind(enum.Enum):
    """What a column's values are, read from its name."""

    WALL = "wall"  # Unix time in ns
    MONOTONIC = "monotonic"  # CLOCK_MONOTONIC ns of the row's session
    DURATION = "duration"  # ns
    IDENTIFIER = "identifier"  # ids, handles, codes: shown as stored
    NUMBER = "number"  # counts, bytes, anything else: digits grouped


def column_kind(name: str) -> ColumnKind:
    """Read what a result column holds from its name (``duration_ns``, ``max(ts_ns)``, ``pid``, ...)."""
    n = name.strip().lower()
    m = _AGGREGATE.fullmatch(n)
    if m is not None:
        inner = column_kind(m.group(2))
        if m.group(1) in ("sum", "total") and inner in (ColumnKind.WALL, ColumnKind.MONOTONIC):
            return ColumnKind.NUMBER
        return inner
    if n == "wall_ns" or n.endswith(("_wall_ns", "_at_ns")) or n == "first_seen_ns":
        return ColumnKind.WALL
    if n in ("ts_ns", "bucket_ns", "window_start_ns", "window_end_ns") or n.endswith(("_mono_ns", "_ts_ns")):
        return ColumnKind.MONOTONIC
    if n.endswith("_ns"):
        return ColumnKind.DURATION
    if n in _IDENTIFIERS or n.endswith(_IDENTIFIER_SUFFIXES):
        return ColumnKind.IDENTIFIER
    return ColumnKind.NUMBER


def duration_text(ns: float) -> str:
    """A duration with its unit; negative ones (clock offsets) keep their sign."""
    return "-" + fmt_ns(-ns) if ns < 0 else fmt_ns(ns)


def _number_text(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return cell_text(value)


class ReadableCells:
    """Makes the rows of one query result readable: a ``RowCells`` for ``write_rows``.

    ``wall_offsets`` maps a session id to the ns that turn its monotonic times
    into Unix times. ``unconverted`` collects the monotonic columns that had to
    be shown as numbers (several sessions, and no ``session_id`` in the row).
    """

    def __init__(self, columns: Sequence[str], wall_offsets: Mapping[int, int]) -> None:
        self.columns = list(columns)
        self.wall_offsets = dict(wall_offsets)
        self.unconverted: set[str] = set()
        self._kinds = [column_kind(c) for c in self.columns]
        lowered = [c.strip().lower() for c in self.columns]
        self._session_col = lowered.index("session_id") if "session_id" in lowered else None
        shared = set(self.wall_offsets.values())
        # One offset for every session (one session, or imported ones, whose ts_ns is Unix time already).
        self._shared_offset = shared.pop() if len(shared) == 1 else None

    def __call__(self, row: Sequence[Any]) -> list[str]:
        return [self._cell(i, v, row) for i, v in enumerate(row)]

    def _cell(self, i: int, value: Any, row: Sequence[Any]) -> str:
        kind = self._kinds[i] if i < len(self._kinds) else ColumnKind.NUMBER
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not numeric or kind is ColumnKind.IDENTIFIER:
            return cell_text(value)
        if kind is ColumnKind.DURATION:
            return duration_text(value)
        if kind is ColumnKind.NUMBER:
            return _number_text(value)
        wall = int(value)
        if kind is ColumnKind.MONOTONIC:
            offset = self._offset(row)
            if offset is None:
                self.unconverted.add(self.columns[i])
                return _number_text(value)
            wall += offset
        # to the microsecond: what ``--from``/``--to`` read back
        return iso_utc(wall, 6) if _WALL_MIN_NS <= wall < _WALL_MAX_NS else _number_text(value)

    def _offset(self, row: Sequence[Any]) -> int | None:
        if self._session_col is not None:
            sid = row[self._session_col]
            if isinstance(sid, int) and sid in self.wall_offsets:
                return self.wall_offsets[sid]
        return self._shared_offset

    def note(self) -> str | None:
        """What could not be made readable, and how to get it, for stderr; None when everything was."""
        if not self.unconverted:
            return None
        names = ", ".join(sorted(self.unconverted))
        if not self.wall_offsets:
            return (
                f"note: {names} shown as recorded (CLOCK_MONOTONIC ns): the file has no session clock to convert them"
            )
        return (
            f"note: {names} shown as recorded (CLOCK_MONOTONIC ns of several sessions): "
            "select session_id too for wall-clock times, or use wall_ns"
        )


def readable_cells(conn: sqlite3.Connection, columns: Sequence[str]) -> ReadableCells:
    """Readable cells for a result of ``conn`` with ``columns``, with every session's clock offset read from it."""
    try:
        offsets = dict(session_wall_offsets(conn))
    except sqlite3.DatabaseError:
        offsets = {}  # a file without a sessions table: monotonic times stay numbers
    return ReadableCells(columns, offsets)
