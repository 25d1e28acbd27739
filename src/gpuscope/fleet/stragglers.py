"""Cross-node stragglers over the fleet: each node's collectives and clock, one corrected comparison.

Each node answers ``/api/v1/collectives`` (its ranks' collective calls with
the host activity before each, read from its own recording) and its clock is
measured as for ``gpuscope nodes``; ``analysis.cross_node`` does the rest.
A node that fails either request is a warning and is left out.
"""

from __future__ import annotations

from urllib.parse import urlencode

from gpuscope.analysis.cross_node import NodeCalls, cross_node_stragglers, payload_problem
from gpuscope.fleet.client import FleetClient
from gpuscope.model.findings import NodeFinding


def fleet_stragglers(
    client: FleetClient, *, since: str | None = None, reported: frozenset[str] = frozenset()
) -> tuple[list[NodeFinding], list[str], list[str]]:
    """(findings tagged with the straggler's node, warnings, notes).

    ``reported``: addresses of nodes that already failed (not asked again: a silent node would cost its
    timeout once more). Clocks are measured only where two or more nodes have NCCL communicators.
    """
    query = urlencode({"since": since} if since else {})
    asked = client.only([n.address for n in client.nodes if n.address not in reported])
    answers = asked.get("/api/v1/collectives" + (f"?{query}" if query else ""))
    warnings = [
        f"node {a.node.address}: {a.error} (left out of the cross-node comparison)" for a in answers if not a.ok
    ]
    answered = []
    for a in (a for a in answers if a.ok):
        problem = payload_problem(a.data)
        if problem is None:
            answered.append(a)
        else:
            warnings.append(f"node {a.node.address}: malformed collectives answer: {problem} (left out)")
    with_ranks = [a for a in answered if a.data.get("communicators")]
    if len(with_ranks) < 2:
        return [], warnings, []
    clocks = {c.node.address: c for c in asked.only([a.node.address for a in with_ranks]).clock()}
    nodes = []
    for a in with_ranks:
        clock = clocks.get(a.node.address)
        if clock is None or not clock.ok:
            warnings.append(
                f"node {a.node.address}: clock not measured ({clock.error if clock else 'no answer'}): "
                "left out of the cross-node comparison"
            )
            continue
        d = clock.data
        nodes.append(NodeCalls(a.node.address, int(d["clock_offset_ns"]), int(d["uncertainty_ns"]), a.data))
    found, notes = cross_node_stragglers(nodes)
    return found, warnings, notes
