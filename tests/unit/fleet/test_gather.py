"""Merging the nodes' findings: typed, most severe first, a node's malformed finding a warning and not a crash."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuscope.fleet.client import Node, NodeResult
from gpuscope.fleet.gather import AllNodesFailedError, gather_findings, merge_findings
from gpuscope.model.findings import Cause, Finding, NodeFinding, Severity, Symptom

A = Node("gpu-a", 8443)
B = Node("gpu-b", 8443)


def _finding(kind: str, severity: Severity, pid: int = 100) -> Finding:
    return Finding(
        rule=kind,
        kind=kind,
        severity=severity,
        symptom=Symptom(f"{kind} of pid {pid}", "cudaStreamSynchronize", pid, "train", count=3, p50_ns=1_000),
        causes=(Cause(kind, (f"{kind} evidence",)),),
        fix=f"fix {kind}",
        lost_ns=10,
        wall_ns=100,
    )


def _answer(node: Node, *findings: Finding | dict[str, Any] | int) -> NodeResult:
    """A node's /api/v1/findings answer, through JSON as it comes over the network."""
    wire = [f.as_dict() if isinstance(f, Finding) else f for f in findings]
    return NodeResult(node, json.loads(json.dumps({"findings": wire, "reference_findings": []})))


def test_findings_are_tagged_with_their_node_most_severe_first_then_by_each_nodes_rank() -> None:
    # given two nodes, each with its findings in its own order
    a = _answer(A, _finding("slow-sync", Severity.LOW), _finding("cpu-preemption", Severity.HIGH))
    b = _answer(B, _finding("gpu-contention", Severity.HIGH), _finding("cold-start", Severity.MEDIUM))
    # when
    got = gather_findings([a, b])
    # then
    assert got.warnings == []
    assert [(f.node, f.finding.kind) for f in got.findings] == [
        ("gpu-b:8443", "gpu-contention"),
        ("gpu-a:8443", "cpu-preemption"),
        ("gpu-b:8443", "cold-start"),
        ("gpu-a:8443", "slow-sync"),
    ]
    assert all(isinstance(f, NodeFinding) and isinstance(f.finding.severity, Severity) for f in got.findings)


def test_a_gathered_finding_is_sent_on_as_the_node_sent_it_with_its_node_first() -> None:
    # given a node's finding as it arrived
    sent = _finding("cpu-preemption", Severity.HIGH)
    # when
    [got] = gather_findings([_answer(A, sent)]).findings
    # then explain --nodes --json carries it byte for byte, after its node
    assert json.dumps(got.as_dict()) == json.dumps({"node": "gpu-a:8443", **sent.as_dict()})


def test_a_malformed_finding_is_a_warning_naming_its_node_and_the_nodes_other_findings_are_kept() -> None:
    # given node a sends one good finding and one without a symptom; node b one with an unknown severity
    bad = _finding("oom", Severity.CRITICAL).as_dict()
    del bad["symptom"]  # type: ignore[misc]
    worse = {**_finding("oom", Severity.CRITICAL).as_dict(), "severity": "APOCALYPTIC"}
    answers = [_answer(A, _finding("slow-sync", Severity.LOW), dict(bad)), _answer(B, worse, worse, 7)]
    # when
    got = gather_findings(answers)
    # then one warning per node, naming the first finding left out
    assert [(f.node, f.finding.kind) for f in got.findings] == [("gpu-a:8443", "slow-sync")]
    assert got.warnings == [
        "node gpu-a:8443: finding 2 left out: malformed finding: finding: no 'symptom'",
        "node gpu-b:8443: finding 1 left out: malformed finding: finding.severity: expected one of LOW, MEDIUM, "
        "HIGH, CRITICAL, got 'APOCALYPTIC' (and 2 more)",
    ]


@pytest.mark.parametrize("data", [{"findings": {"x": 1}}, {"error": "?"}, [1, 2], None, "findings"])
def test_an_answer_without_a_list_of_findings_is_a_warning(data: object) -> None:
    got = gather_findings([NodeResult(A, data), _answer(B, _finding("cold-start", Severity.MEDIUM))])
    assert got.warnings == ["node gpu-a:8443: its answer holds no list of findings: left out"]
    assert [f.node for f in got.findings] == ["gpu-b:8443"]


def test_a_failed_node_is_a_warning_and_every_node_failing_is_an_error() -> None:
    dead = NodeResult(B, error="connection refused")
    got = gather_findings([_answer(A, _finding("cold-start", Severity.MEDIUM)), dead])
    assert got.warnings == ["node gpu-b:8443: connection refused"] and len(got.findings) == 1
    with pytest.raises(AllNodesFailedError):
        gather_findings([dead])


def test_merging_keeps_severity_order_and_puts_later_findings_after_earlier_ones_of_their_severity() -> None:
    nodes = [
        NodeFinding("gpu-a:8443", _finding("cpu-preemption", Severity.HIGH)),
        NodeFinding("gpu-a:8443", _finding("slow-sync", Severity.LOW)),
    ]
    cross = [
        NodeFinding("gpu-b:8443", _finding("nccl-cross-node-straggler", Severity.HIGH)),
        NodeFinding("gpu-b:8443", _finding("nccl-cross-node-straggler", Severity.CRITICAL, pid=7)),
    ]
    merged = merge_findings(nodes, cross)
    assert [(f.finding.severity.name, f.finding.kind) for f in merged] == [
        ("CRITICAL", "nccl-cross-node-straggler"),
        ("HIGH", "cpu-preemption"),
        ("HIGH", "nccl-cross-node-straggler"),
        ("LOW", "slow-sync"),
    ]
