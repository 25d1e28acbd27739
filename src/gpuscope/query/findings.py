"""Findings for export markers, diff and the API: from the explain engine or the findings table.

Two sources:

* ``explain_findings(path)`` runs the explain engine (``gpuscope.analysis``,
  without storing anything) and returns the same ``Finding`` objects the CLI
  renders. It loads the analysed window into memory.
* ``stored_markers(conn)`` reads the latest run kept in the ``findings``
  table (written by ``gpuscope explain``), streaming, or returns None when
  the database has no such table (version-1 files).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gpuscope.model.findings import Finding, Severity


@dataclass(frozen=True, slots=True)
class FindingMarker:
    """A finding reduced to what a timeline or a comparison needs (``wall_ns``: where to mark it)."""

    key: str
    severity: str
    title: str
    wall_ns: int | None = None
    args: dict[str, Any] = field(default_factory=dict)
    kind: str = ""
    op: str | None = None

    @property
    def compare_key(self) -> str:
        """``kind:op``: the same problem in two runs, whatever the pids."""
        return f"{self.kind}:{self.op or '-'}"


def explain_findings(
    path: str | os.PathLike[str], *, since_ns: int | None = None, pids: tuple[int, ...] = ()
) -> list[Finding]:
    """Run the explain engine on ``path`` (read-only: nothing is stored) and return its ranked findings."""
    from gpuscope.analysis.engine import ExplainOptions, explain_db

    return list(explain_db(path, ExplainOptions(since_ns=since_ns, pids=pids, store=False)).findings)


def explain_markers(
    path: str | os.PathLike[str], *, since_ns: int | None = None, pids: tuple[int, ...] = ()
) -> list[FindingMarker]:
    """Explain-engine findings as markers, placed at the start of the analysed window."""
    from gpuscope.analysis.engine import ExplainOptions, explain_db

    report = explain_db(path, ExplainOptions(since_ns=since_ns, pids=pids, store=False))
    at = report.window.start_ns + report.window.wall_offset_ns
    return [finding_marker(f, at) for f in report.findings]


def has_findings_table(conn: sqlite3.Connection) -> bool:
    row = conn.execute("SELECT 1 FROM main.sqlite_master WHERE type = 'table' AND name = 'findings'").fetchone()
    return row is not None


def stored_markers(conn: sqlite3.Connection) -> Iterator[FindingMarker] | None:
    """Markers of the latest explain run stored in the ``findings`` table; None without the table."""
    if not has_findings_table(conn):
        return None
    offsets = dict(conn.execute("SELECT id, started_wall_ns - started_mono_ns FROM sessions").fetchall())
    cur = conn.execute(
        "SELECT session_id, window_start_ns, severity, kind, finding_id, symptom, fix, lost_ns FROM main.findings "
        "WHERE created_at_ns = (SELECT max(created_at_ns) FROM main.findings) ORDER BY id"
    )

    def gen() -> Iterator[FindingMarker]:
        for sid, start, severity, kind, finding_id, symptom, fix, lost_ns in cur:
            try:
                sym = json.loads(symptom)
                summary, op = str(sym.get("summary") or kind), sym.get("op")
            except (ValueError, AttributeError):
                summary, op = str(kind), None
            offset = offsets.get(sid)
            wall = int(start) + int(offset) if offset is not None and start is not None else None
            yield FindingMarker(
                str(finding_id), str(severity).upper(), summary, wall,
                {"kind": kind, "fix": fix, "lost_ns": lost_ns}, str(kind), op,
            )  # fmt: skip

    return gen()


def finding_marker(f: Finding, wall_ns: int | None = None) -> FindingMarker:
    return FindingMarker(
        key=f.id,
        severity=f.severity.name,
        title=f.symptom.summary,
        wall_ns=wall_ns,
        args={"rule": f.rule, "kind": f.kind, "fix": f.fix, "lost_ns": f.lost_ns},
        kind=f.kind,
        op=f.symptom.op,
    )


def severity_rank(text: str) -> int:
    try:
        return int(Severity.parse(text))
    except ValueError:
        return 0
