"""One renderer for findings: a fleet node's finding reads as a local one, with its node before its kind."""

from __future__ import annotations

from gpuscope.model.findings import Cause, Caveat, Finding, NodeFinding, Severity, Symptom
from gpuscope.render.explain import finding_lines, render_fleet_findings

MS = 1_000_000


def _finding(kind: str = "cpu-preemption", severity: Severity = Severity.HIGH) -> Finding:
    return Finding(
        rule=kind,
        kind=kind,
        severity=severity,
        symptom=Symptom(
            "syncs of train (pid 100) wait for the CPU",
            "cudaStreamSynchronize",
            100,
            "train",
            count=1_200,
            p50_ns=MS // 20,
            p99_ns=5 * MS,
            max_ns=6 * MS,
            extra={"call_sites": "train.py:42"},
        ),
        causes=(
            Cause(kind, ("one", "two", "three")),
            Cause("host-work", ("four",)),
        ),
        fix="pin the process to its own cores",
        caveats=(Caveat("lower-bound", "host", 3, text="3 host events lost"),),
    )


def test_a_finding_renders_its_symptom_evidence_caveats_and_fix() -> None:
    assert finding_lines(1, _finding()) == [
        "1. [HIGH] cpu-preemption: syncs of train (pid 100) wait for the CPU",
        "   symptom: cudaStreamSynchronize x1,200  p50 50.0 µs  p99 5.0 ms  max 6.0 ms",
        "   where: train.py:42",
        "   - one",
        "   - two",
        "   - three",
        "   - four",
        "   caveat: 3 host events lost",
        "   fix: pin the process to its own cores",
    ]


def test_a_nodes_finding_is_the_local_rendering_with_the_node_before_the_kind() -> None:
    local = finding_lines(2, _finding())
    fleet = finding_lines(2, _finding(), "gpu-1:8443")
    assert fleet[0] == "2. [HIGH] gpu-1:8443: cpu-preemption: syncs of train (pid 100) wait for the CPU"
    assert fleet[1:] == local[1:]


def test_the_fleets_findings_are_counted_then_listed_in_the_order_given() -> None:
    findings = [
        NodeFinding("gpu-2:8443", _finding("gpu-contention", Severity.CRITICAL)),
        NodeFinding("gpu-1:8443", _finding()),
        NodeFinding("gpu-1:8443", _finding("slow-sync", Severity.LOW)),
    ]
    text = render_fleet_findings(findings)
    blocks = text.split("\n\n")
    assert blocks[0] == "3 finding(s) across the nodes: 1 CRITICAL, 1 HIGH, 1 LOW"
    assert blocks[1:] == ["\n".join(finding_lines(i, f.finding, f.node)) for i, f in enumerate(findings, 1)]
    assert "2. [HIGH] gpu-1:8443: cpu-preemption:" in text


def test_no_findings_on_any_node_says_so() -> None:
    assert render_fleet_findings([]) == "no findings on any node"
