"""explain names the code behind a finding's calls, from recorded Python stacks."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from gpuscope.analysis.engine import ExplainOptions, _with_call_sites, explain_db
from gpuscope.model.findings import Finding, Severity, Symptom
from gpuscope.recording import open_recording

PY_WORKLOAD = Path(__file__).resolve().parent.parent / "workloads" / "stack_py.py"


def test_a_findings_calls_are_attributed_to_the_python_function_that_made_them(trace_command, standin):
    # given a Python workload whose cudaMalloc calls all come from allocate_kv_cache
    run = trace_command([sys.executable, str(PY_WORKLOAD), str(standin.cudart), "20"], libs=[standin.cudart])
    assert run.returncode == 0, run.stderr
    (pid,) = run.query("SELECT DISTINCT pid FROM events WHERE op = 'cudaMalloc'")[0]
    report = explain_db(run.db, ExplainOptions())
    # when a finding is about that process's cudaMalloc calls
    finding = Finding(
        rule="test",
        kind="allocator-churn",
        severity=Severity.MEDIUM,
        symptom=Symptom("cudaMalloc spikes", op="cudaMalloc", pid=int(pid), count=40, p50_ns=1000, p99_ns=1000),
        causes=(),
        fix="fix",
    )
    conn = open_recording(run.db)
    try:
        named = _with_call_sites(conn, replace(report, findings=(finding,)))
    finally:
        conn.close()
    # then its symptom says where they come from
    sites = str(named.findings[0].symptom.extra.get("call_sites"))
    assert "100% of the cudaMalloc calls come from" in sites and "allocate_kv_cache" in sites, sites
    assert "stack_py.py" in sites
