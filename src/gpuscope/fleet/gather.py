"""What the fleet commands do with the nodes' answers: rows with a node column, findings merged by severity.

Pure functions of ``NodeResult`` lists, so the merging is tested without a network.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuscope.errors import GpuscopeError
from gpuscope.fleet.client import NodeResult
from gpuscope.model.finding_wire import MalformedFindingError
from gpuscope.model.findings import NodeFinding


class AllNodesFailedError(GpuscopeError):
    remedy = "check the addresses, that each node runs `gpuscope dashboard`, and the TLS files (see `gpuscope nodes`)"


@dataclass
class Gathered:
    """The merged answer and one warning per node that did not contribute."""

    columns: list[str] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)
    findings: list[NodeFinding] = field(default_factory=list)
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
    """Every node's findings, tagged with the node, most severe first (then the node's own rank, then the node).

    A node's answer is untrusted: a finding that is not ``Finding.as_dict()``'s
    shape is left out, its others are kept; one warning per node names the first.
    """
    out = Gathered(warnings=_check(results))
    tagged: list[tuple[int, str, NodeFinding]] = []
    for r in results:
        if not r.ok:
            continue
        found = r.data.get("findings") if isinstance(r.data, dict) else None
        if not isinstance(found, list):
            out.warnings.append(f"node {r.node.address}: its answer holds no list of findings: left out")
            continue
        bad: list[str] = []
        for rank, f in enumerate(found):
            try:
                tagged.append((rank, r.node.address, NodeFinding.from_dict(r.node.address, f)))
            except MalformedFindingError as exc:
                bad.append(f"finding {rank + 1} left out: {exc}")
        if bad:
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            out.warnings.append(f"node {r.node.address}: {bad[0]}{more}")
    tagged.sort(key=lambda t: (-t[2].finding.severity, t[0], t[1]))
    out.findings = [f for _, _, f in tagged]
    return out


def merge_findings(findings: list[NodeFinding], more: list[NodeFinding]) -> list[NodeFinding]:
    """Two severity-ordered lists of tagged findings as one, most severe first (a stable merge)."""
    return sorted([*findings, *more], key=lambda f: -f.finding.severity)


def gather_stacks(results: list[NodeResult]) -> Gathered:
    """Every node's top stacks, in the nodes' order, each tagged with its node."""
    out = Gathered(warnings=_check(results))
    out.stacks = [{"node": r.node.address, **s} for r in results if r.ok for s in r.data.get("stacks", [])]
    return out
