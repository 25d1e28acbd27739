"""JSON read back from a recording: text that is not what gpuscope wrote, nested arrays included, reads as absent."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gpuscope.stacks.frames import frames_from_json
from gpuscope.store.findings_history import latest_stored_findings
from gpuscope.store.stored_json import stored_json
from tests.unit.query.builder import build_db

from .recordings import reading
from .test_sessions_read import DEEP_JSON


@pytest.mark.parametrize(
    "raw", [None, "", b"", 7, "{", b"\xff\xfe", DEEP_JSON, DEEP_JSON.encode(), "{" * 100_000 + "}" * 100_000]
)
def test_stored_text_that_is_not_json_reads_as_the_default(raw: object) -> None:
    assert stored_json(raw, default={}) == {}


def test_stored_json_text_reads_as_its_value() -> None:
    assert stored_json('{"a": [1, 2]}') == {"a": [1, 2]}
    assert stored_json(b"[3]") == [3]


def test_stack_frames_nested_200000_deep_are_no_frames() -> None:
    assert frames_from_json(DEEP_JSON) == ()


def test_a_stored_findings_symptom_nested_200000_deep_reads_as_no_symptom(tmp_path: Path) -> None:
    db = build_db(tmp_path / "a.db", n=10)
    conn = sqlite3.connect(db)
    conn.execute(
        "INSERT INTO findings(session_id, window_start_ns, window_end_ns, severity, kind, finding_id, symptom, "
        "causes, fix, lost_ns, created_at_ns) VALUES (1, 0, 1, 'HIGH', 'slow-sync', 'slow-sync-1', ?, '[]', 'x', 5, 9)",
        (DEEP_JSON,),
    )
    conn.commit()
    conn.close()
    with reading(db) as conn:
        found = latest_stored_findings(conn)
        assert found is not None
        assert [f.symptom for f in found] == [{}]
