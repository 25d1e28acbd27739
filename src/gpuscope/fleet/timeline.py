"""One Perfetto timeline of several nodes, each node's clock corrected by its measured offset.

Every node's events come through its dashboard API (``/api/v1/events``, a
page at a time, so memory stays flat) and are written as Chrome Trace Event
JSON: one process track group per node, one thread track per traced thread.
Each node's wall-clock times are moved by the offset `gpuscope nodes`
measures (its clock minus ours), so the nodes line up on the client's
clock; the offsets and their uncertainty go into the trace's metadata, and a
note says when the uncertainty is too large for fine cross-node ordering.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, TextIO
from urllib.parse import urlencode

from gpuscope.fleet.client import FleetClient, NodeResult
from gpuscope.model.ops import AGGREGATED_OPS

PAGE = 10_000
_AGGREGATED = frozenset(op.name for op in AGGREGATED_OPS)  # counts over an interval, not calls: no slices
FINE_ORDER_NS = 1_000_000  # below this uncertainty, events of different nodes can be ordered to the ms


@dataclass
class FleetTimelineStats:
    events_written: int = 0
    nodes: int = 0
    events_cut: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    offsets: dict[str, dict[str, int]] = field(default_factory=dict)


def _us(ns: int) -> float:
    return round(ns / 1000, 3)


def export_fleet_timeline(
    client: FleetClient, out: TextIO, *, max_events_per_node: int | None = None
) -> FleetTimelineStats:
    """Write the nodes' events as one trace on the client's clock; a node that fails is a warning, not the end."""
    stats = FleetTimelineStats()
    clocks = client.clock()
    live = [c for c in clocks if c.ok]
    stats.warnings += [f"node {c.node.address}: {c.error}" for c in clocks if not c.ok]
    for c in live:
        stats.offsets[c.node.address] = {k: int(c.data[k]) for k in ("clock_offset_ns", "uncertainty_ns", "rtt_ns")}
    coarse = [f"{a} ±{o['uncertainty_ns'] / 1e6:.1f} ms" for a, o in stats.offsets.items()
              if o["uncertainty_ns"] > FINE_ORDER_NS]  # fmt: skip
    if coarse:
        stats.warnings.append(
            "clock offsets known only to " + ", ".join(coarse) + ": cross-node order finer than that is not meaningful"
        )
    out.write('{"traceEvents": [')
    first = True

    def emit(obj: dict[str, Any]) -> None:
        nonlocal first
        out.write(("\n" if first else ",\n") + json.dumps(obj, separators=(",", ":")))
        first = False

    # The trace starts at the earliest event of any node, on our clock: every timestamp is then positive.
    firsts = []
    for c in live:
        head = client.one(c.node, "GET", "/api/v1/events?limit=1")
        if head.ok and head.data["events"]:
            firsts.append(int(head.data["events"][0]["wall_ns"]) - stats.offsets[c.node.address]["clock_offset_ns"])
    t0 = min(firsts, default=0)
    threads: set[tuple[int, int]] = set()
    for index, clock in enumerate(live, 1):
        offset = stats.offsets[clock.node.address]["clock_offset_ns"]
        emit({"ph": "M", "name": "process_name", "pid": index, "args": {"name": f"node {clock.node.address}"}})
        after, written = 0, 0
        while True:
            page = _page(client, clock, after)
            if not page.ok:
                stats.warnings.append(f"node {clock.node.address}: {page.error} (its timeline stops there)")
                break
            for e in page.data["events"]:
                if max_events_per_node is not None and written >= max_events_per_node:
                    stats.events_cut[clock.node.address] = stats.events_cut.get(clock.node.address, 0) + 1
                    continue
                if e["op"] in _AGGREGATED:
                    continue
                at = int(e["wall_ns"]) - offset  # this node's time, on the client's clock
                key = (int(e["pid"]), int(e["tid"]))
                tid = int(e["tid"])
                if (index, tid) not in threads:
                    threads.add((index, tid))
                    name = f"{e['comm']} [{key[0]}/{tid}]"
                    emit({"ph": "M", "name": "thread_name", "pid": index, "tid": tid, "args": {"name": name}})
                dur = int(e["duration_ns"] or 0)
                event = {"name": e["op"], "cat": e["source"], "pid": index, "tid": tid, "ts": _us(max(0, at - t0))}
                emit({**event, "ph": "X", "dur": _us(dur)} if dur > 0 else {**event, "ph": "i", "s": "t"})
                written += 1
            after = page.data.get("next_after")
            if after is None:
                break
        stats.events_written += written
        stats.nodes += 1
    meta = {
        "producer": "gpuscope export --nodes",
        "t0_client_wall_ns": t0,
        "clock": "each node's times moved onto this client's clock by its measured offset (node minus client)",
        "clock_offsets": stats.offsets,
        "warnings": stats.warnings,
    }
    out.write('\n], "displayTimeUnit": "ms", "otherData": ' + json.dumps(meta) + "}\n")
    return stats


def _page(client: FleetClient, clock: NodeResult, after: int) -> NodeResult:
    """One page of one node's events (the client asks every node; only this node's answer is used)."""
    path = "/api/v1/events?" + urlencode({"after": after, "limit": PAGE})
    return client.one(clock.node, "GET", path)
