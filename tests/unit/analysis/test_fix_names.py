"""A fix that names processes names the ones its own evidence found, for every finding of every demo scenario.

cpu-preemption once gave every process after the first the first process's
culprits ("move `cpu_hog` (pid 3999)" for a process whose preemptors were
8821-8823): the text reached the CLI, the dashboard, MCP and fleet output.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from gpuscope.analysis.engine import ExplainOptions, explain_db
from gpuscope.model.session_choice import EVERY_SESSION
from tests.demo_recording import every_scenario

# How a fix names a process: `comm` (pid N)
_NAMED = re.compile(r"`([^`]+)` \(pid (\d+)\)")


def _evidence_processes(finding: dict[str, Any]) -> set[tuple[str, int]]:
    """The (comm, pid) pairs the finding's causes found: their culprits, and the processes their evidence names."""
    found: set[tuple[str, int]] = set()
    for cause in finding["causes"]:
        found |= {(str(c["comm"]), int(c["pid"])) for c in cause.get("culprits", []) if c.get("pid") is not None}
        for line in cause.get("evidence", []):
            found |= {(comm, int(pid)) for comm, pid in re.findall(r"(\S+) \(pid (\d+)", line)}
    return found


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`gpuscope demo --synthetic`, then `gpuscope explain --session all --json`: every scenario in one recording, explained whole."""
    db = every_scenario(tmp_path_factory.mktemp("fix-names") / "d.db")
    return explain_db(db, ExplainOptions(sessions=EVERY_SESSION)).as_dict()


def test_the_processes_a_fix_names_are_those_in_its_evidence(demo_report: dict[str, Any]) -> None:
    named_any = False
    for finding in demo_report["findings"]:
        named = {(comm, int(pid)) for comm, pid in _NAMED.findall(finding.get("fix") or "")}
        named_any |= bool(named)
        # each process the fix tells the user to act on is one this finding's evidence found
        assert named <= _evidence_processes(finding), (finding["id"], finding["fix"], finding["causes"])
    assert named_any, "no fix named a process: the test checks nothing"


def test_each_preempted_process_gets_its_own_preemptors_in_its_fix(demo_report: dict[str, Any]) -> None:
    # given two processes preempted by different hogs (the incident's and cpu-contention's)
    preempted = [f for f in demo_report["findings"] if f["kind"] == "cpu-preemption"]
    assert len({f["symptom"]["pid"] for f in preempted}) >= 2, [f["id"] for f in preempted]
    fixes = {f["symptom"]["pid"]: set(_NAMED.findall(f["fix"])) for f in preempted}
    # then each fix names preemptors, and no two processes' fixes name the same one
    named = list(fixes.values())
    assert all(named), fixes
    assert not set.intersection(*named), fixes
