"""What the fleet commands do with the nodes' answers: rows with a node column, findings merged by severity.

Pure functions of ``NodeResult`` lists, so the merging is tested without a network.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuscope.errors import GpuscopeError
from gpuscope.fleet.client import NodeResult

SEVERITY_ORDER = {"CRITICAL": 0, "HIGH": 1, "MEDIUM": 2, "LOW": 3}


class AllNodesFailedError(GpuscopeError):
    remedy = "check the addresses, that each node runs `gpuscope dashboard`, and the TLS files (see `gpuscope nodes`)"


@dataclass
class Gathered:
    """The merged answer and one warning per node that did not contribute."""

    columns: list[str] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    stacks: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)


def _check(results: list[NodeResult]) -> list[str]:
    warnings = [f"node {r.node.address}: {r.error}" for r in results if not r.ok]
    if results and all(not r.ok for r in results):
        raise AllNodesFailedError("every node failed: " + "; ".join(w.removeprefix("node ") for w in warnings))
    return warnings


def gather_rows(results: list[NodeResult]) -> Gathered:
    """Query answers as one table, ``node`` first; a node whose columns differ from the first is skipped, with a warning."""
    out = Gathered(warnings=_check(results))
    for r in results:
        if not r.ok:
            continue
        cols, rows = list(r.data.get("columns", [])), r.data.get("rows", [])
        if not out.columns:
            out.columns = ["node", *cols]
        elif out.columns[1:] != cols:
            out.warnings.append(f"node {r.node.address}: other columns ({', '.join(cols)}): left out")
            continue
        out.rows += [[r.node.address, *row] for row in rows]
        if r.data.get("truncated"):
            out.truncated.append(r.node.address)
    return out


def gather_findings(results: list[NodeResult]) -> Gathered:
    """Every node's findings, tagged with the node, most severe first (then the node's own rank)."""
    out = Gathered(warnings=_check(results))
    tagged = []
    for r in results:
        if r.ok:
            for rank, f in enumerate(r.data.get("findings", [])):
                tagged.append((SEVERITY_ORDER.get(str(f.get("severity")), 9), rank, r.node.address, f))
    tagged.sort(key=lambda t: (t[0], t[1], t[2]))
    out.findings = [{"node": node, **f} for _, _, node, f in tagged]
    return out


def merge_findings(findings: list[dict[str, Any]], more: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Two severity-ordered lists of tagged findings as one, most severe first (a stable merge)."""
    return sorted([*findings, *more], key=lambda f: SEVERITY_ORDER.get(str(f.get("severity")), 9))


def gather_stacks(results: list[NodeResult]) -> Gathered:
    """Every node's top stacks, in the nodes' order, each tagged with its node."""
    out = Gathered(warnings=_check(results))
    out.stacks = [{"node": r.node.address, **s} for r in results if r.ok for s in r.data.get("stacks", [])]
    return out
