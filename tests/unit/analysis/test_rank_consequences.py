"""A throughput drop in a process that also has a causal finding is ranked as its consequence."""

from __future__ import annotations

from gpuscope.analysis.engine import _rank_consequences
from gpuscope.model.findings import Finding, Severity, Symptom


def _f(kind: str, sev: Severity, pid: int, lost: int) -> Finding:
    symptom = Symptom(f"{kind} of {pid}", op="cudaStreamSynchronize", pid=pid)
    return Finding(rule=kind, kind=kind, severity=sev, symptom=symptom, causes=(), fix="fix", lost_ns=lost)


def test_a_drop_with_a_cause_in_the_same_process_is_ranked_below_it() -> None:
    drop, cause = _f("throughput-drop", Severity.HIGH, 7, 900), _f("cpu-preemption", Severity.HIGH, 7, 100)
    ranked = {f.kind: f for f in _rank_consequences([drop, cause])}
    assert ranked["throughput-drop"].severity == Severity.MEDIUM
    assert ranked["cpu-preemption"].severity == Severity.HIGH
    assert "coincides with cpu-preemption" in ranked["throughput-drop"].causes[-1].evidence[0]


def test_a_drop_without_a_cause_or_in_another_process_keeps_its_severity() -> None:
    drop, other = _f("throughput-drop", Severity.HIGH, 7, 900), _f("cpu-preemption", Severity.HIGH, 8, 100)
    assert _rank_consequences([drop, other])[0].severity == Severity.HIGH
    low_cause = _f("cold-start", Severity.LOW, 7, 10)
    assert _rank_consequences([drop, low_cause])[0].severity == Severity.HIGH
