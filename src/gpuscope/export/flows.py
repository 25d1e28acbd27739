"""Flow arrows of a Perfetto export: which slices caused a finding's symptom calls, and where an arrow can bind.

Perfetto binds a v1 flow event (``"ph": "s"``/``"f"``) to the innermost
slice open at its timestamp on its thread, and drops a flow whose end comes
before its start; the points chosen here satisfy both.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from gpuscope.query.finding_sources import FindingMarker


class Span(NamedTuple):
    """An exported slice, as the flow linker needs it (``ts``/``end`` in the session's ns)."""

    sid: int
    ts: int
    end: int
    pid: int
    tid: int
    op: str
    arg0: int
    stream: int
    cgroup_id: int


@dataclass(frozen=True, slots=True)
class CauseLink:
    """Which slices are a finding kind's cause: ``ops`` of the symptom's process that ``keep`` accepts.

    ``same_thread``: the cause is on the symptom call's own thread (an
    off-CPU interval inside the call), else on any thread of its process.
    """

    ops: tuple[str, ...]
    same_thread: bool
    keep: Callable[[Span], bool] = lambda s: True


# The host-cause rules (analysis/rules/host.py) whose cause is an event with a
# duration; the others (GPU rules, page-allocation bursts, now counters, TCP
# retransmits, instants) have no slice to start an arrow from.
CAUSE_LINKS: dict[str, CauseLink] = {
    "cpu-preemption": CauseLink(("sched_switch",), True, lambda s: s.arg0 != 0),
    # stream holds the preemptor's cgroup on a sched_switch row (<= 1: unknown or the root)
    "noisy-neighbour": CauseLink(
        ("sched_switch",), True, lambda s: s.arg0 != 0 and s.stream > 1 and s.stream != s.cgroup_id
    ),
    "block-io": CauseLink(("block_io",), False),
    "memory-pressure": CauseLink(("direct_reclaim",), False),
}
MAX_LINKS_PER_FINDING = 10
"""Arrows per finding: to its symptom calls most overlapped by one cause slice (more would hide the timeline)."""
_EDGE_NS = 5
"""How far inside a slice a flow event sits: Perfetto binds it to the innermost slice open at its ``ts``
(and converts µs to ns with rounding), so a point on an edge could land on a neighbour."""


def symptom_pid(m: FindingMarker) -> int | None:
    """The symptom's pid, read back from the finding id (``Finding.id`` is ``kind[-pid][-op]``)."""
    prefix = m.kind + "-"
    if not m.kind or not m.op or not m.key.startswith(prefix) or not m.key.endswith("-" + m.op):
        return None
    middle = m.key[len(prefix) : -len(m.op) - 1]
    return int(middle) if middle.isdigit() else None


def flow_points(call: Span, cause: Span) -> tuple[int, int] | None:
    """Where the arrow starts (inside ``cause``) and ends (inside ``call``), or None when it cannot bind.

    It starts just after the cause begins and ends just before the call
    returns: start before end (Perfetto drops a flow whose end comes first),
    each point inside its own slice and, on a shared thread, outside the other.
    """
    start, end = cause.ts + _EDGE_NS, call.end - _EDGE_NS
    if start >= cause.end - _EDGE_NS or end <= call.ts + _EDGE_NS or start >= end:
        return None
    if cause.tid == call.tid and not (call.ts < cause.ts and cause.end < end):
        return None  # on one thread only a cause nested in the call gives two distinct slices
    return start, end


def link_causes(rows: Iterable[Span], pid: int, op: str, link: CauseLink, limit: int) -> list[tuple[Span, Span]]:
    """Pair symptom calls (``op`` of ``pid``) with the cause slice overlapping each most; the ``limit`` worst.

    ``rows``: the symptom and cause ops' slices in time order. One sweep:
    only the slices still open at the current time are held.
    """
    open_calls: dict[int, list[Span]] = {}
    open_causes: dict[int, list[Span]] = {}
    best: dict[Span, tuple[int, Span]] = {}
    worst: list[tuple[int, Span, Span]] = []  # min-heap of (overlap, call, cause): the `limit` largest

    def settle(call: Span) -> None:
        hit = best.pop(call, None)
        if hit is None:
            return
        if len(worst) < limit:
            heapq.heappush(worst, (hit[0], call, hit[1]))
        else:
            heapq.heappushpop(worst, (hit[0], call, hit[1]))

    def consider(call: Span, cause: Span) -> None:
        if (link.same_thread and cause.tid != call.tid) or flow_points(call, cause) is None:
            return
        overlap = min(call.end, cause.end) - max(call.ts, cause.ts)
        if overlap > best.get(call, (0, call))[0]:
            best[call] = (overlap, cause)

    for s in rows:
        if s.pid != pid or s.end <= s.ts:
            continue
        calls, causes = open_calls.setdefault(s.sid, []), open_causes.setdefault(s.sid, [])
        for c in [c for c in calls if c.end <= s.ts]:
            settle(c)
        calls[:] = [c for c in calls if c.end > s.ts]
        causes[:] = [c for c in causes if c.end > s.ts]
        if s.op == op:
            for cause in causes:
                consider(s, cause)
            calls.append(s)
        elif s.op in link.ops and link.keep(s):
            for call in calls:
                consider(call, s)
            causes.append(s)
    for calls in open_calls.values():
        for c in calls:
            settle(c)
    return [(call, cause) for _, call, cause in sorted(worst, key=lambda w: (-w[0], w[1].ts))]
