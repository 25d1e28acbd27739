"""The findings history table: appended only on request, read for markers and diffs.

A reader never writes into a user's recording, so nothing here runs unless a
user asked for it (``gpuscope explain --save-findings``) or the recording is
one that gpuscope itself is making (the demo).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gpuscope.model.findings import Finding
from gpuscope.store.connect import connect_writer, table_names
from gpuscope.store.sessions_read import session_wall_offsets
from gpuscope.store.stored_json import stored_json


@dataclass(frozen=True, slots=True)
class StoredFinding:
    """One row of the latest stored explain run; ``wall_ns`` where its window starts (None when unknown)."""

    finding_id: str
    severity: str
    kind: str
    symptom: dict[str, Any]
    fix: str
    lost_ns: int | None
    wall_ns: int | None


def save_findings(
    path: str | os.PathLike[str],
    findings: Sequence[Finding],
    *,
    session_id: int | None,
    window_start_ns: int,
    window_end_ns: int,
) -> None:
    """Append one explain run's findings to the recording at ``path`` (migrating it if needed).

    ``session_id`` is None for a window over several sessions.
    Raises DatabaseError when the file cannot be opened for writing.
    """
    conn = connect_writer(path)
    try:
        now = time.time_ns()
        rows = [
            (
                session_id,
                window_start_ns,
                window_end_ns,
                f.severity.name,
                f.kind,
                f.id,
                json.dumps(f.symptom.as_dict()),
                json.dumps([c.as_dict() for c in f.causes]),
                f.fix,
                f.lost_ns,
                now,
            )
            for f in findings
        ]
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO findings(session_id, window_start_ns, window_end_ns, severity, kind, finding_id, symptom, "
            "causes, fix, lost_ns, created_at_ns) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


def latest_stored_findings(conn: sqlite3.Connection) -> Iterator[StoredFinding] | None:
    """The latest explain run stored in the ``findings`` table, streaming; None without the table."""
    if "findings" not in table_names(conn):
        return None
    offsets = dict(session_wall_offsets(conn))
    cur = conn.execute(
        "SELECT session_id, window_start_ns, severity, kind, finding_id, symptom, fix, lost_ns FROM main.findings "
        "WHERE created_at_ns = (SELECT max(created_at_ns) FROM main.findings) ORDER BY id"
    )

    def gen() -> Iterator[StoredFinding]:
        for sid, start, severity, kind, finding_id, symptom, fix, lost_ns in cur:
            sym = stored_json(symptom)
            if not isinstance(sym, dict):
                sym = {}
            offset = offsets.get(sid)
            wall = int(start) + int(offset) if offset is not None and start is not None else None
            yield StoredFinding(str(finding_id), str(severity), str(kind), sym, fix, lost_ns, wall)

    return gen()
