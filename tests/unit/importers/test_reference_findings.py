"""The reference system's own findings in a file it recorded: shown beside ours, labelled, and exported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuscope.analysis.engine import ExplainOptions, explain_db
from gpuscope.cli import main
from tests.ingero_fixtures import ingero_fixture


def test_explain_shows_the_references_findings_as_its_own_with_how_ours_relate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    db = ingero_fixture("sample-gpu-node-01.db")
    report = explain_db(db, ExplainOptions())
    # the file's four stored chains, detected while recording, outside the few rows it kept
    assert [r.severity for r in report.reference] == ["MEDIUM", "MEDIUM", "HIGH", "HIGH"]
    assert all(r.node == "gpu-node-01" for r in report.reference)
    # none of their calls is among the stored rows: ours cannot be compared, and says so
    assert all("cannot measure" in r.agreement for r in report.reference)
    # and they are never mixed into ours
    assert all(f.kind != "reference" for f in report.findings)
    assert main(["explain", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "The reference system's own findings, stored in this file (4; its words, not gpuscope's):" in out
    assert "[HIGH] cuLaunchKernel throughput dropped 64%" in out
    assert main(["explain", "--db", str(db), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["reference_findings"]) == 4 and doc["reference_findings"][0]["op"] == "cuLaunchKernel"


def test_export_marks_the_references_findings_in_their_own_category(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    assert main(["export", "--db", str(ingero_fixture("sample-gpu-node-01.db")), "-o", str(out)]) == 0
    events = json.loads(out.read_text())["traceEvents"]
    refs = [e for e in events if e.get("cat") == "reference-finding"]
    assert len(refs) == 4
    assert all(e["name"].startswith("[reference ") and e["ph"] == "i" for e in refs)
    assert {e["args"]["node"] for e in refs} == {"gpu-node-01"}
