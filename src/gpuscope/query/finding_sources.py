"""Findings for export markers, diff and the API: from the explain engine or the findings table.

Two sources:

* ``explain_findings(path)`` runs the explain engine (``gpuscope.analysis``,
  without storing anything) and returns the same ``Finding`` objects the CLI
  renders. It loads the analysed window into memory.
* ``stored_markers(conn)`` reads the latest run kept in the ``findings``
  table (written by ``gpuscope explain --save-findings``), streaming, or returns None when
  the database has no such table (version-1 files).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gpuscope.model.findings import Finding
from gpuscope.model.session_choice import LAST_RUN, SessionChoice
from gpuscope.store.findings_history import latest_stored_findings


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
    path: str | os.PathLike[str],
    *,
    since_ns: int | None = None,
    pids: tuple[int, ...] = (),
    sessions: SessionChoice = LAST_RUN,
) -> list[Finding]:
    """Run the explain engine on ``path`` (read-only: nothing is stored) and return its ranked findings."""
    from gpuscope.analysis.engine import ExplainOptions, explain_db

    return list(explain_db(path, ExplainOptions(since_ns=since_ns, pids=pids, sessions=sessions)).findings)


def explain_markers(
    path: str | os.PathLike[str],
    *,
    since_ns: int | None = None,
    pids: tuple[int, ...] = (),
    sessions: SessionChoice = LAST_RUN,
) -> list[FindingMarker]:
    """Explain-engine findings as markers, placed at the start of the analysed window."""
    from gpuscope.analysis.engine import ExplainOptions, explain_db

    report = explain_db(path, ExplainOptions(since_ns=since_ns, pids=pids, sessions=sessions))
    at = report.window.start_ns + report.window.wall_offset_ns
    return [finding_marker(f, at) for f in report.findings]


def stored_markers(conn: sqlite3.Connection) -> Iterator[FindingMarker] | None:
    """Markers of the latest explain run stored in the ``findings`` table; None without the table."""
    rows = latest_stored_findings(conn)
    if rows is None:
        return None
    return (
        FindingMarker(
            r.finding_id,
            r.severity.upper(),
            str(r.symptom.get("summary") or r.kind),
            r.wall_ns,
            {"kind": r.kind, "fix": r.fix, "lost_ns": r.lost_ns},
            r.kind,
            r.symptom.get("op"),
        )
        for r in rows
    )


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
