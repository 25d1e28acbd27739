"""Caveats: which numbers of a report are lower bounds, because events of their source were lost.

A finding's numbers come from the events of some sources: its symptom's op
(CUDA runtime, driver or NCCL calls), host events for the rules whose cause
is read on the host (scheduler, block I/O, memory, TCP, OOM), call stacks for
its call sites. When the analysed window lost events of one of those
sources, the finding says so, with how many.
"""

from __future__ import annotations

from dataclasses import replace

from gpuscope.analysis.cpu_profile import HOST_TIME
from gpuscope.analysis.frame import Aggregates
from gpuscope.analysis.recording_state import EVENT_SOURCES, RecordingState, SourceDrops
from gpuscope.model.findings import Caveat, Finding
from gpuscope.model.ops import Op, source_of

GPU_SOURCES = frozenset({"cuda", "driver", "nccl"})
# Rules that read host events (sched_switch, block I/O, reclaim, TCP, OOM) for their cause or to rule one out.
HOST_EVENT_RULES = frozenset(
    {
        "cpu-preemption",
        "noisy-neighbour",
        "block-io",
        "memory-pressure",
        "tcp-retransmit",
        "oom",
        "data-starvation",
        "launch-bound",
        "gil-bound",
        "sync-in-loop",
        "sync-stall",
        "nccl-straggler",
    }
)
# The GPU sources of findings whose symptom names no op: every GPU source, except for these.
_GPU_SOURCES_WITHOUT_OP = {
    "oom": frozenset[str](),
    "data-starvation": frozenset({"cuda", "driver"}),
    "launch-bound": frozenset({"cuda", "driver"}),
    "gil-bound": frozenset({"cuda", "driver"}),
}


def counted_by_source(aggregates: Aggregates | None) -> dict[str, int] | None:
    """Events of each source counted in the window's aggregates (None without aggregates)."""
    if aggregates is None:
        return None
    out: dict[str, int] = {}
    for op, n in zip(aggregates.op.tolist(), aggregates.count.tolist(), strict=True):
        src = source_of(int(op)).value
        out[src] = out.get(src, 0) + int(n)
    return out


def finding_sources(f: Finding) -> frozenset[str]:
    """The sources a finding's numbers are read from."""
    out = {"host"} if f.rule in HOST_EVENT_RULES else set()
    op = Op.__members__.get(f.symptom.op) if f.symptom.op else None
    if op is not None:
        out.add(source_of(int(op)).value)
    else:
        out |= _GPU_SOURCES_WITHOUT_OP.get(f.rule, GPU_SOURCES)
    if f.symptom.extra.get("call_sites"):
        out.add("stack")
    if any(c.kind == HOST_TIME for c in f.causes) or f.rule == "gil-bound":
        out.add("cpu_sample")  # the code named comes from on-CPU samples
    return frozenset(out)


def caveat(d: SourceDrops) -> Caveat | None:
    """The caveat for a source's losses in the window, or None when it lost nothing there."""
    if not d.in_window and not d.unlocated:
        return None
    share = f" ({d.window_share:.1%} of them)" if d.window_share is not None and d.in_window else ""
    unlocated = (
        f"{d.unlocated:,} {d.source} events were dropped at times not recorded, in a session this window overlaps"
    )
    if d.source == "stack":
        text = f"call sites come from a partial sample: {d.in_window + d.unlocated:,} call stacks were dropped"
        text += " in this window" if not d.unlocated else " in or around this window"
    elif d.source == "cpu_sample":
        text = f"the code named comes from fewer samples: {d.in_window + d.unlocated:,} on-CPU samples were dropped"
        text += " in this window" if not d.unlocated else " in or around this window"
    elif d.in_window:
        text = f"counts are lower bounds: {d.in_window:,} {d.source} events were dropped in this window{share}"
        if d.unlocated:
            text += f"; {d.unlocated:,} more at times not recorded"
    else:
        text = f"counts may be lower bounds: {unlocated}"
    return Caveat("lower-bound", d.source, d.in_window, d.unlocated, d.window_share, text)


def window_caveats(state: RecordingState) -> tuple[Caveat, ...]:
    """Caveats on the window's own numbers (stats, event count): every event source that lost events in it."""
    out = [caveat(d) for d in state.drops if d.source in EVENT_SOURCES]
    return tuple(c for c in out if c is not None)


def with_caveats(findings: tuple[Finding, ...], state: RecordingState) -> tuple[Finding, ...]:
    """Each finding with a caveat for every source of its numbers that lost events in the window."""
    by_source = {d.source: c for d in state.drops if (c := caveat(d)) is not None}
    if not by_source:
        return findings
    out = []
    for f in findings:
        sources = finding_sources(f)
        mine = tuple(c for src, c in by_source.items() if src in sources)
        out.append(replace(f, caveats=mine) if mine else f)
    return tuple(out)
