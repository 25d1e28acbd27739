"""Findings history: append each explain run's findings to the ``findings`` table.

This is the only write `gpuscope explain` makes, and it happens only when the
database can be opened for writing: opening for writing applies pending
migrations (adding the ``findings`` table to a version-1 database). Recorded
events are never changed. A read-only file still gets its report.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from typing import TYPE_CHECKING

from gpuscope.errors import GpuscopeError

if TYPE_CHECKING:
    from gpuscope.analysis.engine import Report


def _writable(path: str | os.PathLike[str]) -> bool:
    p = os.fspath(path)
    return os.access(p, os.W_OK) and os.access(os.path.dirname(os.path.abspath(p)) or ".", os.W_OK)


def store_findings(path: str | os.PathLike[str], report: Report) -> tuple[bool, str]:
    """Append findings; return (stored, note explaining why not)."""
    if not _writable(path):
        return False, "findings not stored: the database is read-only"
    from gpuscope.store.connect import connect_writer

    try:
        conn = connect_writer(path)
    except GpuscopeError as exc:
        return False, f"findings not stored: {exc}"
    try:
        now = time.time_ns()
        w = report.window
        session = w.session_ids[0] if len(w.session_ids) == 1 else None  # NULL: a window over several
        rows = [
            (session, w.start_ns, w.end_ns, f.severity.name, f.kind, f.id,
             json.dumps(f.symptom.as_dict()), json.dumps([c.as_dict() for c in f.causes]), f.fix, f.lost_ns, now)
            for f in report.findings
        ]  # fmt: skip
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO findings(session_id, window_start_ns, window_end_ns, severity, kind, finding_id, symptom, "
            "causes, fix, lost_ns, created_at_ns) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        return False, f"findings not stored: {exc}"
    finally:
        conn.close()
    return True, ""
